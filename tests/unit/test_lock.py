"""action/requirements.txt, the hashed lock the Action installs prune-gate's dependencies from
(`make lock`, scripts/lock): it holds pyproject.toml's runtime dependencies and build backend at
versions pyproject admits, none of the extras, a sha256 for every file, and it is complete: with
`--require-hashes` pip refuses any dependency the lock does not pin, so a dry-run install from
the lock's own wheels, with no index, proves that nothing is missing, on this machine and on the
platforms the Action runs on (CPython 3.11-3.13, Linux and macOS, x86_64 and arm64)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.wheelhouse import LOCK, offline_pip_env, wheelhouse

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")


def locked() -> dict[str, tuple[Version, int]]:
    """Each pinned distribution: its version and how many hashes it has."""
    pins: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in LOCK.read_text("utf-8").splitlines():
        if m := PIN.match(line):
            name = canonicalize_name(m[1])
            assert name not in pins, f"{name} is pinned twice"
            pins[name] = (Version(m[2]), 0)
        elif line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


def test_the_lock_admits_pyprojects_dependencies_and_build_backend() -> None:
    pins = locked()
    wanted = [*PYPROJECT["project"]["dependencies"], *PYPROJECT["build-system"]["requires"]]
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"the lock lacks {text}: run `make lock`"
        assert requirement.specifier.contains(pins[name][0], prereleases=True), (
            f"the lock pins {name}=={pins[name][0]}, which {text} does not admit: run `make lock`"
        )


def test_every_pin_has_its_hashes_and_no_extra_is_locked() -> None:
    pins = locked()
    assert all(hashes for _, hashes in pins.values()), pins
    extras = PYPROJECT["project"]["optional-dependencies"]
    for text in extras["webhook"] + extras["dev"]:
        name = canonicalize_name(Requirement(text).name)
        runtime = {
            canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]
        }
        assert name in runtime or name not in pins, f"{name} is an extra's, not the Action's"


def dry_run(folder: Path, *where: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-index",
            "--find-links",
            str(folder),
            "--require-hashes",
            "-r",
            str(LOCK),
            *where,
        ],
        env=offline_pip_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_lock_is_complete_here() -> None:
    """Every dependency of every pin is pinned and hashed: pip, in --require-hashes mode, refuses
    to install a dependency the lock lacks, and has no index to take one from."""
    done = dry_run(wheelhouse())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Would install" in done.stdout


@pytest.mark.parametrize(
    "python_version,platform",
    [
        # pip does not widen a given manylinux tag to the older ones a runner's pip accepts.
        ("3.12", "manylinux_2_28_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64"),
        ("3.13", "macosx_14_0_arm64"),
        ("3.11", "macosx_13_0_x86_64"),
    ],
)
def test_the_lock_is_complete_where_the_action_runs(python_version: str, platform: str) -> None:
    """The same on the other runners (wheels only, as pip takes them there): each file pip picks
    is one the lock hashes."""
    tags = platform.split()
    folder = wheelhouse((python_version, *tags))
    where = [arg for tag in tags for arg in ("--platform", tag)]
    done = dry_run(folder, "--only-binary=:all:", "--python-version", python_version, *where)
    assert done.returncode == 0, done.stdout + done.stderr
