"""`gate check --head :staged` and the pre-commit hook that runs it (.pre-commit-hooks.yaml).

The hook's entry, with pre-commit's own splitting, runs here in a throwaway repository: a staged
deletion of a mounted claim is exit 1, a harmless staged change exit 0, and what is not staged
does not count either way. tests/e2e/test_pre_commit.py runs the same hook through pre-commit.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gate.model.errors import GitError
from gate.sources import gitsource
from tests.unit.helpers import GitRepo

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = ROOT / "examples" / "incident"
BASE = (INCIDENT / "base" / "headlamp.yaml").read_text(encoding="utf-8")
#: The incident's candidate: the claim's manifest gone, the Deployment still mounting it.
CANDIDATE = (INCIDENT / "candidate" / "headlamp.yaml").read_text(encoding="utf-8")
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: headlamp\n"


def hook() -> dict[str, object]:
    (only,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert isinstance(only, dict)
    return only


def run_entry(repo: GitRepo, *args: str) -> subprocess.CompletedProcess[str]:
    """The hook's entry as pre-commit runs it (shlex-split, the args after it, no file names),
    from the repository's root, with `gate` this checkout's."""
    entry = shlex.split(str(hook()["entry"]))
    assert entry[0] == "gate"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GIT_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("CI", None)
    return subprocess.run(
        [sys.executable, "-m", "gate", *entry[1:], *args],
        cwd=repo.root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path / "repo")
    r.commit({"deploy/headlamp.yaml": BASE}, "base")
    return r


def test_the_hook_runs_gate_check_on_every_commit_without_file_names() -> None:
    h = hook()
    assert h["id"] == "prune-gate"
    assert h["entry"] == "gate check --base HEAD --head :staged"
    assert h["language"] == "python"
    # pre-commit passes no deleted file to a hook: a deletion must not depend on one.
    assert h["always_run"] is True and h["pass_filenames"] is False
    assert h["stages"] == ["pre-commit"]


def test_a_staged_deletion_of_a_mounted_claim_is_blocked(repo: GitRepo) -> None:
    repo.write({"deploy/headlamp.yaml": CANDIDATE})
    repo.git("add", "deploy/headlamp.yaml")
    done = run_entry(repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CONSUMER_REMAINS" in done.stdout and "NOT_RETIRED" in done.stdout
    assert "head :staged (" in done.stdout
    assert "deploy/headlamp.yaml:7, removed from deploy/headlamp.yaml" in done.stdout


def test_a_harmless_staged_change_passes(repo: GitRepo) -> None:
    repo.write({"deploy/settings.yaml": CONFIG_MAP})
    repo.git("add", "deploy/settings.yaml")
    done = run_entry(repo)
    assert done.returncode == 0, done.stdout + done.stderr


def test_only_what_is_staged_counts(repo: GitRepo) -> None:
    """The claim's deletion in the work tree only is not the commit's; nor does a staged
    deletion pass because the work tree puts the claim back."""
    repo.write({"deploy/headlamp.yaml": CANDIDATE})
    assert run_entry(repo).returncode == 0
    repo.git("add", "deploy/headlamp.yaml")
    repo.write({"deploy/headlamp.yaml": BASE})
    assert run_entry(repo).returncode == 1


def test_the_hooks_args_go_to_gate_check(repo: GitRepo) -> None:
    repo.commit({"other/settings.yaml": CONFIG_MAP})
    repo.write({"deploy/headlamp.yaml": CANDIDATE})
    repo.git("add", "-A")
    assert run_entry(repo, "--path", "other").returncode == 0
    assert run_entry(repo, "--path", "deploy").returncode == 1


def test_reading_the_index_moves_no_ref_and_leaves_the_index(repo: GitRepo) -> None:
    repo.write({"deploy/headlamp.yaml": CANDIDATE})
    repo.git("add", "deploy/headlamp.yaml")
    refs, status = repo.git("for-each-ref"), repo.git("status", "--porcelain")
    head = repo.git("rev-parse", "HEAD")
    staged = gitsource.resolve_revision(repo.root, gitsource.STAGED)
    assert repo.git("for-each-ref") == refs and repo.git("status", "--porcelain") == status
    assert repo.git("rev-parse", "HEAD") == head
    # A commit on HEAD whose tree is the index.
    assert repo.git("rev-parse", f"{staged}^") == head
    assert repo.git("rev-parse", f"{staged}^{{tree}}") == repo.git("write-tree")
    assert gitsource.read_file(repo.root, staged, "deploy/headlamp.yaml") == CANDIDATE


def test_before_the_first_commit_the_index_is_a_root_commit(tmp_path: Path) -> None:
    r = GitRepo(tmp_path / "new")
    r.write({"deploy/headlamp.yaml": BASE})
    r.git("add", "-A")
    staged = gitsource.resolve_revision(r.root, gitsource.STAGED)
    assert r.git("rev-list", "--parents", "-n", "1", staged) == staged
    assert gitsource.read_file(r.root, staged, "deploy/headlamp.yaml") == BASE


def test_a_bare_repository_has_no_index(repo: GitRepo, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(bare)], check=True)
    with pytest.raises(GitError, match="a bare repository has no index"):
        gitsource.resolve_revision(bare, gitsource.STAGED)


def test_an_unmerged_index_says_to_resolve_it(repo: GitRepo) -> None:
    repo.git("checkout", "-q", "-b", "other")
    repo.commit({"deploy/headlamp.yaml": BASE + "# other\n"})
    repo.git("checkout", "-q", "main")
    repo.commit({"deploy/headlamp.yaml": BASE + "# main\n"})
    subprocess.run(["git", "merge", "-q", "other"], cwd=repo.root, capture_output=True)
    with pytest.raises(GitError, match="resolve the conflicts"):
        gitsource.resolve_revision(repo.root, gitsource.STAGED)


def install_git_hook(repo: GitRepo) -> None:
    """The entry as a plain git pre-commit hook: git runs it with the index being committed
    named by GIT_INDEX_FILE (a temporary one for `git commit PATH`)."""
    hook_file = repo.root / ".git" / "hooks" / "pre-commit"
    hook_file.write_text(
        f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} "
        f"-m gate check --base HEAD --head :staged\n"
    )
    hook_file.chmod(0o755)


def git_commit(repo: GitRepo, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GIT_"))}
    env.pop("CI", None)
    return subprocess.run(
        ["git", "commit", "-q", "-m", "change", *args],
        cwd=repo.root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def test_git_refuses_the_commit_the_hook_blocks(repo: GitRepo) -> None:
    install_git_hook(repo)
    head = repo.git("rev-parse", "HEAD")
    repo.write({"deploy/headlamp.yaml": CANDIDATE})
    repo.git("add", "deploy/headlamp.yaml")
    done = git_commit(repo)
    assert done.returncode != 0 and "CONSUMER_REMAINS" in done.stdout + done.stderr
    assert repo.git("rev-parse", "HEAD") == head


def test_a_commit_of_some_paths_is_judged_by_what_it_records(repo: GitRepo) -> None:
    """`git commit PATH` records HEAD plus PATH, whatever else is staged: git names that index
    in GIT_INDEX_FILE, and the hook reads it."""
    install_git_hook(repo)
    repo.write({"deploy/headlamp.yaml": CANDIDATE, "deploy/settings.yaml": CONFIG_MAP})
    repo.git("add", "-A")
    done = git_commit(repo, "deploy/settings.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert repo.git("show", "--name-only", "--format=", "HEAD") == "deploy/settings.yaml"
    assert git_commit(repo).returncode != 0  # the claim's deletion, still staged
