"""The wheels of the Action's hashed lock (action/requirements.txt), downloaded once per lock and
platform into ~/.cache/prune-gate/wheelhouse (or under $PRUNE_GATE_CACHE), for the tests that
install from the lock with no index: `pip download --require-hashes` checks every file against
the lock as it downloads it, so a wheelhouse holds only what the lock admits.

pip reads the environment and its config files: `offline_pip_env` drops both (a machine's
find-links folder would otherwise fill in what the wheelhouse lacks, hiding an incomplete lock).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "action" / "requirements.txt"
CACHE = Path(
    os.environ.get("PRUNE_GATE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prune-gate"
)


def offline_pip_env(**extra: str) -> dict[str, str]:
    """The environment for a pip that must see only the folders it is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def wheelhouse(platform: tuple[str, ...] | None = None) -> Path:
    """A folder holding the lock's files for this interpreter and platform, or for `platform`
    (PYTHON_VERSION, PIP_PLATFORM_TAG...: binary wheels only), downloaded on first use."""
    lock = LOCK.read_bytes()
    tag = "host-" + sys.implementation.cache_tag if platform is None else "-".join(platform[:2])
    folder = CACHE / "wheelhouse" / f"{hashlib.sha256(lock).hexdigest()[:16]}-{tag}"
    if (folder / ".complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    where = [] if platform is None else ["--only-binary=:all:", "--python-version", platform[0]]
    where += [arg for tag in (platform or ())[1:] for arg in ("--platform", tag)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--require-hashes",
            "--no-deps",
            *where,
            "-r",
            str(LOCK),
            "-d",
            str(folder),
        ],
        env={k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"pip download of the lock for {tag} failed:\n{done.stderr}"
    (folder / ".complete").touch()
    return folder
