"""A revision written over another's export by difference is the same tree as a fresh export.

`gate history` exports each commit over its parent's export (`gitsource.sync_tree`), writing
only the files that differ; a stale file left behind would be built as if the commit had it.
Each step here changes the tree in one of the ways that can leave one behind, and the synced
directory must equal a fresh export of the same revision, file by file and link by link.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gate.sources import gitsource
from tests.unit.helpers import GitRepo


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below `root`: directories, links (their target) and files (their text)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            path = Path(dirpath) / d
            out[str(path.relative_to(root))] = (
                f"link:{path.readlink()}" if path.is_symlink() else "dir"
            )
        for f in filenames:
            path = Path(dirpath) / f
            rel = str(path.relative_to(root))
            out[rel] = f"link:{path.readlink()}" if path.is_symlink() else path.read_text()
    return out


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"

STEPS: list[dict[str, str | None]] = [
    {  # a generator's file, named by a kustomization (so exported), beside one never read
        "app/kustomization.yaml": "resources: [cm.yaml]\nconfigMapGenerator:\n"
        "  - {name: g, files: [app.conf]}\n",
        "app/cm.yaml": CM,
        "app/app.conf": "a=1\n",
        "app/README.md": "not read\n",
        "deep/a/b/c.yaml": CM,
    },
    {"app/app.conf": "a=2\n", "app/cm.yaml": CM + "data: {k: v}\n"},
    # the generator's file no longer named: it must go from the export
    {"app/kustomization.yaml": "resources: [cm.yaml]\n"},
    # a directory emptied, and a file where a directory was
    {"deep/a/b/c.yaml": None, "deep/a.yaml": CM},
    # a directory where a file was
    {"deep/a.yaml": None, "deep/a.yaml/inner.yaml": CM},
    {"app/cm.yaml": None},
]


@pytest.mark.parametrize("links", [False, True], ids=["files", "with symlinks"])
def test_each_step_synced_equals_a_fresh_export(tmp_path: Path, links: bool) -> None:
    repo = GitRepo(tmp_path / "repo")
    shas = []
    for i, step in enumerate(STEPS):
        repo.write(step)
        if links and i == 1:
            (repo.root / "deep" / "link.yaml").symlink_to("../app/cm.yaml")
        if links and i == 3:
            (repo.root / "deep" / "link.yaml").unlink()
            (repo.root / "deep" / "link.yaml").symlink_to("a")  # now a link to a directory
        repo.git("add", "-A")
        repo.git("commit", "-q", "-m", f"step {i}")
        shas.append(repo.git("rev-parse", "HEAD"))
    synced = tmp_path / "synced"
    previous = None
    for sha in [*shas, *reversed(shas)]:  # forwards, then backwards
        previous = gitsource.sync_tree(repo.root, sha, synced, previous)
        fresh = tmp_path / f"fresh-{sha[:8]}"
        if not fresh.exists():
            gitsource.export_tree(repo.root, sha, fresh)
        assert snapshot(synced) == snapshot(fresh), sha
        assert previous.sha == sha
