"""`gate history` says how it read: which renderer built (the confined helper, or the
`kubectl kustomize` fallback, warned about once), and where a commit's base came from when its
parent could not be built (its last buildable ancestor). Real repositories, the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from gate.cli.root import main
from gate.model.errors import RenderError
from gate.sources import render
from tests.unit.helpers import GitRepo, claim, cli_runner
from tests.unit.test_build_server import needs_helper

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")

KUSTOMIZATION = "resources:\n- claim.yaml\n- settings.yaml\n"
SETTINGS = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: app\n"


def gate(*args: str) -> Result:
    return cli_runner().invoke(main, ["history", *args])


def data(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    got: dict[str, Any] = json.loads(result.stdout)
    return got


@pytest.fixture
def built(tmp_path: Path) -> tuple[GitRepo, str]:
    repo = GitRepo(tmp_path / "repo")
    start = repo.commit(
        {
            "app/kustomization.yaml": KUSTOMIZATION,
            "app/claim.yaml": claim(),
            "app/settings.yaml": SETTINGS,
        },
        "start",
    )
    repo.commit({"app/settings.yaml": SETTINGS + "data:\n  a: b\n"}, "a setting")
    repo.commit({"app/settings.yaml": SETTINGS + "data:\n  a: c\n"}, "another")
    return repo, start


def _args(repo: GitRepo, start: str) -> list[str]:
    return ["--repo", str(repo.root), "--range", f"{start}..HEAD", "--path", "app"]


@needs_helper
def test_the_confined_renderer_is_named(
    built: tuple[GitRepo, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "_WARNED", [])
    repo, start = built
    result = gate(*_args(repo, start), "--render", "kustomize", "-o", "json")
    assert data(result)["renderers"] == ["prune-gate-kustomize"]
    assert "warning" not in result.stderr
    text = gate(*_args(repo, start), "--render", "kustomize")
    assert "renderer: prune-gate-kustomize (confined)" in text.stdout
    plain = gate(*_args(repo, start), "--render", "none", "-o", "json")
    assert data(plain)["renderers"] == []


@needs_kubectl
def test_the_fallback_is_named_and_warned_about_once(
    built: tuple[GitRepo, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the helper on PATH: `kubectl kustomize` builds, the JSON and the text say so,
    and stderr warns once (not once per build: this replay builds three revisions)."""
    only = tmp_path / "bin"
    only.mkdir()
    for tool in ("git", "kubectl"):
        found = shutil.which(tool)
        assert found is not None
        (only / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(only))
    monkeypatch.delenv(render.HELPER_ENV, raising=False)
    monkeypatch.setattr(render, "_WARNED", [])
    repo, start = built
    result = gate(*_args(repo, start), "--render", "kustomize", "-o", "json")
    got = data(result)
    assert got["renderers"] == ["kubectl kustomize"]
    assert [r["verdict"] for r in got["commits"]] == ["allow", "allow"]
    assert result.stderr.count("warning: prune-gate-kustomize") == 1
    assert "kubectl kustomize" in result.stderr
    assert "LoadRestrictionsRootOnly" in result.stderr
    text = gate(*_args(repo, start), "--render", "kustomize")
    assert "renderer: kubectl kustomize (fallback: prune-gate-kustomize is not on PATH)" in (
        text.stdout
    )
    assert "warning" not in text.stderr  # once per process


SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 1m, url: "https://example.com/repo", ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux-system, namespace: flux-system}
spec:
  interval: 10m
  path: ./clusters/prod
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""
APPS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 10m
  path: ./apps/prod
  prune: true
  targetNamespace: shop
  sourceRef: {kind: GitRepository, name: flux-system}
  patches:
    - target: {kind: ConfigMap, name: settings}
      patch: |
        - {op: add, path: /data, value: {tier: prod}}
"""


@pytest.fixture
def broken_then_fixed(tmp_path: Path) -> tuple[GitRepo, list[str]]:
    """A Flux repository whose apps break (a resource that is not there) and whose next commit
    fixes the build and drops the claim: that deploy deletes it, from the state the cluster
    kept (the last buildable revision)."""
    repo = GitRepo(tmp_path / "repo")
    shas = [
        repo.commit(
            {
                "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
                "clusters/prod/apps.yaml": APPS,
                "apps/prod/kustomization.yaml": KUSTOMIZATION,
                "apps/prod/claim.yaml": claim(),
                "apps/prod/settings.yaml": SETTINGS,
            },
            "start",
        ),
        repo.commit({"apps/prod/kustomization.yaml": KUSTOMIZATION + "- missing.yaml\n"}, "break"),
        repo.commit(
            {
                "apps/prod/kustomization.yaml": "resources:\n- settings.yaml\n",
                "apps/prod/claim.yaml": None,
            },
            "fix the build, drop the claim",
        ),
    ]
    return repo, shas


@needs_helper
def test_a_commit_after_an_unbuildable_one_is_judged_against_its_last_buildable_ancestor(
    broken_then_fixed: tuple[GitRepo, list[str]],
) -> None:
    repo, (start, broken, fixed) = broken_then_fixed
    args = ["--repo", str(repo.root), "--flux-root", "clusters/prod", "-o", "json"]
    got = data(gate(*args, "--range", f"{start}..HEAD"))["commits"]
    assert [r["sha"] for r in got] == [broken, fixed]
    first, second = got
    assert first["verdict"] == "error"
    # internal paths of the export never reach a message: repository paths instead
    assert "../tree/" not in first["error"] and "prune-gate-wrapper" not in first["error"]
    assert "apps/prod" in first["error"] and "missing.yaml" in first["error"]
    # the fix is decided: it deletes the claim the cluster kept from `start`
    assert second["verdict"] == "block", (second["error"], second["notes"])
    assert second["base"] == start
    assert second["error"] is None
    assert any(
        f"the parent {broken[:12]} cannot be built" in n
        and f"last buildable ancestor {start[:12]}" in n
        for n in second["notes"]
    )
    assert "PersistentVolumeClaim" in {f["object"]["kind"] for f in second["findings"]}
    # with no buildable revision before it in the range, it is still an error, and says why
    (alone,) = data(gate(*args, "--range", f"{broken}..HEAD"))["commits"]
    assert alone["verdict"] == "error"
    assert "nor any ancestor in the range" in alone["error"]
    assert "../tree/" not in alone["error"]


@needs_helper
def test_tree_paths_are_repository_paths_in_build_errors(tmp_path: Path) -> None:
    """A build with a Flux Kustomization's fields goes through the wrapper, whose resource is
    `../tree/<path>`: kustomize's message names it, and it is mapped back."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"app/kustomization.yaml": "resources:\n- nothere.yaml\n"})
    with render.ExportedTree(repo.root, "HEAD") as tree, pytest.raises(RenderError) as info:
        tree.build("app", kustomization={"spec": {"namePrefix": "p-"}})
    message = str(info.value)
    assert "../tree" not in message and str(tree.root) not in message
    assert "prune-gate-wrapper" not in message
    assert "'app'" in message or "app/" in message
