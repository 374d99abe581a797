"""Shared by every test: no test may depend on the machine's speed.

Hypothesis's defaults do (a 200 ms deadline per example, a health check that fails a slow
generator): on a shared, loaded CI machine they fail a correct test. The profile loaded here
turns both off for every property test, explicit `@settings` included (they inherit from it).
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, settings

settings.register_profile("prune-gate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("prune-gate")

# Parsed manifests are cached between runs (gate.sources.parsecache): the tests keep theirs in a
# folder of their own, so no run reads what another run, or the person running them, left behind.
os.environ.setdefault("PRUNE_GATE_PARSE_CACHE", tempfile.mkdtemp(prefix="prune-gate-parsed-"))
