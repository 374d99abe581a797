"""Shared by every test: no test may depend on the machine's speed.

Hypothesis's defaults do (a 200 ms deadline per example, a health check that fails a slow
generator): on a shared, loaded CI machine they fail a correct test. The profile loaded here
turns both off for every property test, explicit `@settings` included (they inherit from it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("prune-gate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("prune-gate")

# Parsed manifests are cached between runs (gate.sources.parsecache): the tests keep theirs in a
# folder of their own, so no run reads what another run, or the person running them, left behind.
os.environ.setdefault("PRUNE_GATE_PARSE_CACHE", tempfile.mkdtemp(prefix="prune-gate-parsed-"))


@pytest.fixture(autouse=True)
def _builds_kept_per_test(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test keeps its kustomize builds (gate.sources.buildcache) to itself: a test that
    breaks a build on purpose (a fault in the helper, a timeout) must build, not reuse what
    another test built from the same files. Within a test the cache is on, as for a user."""
    from gate.sources import buildcache, render

    before = os.environ.get(buildcache.ENV)
    if before is None:  # the person running the tests may turn it off for all of them
        os.environ[buildcache.ENV] = str(tmp_path_factory.mktemp("builds"))
    buildcache.reset()
    yield
    buildcache.reset()
    render.forget_kept()  # a helper or an export kept for the next tree is this test's
    if before is None:
        os.environ.pop(buildcache.ENV, None)
