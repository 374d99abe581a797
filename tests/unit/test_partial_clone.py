"""`gate history` and builds in a partial clone (`git clone --filter=blob:none`): only the blobs a
build or the manifests need are read, so an image or a README is never fetched; a needed blob is
fetched by git on demand, or is an error naming its path when it cannot be."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gate.cli.root import main
from gate.model.errors import GitError
from gate.sources import gitsource
from tests.unit.helpers import GitRepo, cli_runner
from tests.unit.test_build_server import needs_helper

KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- claim.yaml
configMapGenerator:
- name: settings
  files:
  - app.conf
  - extra=conf.d/extra.ini
  envs:
  - vars.env
patches:
- path: replicas.patch
"""
PATCH = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"
CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  resources:
    requests:
      storage: 1Gi
"""


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _missing(clone: Path) -> set[str]:
    """The blob ids the clone lacks (`--missing=print` lists them without fetching)."""
    out = _git("rev-list", "--objects", "--all", "--missing=print", cwd=clone)
    return {line[1:] for line in out.splitlines() if line.startswith("?")}


@pytest.fixture
def origin(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "origin")
    repo.commit(
        {
            "apps/db/kustomization.yaml": KUSTOMIZATION,
            "apps/db/claim.yaml": CLAIM,
            "apps/db/app.conf": "level=debug\n",
            "apps/db/conf.d/extra.ini": "[x]\n",
            "apps/db/vars.env": "A=1\n",
            "apps/db/replicas.patch": PATCH,
            "apps/db/unused.conf": "never read\n",
            "docs/diagram.png": "\x89PNG not a manifest\n",
            "README.md": "hello\n",
        }
    )
    repo.git("config", "uploadpack.allowFilter", "true")
    repo.git("config", "uploadpack.allowAnySHA1InWant", "true")
    return repo


def _partial_clone(origin: GitRepo, dest: Path) -> Path:
    _git("clone", "-q", "--bare", "--filter=blob:none", f"file://{origin.root}", str(dest))
    return dest


def _blob(origin: GitRepo, path: str) -> str:
    return origin.git("rev-parse", f"HEAD:{path}")


def test_export_reads_only_what_a_build_needs(origin: GitRepo, tmp_path: Path) -> None:
    clone = _partial_clone(origin, tmp_path / "clone.git")
    blobs = {p: _blob(origin, p) for p in ("docs/diagram.png", "README.md", "apps/db/app.conf")}
    assert set(blobs.values()) <= _missing(clone)  # a real partial clone: no blob is here
    dest = tmp_path / "export"
    gitsource.export_tree(clone, "HEAD", dest)
    db = dest / "apps/db"
    assert (db / "claim.yaml").read_text(encoding="utf-8") == CLAIM
    assert (db / "app.conf").read_text(encoding="utf-8") == "level=debug\n"  # fetched on demand
    assert (db / "conf.d/extra.ini").is_file()  # `key=path`
    assert (db / "vars.env").is_file()
    assert (db / "replicas.patch").is_file()
    for never in ("docs/diagram.png", "README.md", "apps/db/unused.conf"):
        assert not (dest / never).exists()
    missing = _missing(clone)
    assert blobs["docs/diagram.png"] in missing  # never read, so never fetched
    assert blobs["README.md"] in missing
    assert blobs["apps/db/app.conf"] not in missing


def test_a_needed_blob_that_cannot_be_fetched_names_its_path(
    origin: GitRepo, tmp_path: Path
) -> None:
    clone = _partial_clone(origin, tmp_path / "clone.git")
    _git("remote", "set-url", "origin", f"file://{tmp_path / 'gone'}", cwd=clone)
    with pytest.raises(GitError) as info:
        gitsource.export_tree(clone, "HEAD", tmp_path / "export")
    message = str(info.value)
    assert "apps/db/" in message
    assert "partial clone" in message
    assert "could not fetch" in message


@needs_helper
def test_history_in_a_partial_clone_decides_every_row(origin: GitRepo, tmp_path: Path) -> None:
    """The reported case: `gate history` over a partial clone whose tree holds images."""
    origin.commit({"docs/other.png": "\x89PNG again\n", "apps/db/app.conf": "level=info\n"})
    origin.commit({"apps/db/claim.yaml": None, "apps/db/kustomization.yaml": "resources: []\n"})
    clone = _partial_clone(origin, tmp_path / "clone.git")
    args = ["--repo", str(clone), "--range", "HEAD~2..HEAD", "--path", "apps/db"]
    result = cli_runner().invoke(
        main, ["history", *args, "--render", "kustomize", "-o", "json", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["error"] for r in data["commits"]] == [None, None]
    assert [r["verdict"] for r in data["commits"]][1] == "block"  # the claim is gone
    assert _blob(origin, "docs/diagram.png") in _missing(clone)
    assert _blob(origin, "docs/other.png") in _missing(clone)


def test_missing_blobs_are_fetched_in_one_request_per_batch(
    origin: GitRepo, tmp_path: Path
) -> None:
    """`cat-file` would fetch each missing blob with a process and a request of its own (minutes
    on a real tree): the export asks for them at once, a request for the manifests and one for
    the files the kustomizations name."""
    for i in range(12):
        origin.write({f"apps/more/cm{i}.yaml": PATCH.replace("settings", f"cm{i}")})
    origin.git("add", "-A")
    origin.git("commit", "-q", "-m", "more")
    clone = _partial_clone(origin, tmp_path / "clone.git")
    log = tmp_path / "requests.log"
    wrapper = tmp_path / "upload-pack"
    wrapper.write_text(f'#!/bin/sh\necho request >> "{log}"\nexec git upload-pack "$@"\n')
    wrapper.chmod(0o755)
    _git("config", "remote.origin.uploadpack", str(wrapper), cwd=clone)
    gitsource.export_tree(clone, "HEAD", tmp_path / "export")
    assert (tmp_path / "export/apps/more/cm11.yaml").is_file()
    assert (tmp_path / "export/apps/db/app.conf").is_file()
    assert log.read_text(encoding="utf-8").count("request") == 2
