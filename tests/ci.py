"""Is this CI? One answer for every test that skips on a laptop and must never skip in CI.

A test that needs something a laptop may lack (a binary built from Go, the native YAML reader, a
control plane) skips without it, with the way to get it; in CI the same lack is a failure, so a
broken build step can never turn into a green run of skipped tests. Every such test asks `ci()`,
never the environment itself: the suite once had four answers (`CI == "true"`, three lists of
false values, one that skipped even in CI), and a CI that set `CI=1` got a different suite from
one that set `CI=true`.

The answer fails closed: `CI` counts as true unless it is unset or one of the usual false values
(`""`, `0`, `false`, `no`, `off`, any case). GitHub Actions sets `CI=true`; `.ci/run` sets
`CI=true` when its caller did not set `CI` at all.

The markers for such tests are registered in pyproject.toml: `binaries` (a tool or file built
from a Go module: kubectl, helm, prune-gate-kustomize, actionlint, promtool, the SARIF schema)
and `native` (the native YAML reader, built with cargo). Deselect them with
`-m "not binaries"`; CI runs them.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pytest

#: The values of `CI` that mean "not CI"; anything else set means CI.
NOT_CI = frozenset({"", "0", "false", "no", "off"})

_Test = TypeVar("_Test", bound=Callable[..., object])


def ci(environ: Mapping[str, str] = os.environ) -> bool:
    """True when running under CI: `CI` is set to anything but a false value (see `NOT_CI`)."""
    return environ.get("CI", "").strip().lower() not in NOT_CI


def needs_binaries(found: bool, reason: str) -> Callable[[_Test], _Test]:
    """Mark a test `binaries`, and skip it when `found` is false, except in CI where it runs (and
    fails on what is missing). `reason` says what is missing and how to get it."""
    skip = pytest.mark.skipif(not found and not ci(), reason=reason)

    def apply(test: _Test) -> _Test:
        marked: _Test = pytest.mark.binaries(skip(test))
        return marked

    return apply


@functools.cache
def pinned_binary(name: str) -> str:
    """The path of a binary `scripts/build-binaries` pins (building it when missing); skip
    without it on a laptop, fail in CI."""
    done = subprocess.run(
        [str(Path(__file__).resolve().parents[1] / "scripts" / "build-binaries"), "path", name],
        capture_output=True,
        text=True,
        check=False,
    )
    path = done.stdout.strip()
    if done.returncode == 0 and path and Path(path).is_file():
        return path
    message = f"{name} is not available (scripts/build-binaries path {name}): {done.stderr}"
    if ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
