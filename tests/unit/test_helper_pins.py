"""action/helper.sha256 pins the helper binaries (prune-gate-kustomize-OS-ARCH) a release
publishes and the Action downloads; the Action refuses a binary whose sha256 is not its pin. The
pins hold only while the build is reproducible (scripts/dist: Go pinned to one toolchain,
-trimpath, no VCS stamp, an empty build id), so the build for this machine's platform must give
its pin byte for byte. scripts/dist keeps the builds in ~/.cache/prune-gate/dist/helper, keyed by
the sources, the toolchain and the platform: after the first build this costs a second. The other
platforms are built and checked by `make dist` (tests/e2e/test_dist.py) and the release workflow.
"""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ci import needs_binaries

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "action" / "helper.sha256"
PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def pins() -> dict[str, str]:
    lines = PINS.read_text("utf-8").splitlines()
    assert all(
        re.fullmatch(r"[0-9a-f]{64}  prune-gate-kustomize-[a-z]+-[a-z0-9]+", x) for x in lines
    )
    return {name: digest for digest, name in (line.split("  ") for line in lines)}


def test_every_platform_a_release_publishes_has_one_pin() -> None:
    assert sorted(pins()) == sorted(
        f"prune-gate-kustomize-{p.replace('/', '-')}" for p in PLATFORMS
    )


@needs_binaries(shutil.which("go") is not None, "the helper is built with Go (https://go.dev/dl/)")
def test_the_reproducible_build_for_this_platform_is_its_pin() -> None:
    host = f"{platform.system().lower()}/{GOARCH.get(platform.machine(), platform.machine())}"
    if host not in PLATFORMS:
        pytest.skip(f"a release publishes no helper for {host}")
    built = subprocess.run(
        [str(ROOT / "scripts" / "dist"), "helper", host],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    binary = Path(built.stdout.strip().splitlines()[-1])
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    name = f"prune-gate-kustomize-{host.replace('/', '-')}"
    assert pins()[name] == digest, (
        f"{name} built here is {digest}, not its pin: if the change is meant, `make helper-pins`"
    )
