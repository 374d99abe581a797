"""Rendering reads nothing outside the revision's tree (issue 8, attack 10).

A candidate's kustomization may name any file; the build must refuse every one that resolves
outside the tree (an absolute path, `..` past the root, a symlink out) and every remote base,
with exit 2 and a message naming the kustomization and the path, and the file's content nowhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gate.model.errors import RenderError
from gate.sources import render
from gate.sources.remote import LEDGER
from tests.ci import needs_binaries
from tests.unit.helpers import GitRepo

ROOT = Path(__file__).resolve().parents[2]
HELPER = shutil.which(render.HELPER)
GATE = [sys.executable, "-m", "gate"]
ARGS = ["--base", "HEAD~1", "--head", "HEAD", "--path", "app", "--render", "kustomize"]

#: `make test` puts the confined renderer on PATH; a missing one is a failure in CI, not a skip.
needs_helper = needs_binaries(
    HELPER is not None,
    reason="prune-gate-kustomize is not on PATH (run `make test`, which builds it)",
)

#: A value no build output may contain: planted in the environment of the process that renders.
SECRET = "prune-gate-sandbox-canary-7f3a91c2"

CLAIM = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: app\n"

LEAK = (
    "resources: [claim.yaml]\n"
    "configMapGenerator:\n"
    "- name: leak\n"
    "  envs: [{source}]\n"
    "replacements:\n"
    "- source: {{kind: ConfigMap, name: leak, fieldPath: data.CANARY}}\n"
    "  targets:\n"
    "  - select: {{kind: PersistentVolumeClaim}}\n"
    "    fieldPaths: [metadata.annotations.leaked]\n"
    "    options: {{create: true}}\n"
)


def leaky_repo(tmp_path: Path, source: str, extra: dict[str, str] | None = None) -> GitRepo:
    """Base: a claim. Candidate: the same claim, plus the attack's generator and replacement."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"app/kustomization.yaml": "resources: [claim.yaml]\n", "app/claim.yaml": CLAIM})
    repo.commit({"app/kustomization.yaml": LEAK.format(source=source), **(extra or {})})
    return repo


@needs_helper
def test_a_generator_over_proc_self_environ_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY", SECRET)
    repo = leaky_repo(tmp_path, "/proc/self/environ")
    with pytest.raises(RenderError) as info:
        render.render_kustomize(repo.root, "HEAD", "app")
    message = str(info.value)
    assert "refusing to read /proc/self/environ" in message
    assert "outside the revision's tree" in message
    assert "app" in message
    assert SECRET not in message


@needs_helper
def test_a_parent_path_past_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.env").write_text(f"CANARY={SECRET}\n", encoding="utf-8")
    repo = leaky_repo(tmp_path, "../../../outside.env")
    with pytest.raises(RenderError, match="outside the revision's tree") as info:
        render.render_kustomize(repo.root, "HEAD", "app")
    assert SECRET not in str(info.value)


@needs_helper
def test_a_remote_base_is_left_out_without_the_network(tmp_path: Path) -> None:
    """Issue 33: a remote entry no longer fails the build, but it is still never fetched: the
    helper builds the rest and names the entry it left out (the check compares the URLs)."""
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {
            "app/kustomization.yaml": (
                "resources:\n- claim.yaml\n- https://github.com/example/infra//base?ref=v1\n"
            ),
            "app/claim.yaml": CLAIM,
        }
    )
    LEDGER.reset()
    objects = render.render_kustomize(repo.root, "HEAD", "app")
    assert [o.body["kind"] for o in objects] == ["PersistentVolumeClaim"]
    assert LEDGER.skipped(sha) == {
        ("app/kustomization.yaml", "https://github.com/example/infra//base?ref=v1")
    }


@needs_helper
def test_the_helper_never_fetches_a_remote_file(tmp_path: Path) -> None:
    """A remote file kustomize would fetch itself (a patch) meets the offline transport."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "app/kustomization.yaml": (
                "resources:\n- claim.yaml\npatches:\n- path: https://127.0.0.1:9/patch.yaml\n"
            ),
            "app/claim.yaml": CLAIM,
        }
    )
    with pytest.raises(RenderError) as info:
        render.render_kustomize(repo.root, "HEAD", "app")
    assert "127.0.0.1:9" in str(info.value)


@needs_helper
def test_files_elsewhere_in_the_tree_still_build(tmp_path: Path) -> None:
    """The confinement is the tree, not the kustomization's directory (Flux's layout)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "apps/settings.env": "MODE=prod\n",
            "clusters/prod/kustomization.yaml": (
                "configMapGenerator:\n- name: settings\n  envs: [../../apps/settings.env]\n"
            ),
        }
    )
    objects = render.render_kustomize(repo.root, "HEAD", "clusters/prod")
    assert [o.body["data"] for o in objects] == [{"MODE": "prod"}]


@needs_helper
def test_gate_check_refuses_the_environ_attack_with_exit_2(tmp_path: Path) -> None:
    """The real CLI, as the Action runs it: exit 2, and the runner's environment nowhere."""
    repo = leaky_repo(tmp_path, "/proc/self/environ")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(PYTHONPATH=str(ROOT), CANARY=SECRET, GITHUB_ACTIONS="true")
    for fmt in ("text", "github", "json"):
        done = subprocess.run(
            [*GATE, "check", "--repo", str(repo.root), *ARGS, "--format", fmt],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, (fmt, done.stdout, done.stderr)
        assert "refusing to read /proc/self/environ" in done.stderr
        assert "app" in done.stderr
        assert SECRET not in done.stdout + done.stderr
