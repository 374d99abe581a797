"""The operator's kit as its users install it: the pre-commit hook through real pre-commit, and
the krew plugin's first run, which installs prune-gate with pip.

Both install prune-gate from HEAD (`git archive`: only what is committed) with no index: its
dependencies come from the wheels of the Action's hashed lock (tests/wheelhouse.py), setuptools
among them for the build. pre-commit itself (pinned) is installed once from PyPI into
~/.cache/prune-gate (or $PRUNE_GATE_CACHE). No control plane is needed; they are in this tier
for their minute of pip installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gate import __version__
from tests.unit.helpers import GitRepo
from tests.wheelhouse import CACHE, offline_pip_env, wheelhouse

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = ROOT / "examples" / "incident"
PRE_COMMIT = "pre-commit==4.7.0"
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: headlamp\n"


@pytest.fixture(scope="module")
def head_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HEAD's files, as a repository of one commit (pre-commit installs a hook repository from
    a commit)."""
    repo = tmp_path_factory.mktemp("prune-gate")
    archive = subprocess.run(
        ["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True, timeout=300
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True, timeout=300)
    r = GitRepo.__new__(GitRepo)
    r.root = repo
    r.git("init", "-q", "-b", "main")
    r.git("add", "-A")
    r.git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "HEAD")
    return repo


@pytest.fixture(scope="module")
def pip_env() -> dict[str, str]:
    """pip with no index: the lock's wheels only."""
    return offline_pip_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse()))


@pytest.fixture(scope="module")
def pre_commit() -> Path:
    """The pinned pre-commit, in a virtualenv of its own made once (moved into place whole)."""
    venv = CACHE / f"{PRE_COMMIT.replace('==', '-')}-{sys.implementation.cache_tag}"
    exe = venv / "bin" / "pre-commit"
    if not exe.exists():
        tmp = CACHE / f".{venv.name}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, timeout=300)
        subprocess.run(
            [str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet", PRE_COMMIT],
            check=True,
            timeout=600,
        )
        # Its scripts name the folder they were made in: run it as `python -m pre_commit`.
        if not venv.exists():
            tmp.rename(venv)
        shutil.rmtree(tmp, ignore_errors=True)
    return venv / "bin" / "python"


def test_pre_commit_stops_a_commit_that_deletes_a_mounted_claim(
    head_tree: Path, pre_commit: Path, pip_env: dict[str, str], tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=head_tree, capture_output=True, text=True, check=True
    ).stdout.strip()
    config = f"repos:\n  - repo: {head_tree}\n    rev: {sha}\n    hooks:\n      - id: prune-gate\n"
    repo.commit(
        {
            ".pre-commit-config.yaml": config,
            "deploy/headlamp.yaml": (INCIDENT / "base" / "headlamp.yaml").read_text("utf-8"),
        },
        "base",
    )
    env = {k: v for k, v in pip_env.items() if not k.startswith(("GITHUB_", "GIT_"))}
    env.pop("CI", None)
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    env["PATH"] = f"{pre_commit.parent}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=repo.root, capture_output=True, text=True, env=env, timeout=900
        )

    done = run(str(pre_commit), "-m", "pre_commit", "install", "--install-hooks")
    assert done.returncode == 0, done.stdout + done.stderr
    head = repo.git("rev-parse", "HEAD")

    repo.write({"deploy/headlamp.yaml": (INCIDENT / "candidate" / "headlamp.yaml").read_text()})
    repo.git("add", "-A")
    done = run("git", "commit", "-m", "drop the claim")
    said = done.stdout + done.stderr  # git gives a hook's output on stderr
    assert done.returncode != 0
    assert "prune-gate (gate check on the staged change)" in said
    assert "Failed" in said and "CONSUMER_REMAINS" in said, said
    assert repo.git("rev-parse", "HEAD") == head

    repo.git("reset", "-q", "--hard", "HEAD")
    repo.write({"deploy/settings.yaml": CONFIG_MAP})
    repo.git("add", "-A")
    done = run("git", "commit", "-m", "a setting")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed" in done.stdout + done.stderr
    assert repo.git("rev-parse", "HEAD^") == head


def test_the_krew_plugins_first_run_installs_prune_gate_once(
    head_tree: Path, pip_env: dict[str, str], tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "."],
        cwd=head_tree,
        env=pip_env,
        check=True,
        timeout=600,
    )
    plugin = tmp_path / "kubectl-prune_gate"
    text = (ROOT / "plugins" / "krew" / "kubectl-prune_gate").read_text("utf-8")
    plugin.write_text(text.replace("@VERSION@", __version__), "utf-8")
    plugin.chmod(0o755)
    # python3 is this interpreter: the lock's wheels are for its version.
    (tmp_path / "python").mkdir()
    python3 = tmp_path / "python" / "python3"
    python3.symlink_to(sys.executable)
    env = {
        **pip_env,
        "PIP_FIND_LINKS": f"{wheels} {pip_env['PIP_FIND_LINKS']}",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PATH": f"{python3.parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
    }
    env.pop("PRUNE_GATE_PYTHON", None)
    venv = tmp_path / "data" / "prune-gate" / "kubectl-plugin" / __version__
    for first in (True, False):
        done = subprocess.run(
            [str(plugin), "version"], capture_output=True, text=True, env=env, timeout=900
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"gate {__version__} (Python ")
        assert f"{venv}/bin/python" in done.stdout
        assert ("installing prune-gate" in done.stderr) is first
    assert not list(venv.parent.glob(".install.*"))
