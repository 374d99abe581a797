"""Plain git mode beside kustomizations: it stops rather than answer from files one by one.

Each candidate below deletes a claim only through its kustomization (the claim's file stays), so
reading the files says nothing was removed; building says what the deployer will do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.ci import needs_binaries
from tests.unit.helpers import GitRepo, claim, deployment, doc
from tests.unit.test_cli import gate

needs_renderer = needs_binaries(
    shutil.which("prune-gate-kustomize") is not None or shutil.which("kubectl") is not None,
    reason="needs prune-gate-kustomize or kubectl on PATH (README: Development)",
)

KUSTOMIZATION = "resources:\n  - claim.yaml\n  - app.yaml\n"
CANDIDATES: dict[str, dict[str, str | None]] = {
    "dropped from resources:": {"app/kustomization.yaml": "resources:\n  - app.yaml\n"},
    "$patch: delete": {
        "app/kustomization.yaml": KUSTOMIZATION + "patches:\n  - path: drop.yaml\n",
        "app/drop.yaml": "$patch: delete\napiVersion: v1\nkind: PersistentVolumeClaim\n"
        "metadata: {name: data, namespace: app}\n",
    },
    "namespace: override": {"app/kustomization.yaml": KUSTOMIZATION + "namespace: other\n"},
}


def _repo(tmp_path: Path, change: dict[str, str | None]) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "app/kustomization.yaml": KUSTOMIZATION,
            "app/claim.yaml": claim(),
            "app/app.yaml": deployment(claim_name="other"),
        },
        "base",
    )
    repo.commit(change, "candidate")
    return repo


@pytest.mark.parametrize("how", sorted(CANDIDATES))
def test_plain_git_mode_stops_beside_a_kustomization(tmp_path: Path, how: str) -> None:
    repo = _repo(tmp_path, CANDIDATES[how])
    result = gate("check", "--base", "HEAD~1", "--head", "HEAD", cwd=repo.root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "app/kustomization.yaml" in result.stderr
    assert "--render kustomize" in result.stderr and "--path app" in result.stderr


@needs_renderer
@pytest.mark.parametrize("how", sorted(CANDIDATES))
def test_the_build_sees_what_the_files_hide(tmp_path: Path, how: str) -> None:
    repo = _repo(tmp_path, CANDIDATES[how])
    args = ("check", "--base", "HEAD~1", "--head", "HEAD")
    built = gate(*args, "--render", "kustomize", "--path", "app", cwd=repo.root)
    assert built.returncode == 1, built.stdout + built.stderr
    assert "NOT_RETIRED" in built.stdout and "PersistentVolumeClaim app/data" in built.stdout
    # Asked to read the files anyway, it does, and misses the removal (the blind spot it warns
    # of); the patch file even reads as a second declaration of the claim.
    blind = gate(*args, "--render", "none", cwd=repo.root)
    assert blind.returncode == (2 if how == "$patch: delete" else 0), blind.stdout + blind.stderr
    assert "NOT_RETIRED" not in blind.stdout


def test_a_tree_without_kustomizations_reads_as_before(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"app/all.yaml": doc(claim(), deployment(claim_name="other"))}, "base")
    repo.commit({"app/all.yaml": deployment(claim_name="other")}, "candidate")
    result = gate("check", "--base", "HEAD~1", "--head", "HEAD", cwd=repo.root)
    assert result.returncode == 1 and "NOT_RETIRED" in result.stdout, result.stderr
