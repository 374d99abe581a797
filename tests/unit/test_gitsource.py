"""git mode's reader, against real repositories built with real `git` commits in tmp_path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gate.model.errors import GitError, InputError
from gate.model.objects import RawObject
from gate.sources import gitsource
from tests.unit.helpers import GitRepo

PVC = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: app
spec:
  resources:
    requests:
      storage: 1Gi
"""

DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
spec:
  replicas: {replicas}
"""

NAMESPACE_JSON = '{"apiVersion": "v1", "kind": "Namespace",\n "metadata": {"name": "app"}}'

CM = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
"""


def names(objects: list[RawObject]) -> list[str]:
    return [f"{o.body['kind']}/{o.body['metadata']['name']}" for o in objects]


def where(objects: list[RawObject]) -> list[str]:
    return [str(o.source) for o in objects]


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


@pytest.fixture
def history(repo: GitRepo) -> tuple[GitRepo, str, str]:
    """Two commits: the second removes the claim and scales the deployment."""
    base = repo.commit(
        {
            "apps/db/claim.yaml": PVC + "---\n" + CM.format(name="settings"),
            "apps/web/deploy.yml": DEPLOY.format(replicas=1),
            "apps/web/README.md": "not a manifest\n",
            "infra/ns.json": NAMESPACE_JSON,
            ".github/workflows/ci.yml": "on: push\njobs: {}\n",
        },
        "base",
    )
    head = repo.commit(
        {
            "apps/db/claim.yaml": CM.format(name="settings"),
            "apps/web/deploy.yml": DEPLOY.format(replicas=3),
        },
        "candidate",
    )
    return repo, base, head


def test_read_tree_at_two_commits(history: tuple[GitRepo, str, str]) -> None:
    repo, base, head = history
    before = gitsource.read_tree(repo.root, base)
    after = gitsource.read_tree(repo.root, head)
    assert names(before) == [
        "PersistentVolumeClaim/data",
        "ConfigMap/settings",
        "Deployment/web",
        "Namespace/app",
    ]
    assert where(before) == [
        "apps/db/claim.yaml:1",
        "apps/db/claim.yaml:11",
        "apps/web/deploy.yml:1",
        "infra/ns.json:1",
    ]
    assert names(after) == ["ConfigMap/settings", "Deployment/web", "Namespace/app"]
    assert [o.body["spec"]["replicas"] for o in after if o.body["kind"] == "Deployment"] == [3]


def test_read_tree_accepts_symbolic_revisions(history: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = history
    assert names(gitsource.read_tree(repo.root, "HEAD~1")) == names(
        gitsource.read_tree(repo.root, base)
    )
    assert gitsource.resolve_revision(repo.root, "main~1") == base


def test_read_tree_ignores_the_work_tree(history: tuple[GitRepo, str, str]) -> None:
    repo, _, head = history
    repo.write({"apps/web/deploy.yml": DEPLOY.format(replicas=99), "apps/db/claim.yaml": None})
    repo.write({"apps/new.yaml": CM.format(name="uncommitted")})
    objects = gitsource.read_tree(repo.root, "HEAD")
    assert names(objects) == names(gitsource.read_tree(repo.root, head))
    assert [o.body["spec"]["replicas"] for o in objects if o.body["kind"] == "Deployment"] == [3]


def test_subdirectory_filter(history: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = history
    assert names(gitsource.read_tree(repo.root, base, ["apps/db"])) == [
        "PersistentVolumeClaim/data",
        "ConfigMap/settings",
    ]
    for spelling in ("apps/db/", "./apps/db", "apps//db", str(repo.root / "apps" / "db")):
        assert where(gitsource.read_tree(repo.root, base, [spelling])) == [
            "apps/db/claim.yaml:1",
            "apps/db/claim.yaml:11",
        ]
    # a file can be named, several paths are read in order, and overlaps are read once
    assert names(gitsource.read_tree(repo.root, base, ["infra/ns.json", "apps", "apps/web"])) == [
        "Namespace/app",
        "PersistentVolumeClaim/data",
        "ConfigMap/settings",
        "Deployment/web",
    ]
    assert names(gitsource.read_tree(repo.root, base, ["."])) == names(
        gitsource.read_tree(repo.root, base)
    )


def test_prefix_is_a_directory_not_a_string_prefix(repo: GitRepo) -> None:
    sha = repo.commit({"app/a.yaml": CM.format(name="a"), "app-two/b.yaml": CM.format(name="b")})
    assert names(gitsource.read_tree(repo.root, sha, ["app"])) == ["ConfigMap/a"]


def test_hidden_directories_are_skipped_unless_named(repo: GitRepo) -> None:
    sha = repo.commit(
        {
            ".github/workflows/ci.yml": "on: push\n",  # would be an InputError if parsed
            "deploy/.hidden/x.yaml": CM.format(name="hidden"),
            "deploy/visible.yaml": CM.format(name="visible"),
            ".config/cm.yaml": CM.format(name="named"),
        }
    )
    assert names(gitsource.read_tree(repo.root, sha)) == ["ConfigMap/visible"]
    assert names(gitsource.read_tree(repo.root, sha, [".config"])) == ["ConfigMap/named"]


def test_kustomization_files_are_not_objects(repo: GitRepo) -> None:
    sha = repo.commit(
        {
            "base/kustomization.yaml": "resources:\n  - cm.yaml\n",
            "base/cm.yaml": CM.format(name="a"),
            "other/kustomization.yml": "namePrefix: x-\n",
        }
    )
    assert names(gitsource.read_tree(repo.root, sha)) == ["ConfigMap/a"]


def test_a_path_missing_at_a_revision_names_rev_and_path(
    history: tuple[GitRepo, str, str],
) -> None:
    repo, base, _ = history
    new = repo.commit({"apps/cache/cm.yaml": CM.format(name="cache")})
    assert names(gitsource.read_tree(repo.root, new, ["apps/cache"])) == ["ConfigMap/cache"]
    with pytest.raises(GitError, match=rf"apps/cache does not exist at revision {base}"):
        gitsource.read_tree(repo.root, base, ["apps/cache"])
    with pytest.raises(GitError, match="outside the repository"):
        gitsource.read_tree(repo.root, base, ["../elsewhere"])


def test_invalid_yaml_names_the_file_and_line(repo: GitRepo) -> None:
    sha = repo.commit({"bad/x.yaml": CM.format(name="ok") + "---\nkind: a: b\n"})
    with pytest.raises(InputError, match=r"^bad/x\.yaml:6: invalid YAML"):
        gitsource.read_tree(repo.root, sha)


def test_a_blob_that_is_not_utf8_is_an_input_error(repo: GitRepo) -> None:
    (repo.root / "bin.yaml").write_bytes(b"\xff\xfe\x00garbage")
    repo.git("add", "bin.yaml")
    repo.git("commit", "-q", "-m", "binary")
    with pytest.raises(InputError, match=r"^bin\.yaml: cannot read: not UTF-8"):
        gitsource.read_tree(repo.root, "HEAD")


def test_symlinks_and_submodules_are_not_read(repo: GitRepo, tmp_path: Path) -> None:
    other = GitRepo(tmp_path / "other")
    other.commit({"cm.yaml": CM.format(name="in-submodule")})
    repo.write({"real.yaml": CM.format(name="real")})
    (repo.root / "link.yaml").symlink_to("real.yaml")
    repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(other.root), "sub")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "links")
    assert names(gitsource.read_tree(repo.root, "HEAD")) == ["ConfigMap/real"]


def test_a_subdirectory_of_the_work_tree_finds_the_repository(
    history: tuple[GitRepo, str, str],
) -> None:
    repo, base, _ = history
    objects = gitsource.read_tree(repo.root / "apps" / "web", base, ["infra"])
    assert where(objects) == ["infra/ns.json:1"]


def test_resolve_revision_returns_the_full_sha(history: tuple[GitRepo, str, str]) -> None:
    repo, base, head = history
    assert gitsource.resolve_revision(repo.root, "HEAD") == head
    assert gitsource.resolve_revision(repo.root, base[:7]) == base
    repo.git("tag", "-a", "v1", "-m", "annotated", base)
    assert gitsource.resolve_revision(repo.root, "v1") == base  # the commit, not the tag object


def test_unknown_revision_says_how_to_fetch(history: tuple[GitRepo, str, str]) -> None:
    repo, _, _ = history
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(GitError) as info:
        gitsource.resolve_revision(repo.root, missing)
    message = str(info.value)
    assert f"unknown revision {missing}" in message
    assert f"git fetch origin {missing}" in message
    assert "shallow" not in message
    with pytest.raises(GitError, match="unknown revision no-such-branch"):
        gitsource.read_tree(repo.root, "no-such-branch")
    with pytest.raises(GitError, match="invalid revision"):
        gitsource.resolve_revision(repo.root, "--all")


def test_not_a_git_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError, match="not a git repository"):
        gitsource.resolve_revision(plain, "HEAD")
    with pytest.raises(GitError, match="no such directory"):
        gitsource.read_tree(tmp_path / "nowhere", "HEAD")


def test_shallow_clone_asked_for_the_parent(
    history: tuple[GitRepo, str, str], tmp_path: Path
) -> None:
    repo, base, head = history
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{repo.root}", str(clone)],
        check=True,
        capture_output=True,
    )
    assert gitsource.is_shallow(clone)
    assert not gitsource.is_shallow(repo.root)
    assert gitsource.resolve_revision(clone, "HEAD") == head
    for rev in (base, "HEAD~1"):
        with pytest.raises(GitError) as info:
            gitsource.read_tree(clone, rev)
        message = str(info.value)
        assert f"revision {rev} is not in this clone" in message
        assert "shallow" in message
        assert f"git fetch --depth=2 origin {rev}" in message
        assert "fetch-depth: 0" in message
    # following the advice works
    subprocess.run(["git", "fetch", "-q", "--depth=2", "origin", base], cwd=clone, check=True)
    assert names(gitsource.read_tree(clone, base, ["apps/db"])) == [
        "PersistentVolumeClaim/data",
        "ConfigMap/settings",
    ]


def test_read_file(history: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = history
    assert gitsource.read_file(repo.root, base, "apps/web/README.md") == "not a manifest\n"
    assert gitsource.read_file(repo.root, base, "prune-gate.yaml") is None
    assert gitsource.read_file(repo.root, base, "apps") is None  # a directory is not a file


def test_export_tree_writes_the_committed_files(
    history: tuple[GitRepo, str, str], tmp_path: Path
) -> None:
    repo, base, _ = history
    repo.write({"apps/web/deploy.yml": DEPLOY.format(replicas=7)})  # uncommitted: not exported
    dest = tmp_path / "export"
    assert gitsource.export_tree(repo.root, base, dest) == base
    assert (dest / "apps/db/claim.yaml").read_text(encoding="utf-8").startswith(PVC)
    assert "replicas: 1" in (dest / "apps/web/deploy.yml").read_text(encoding="utf-8")
    assert (dest / ".github/workflows/ci.yml").is_file()


def test_export_tree_keeps_only_symlinks_inside_the_tree(repo: GitRepo, tmp_path: Path) -> None:
    repo.write(
        {
            "base/cm.yaml": CM.format(name="a"),
            "run.sh": "#!/bin/sh\n",
            # a generator's file: exported (only what a build reads is)
            "kustomization.yaml": "configMapGenerator:\n- name: s\n  files: [run.sh]\n",
        }
    )
    (repo.root / "run.sh").chmod(0o755)
    (repo.root / "overlay").mkdir()
    (repo.root / "overlay" / "cm.yaml").symlink_to("../base/cm.yaml")
    (repo.root / "escape.yaml").symlink_to("../../etc/passwd")
    (repo.root / "parent.yaml").symlink_to("..")  # the parent itself: `up/..` climbs on
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "links")
    dest = tmp_path / "export"
    gitsource.export_tree(repo.root, "HEAD", dest)
    assert (dest / "overlay" / "cm.yaml").is_symlink()
    assert (dest / "overlay" / "cm.yaml").read_text(encoding="utf-8") == CM.format(name="a")
    assert not (dest / "escape.yaml").exists()
    assert not (dest / "escape.yaml").is_symlink()
    assert not (dest / "parent.yaml").is_symlink()
    assert (dest / "run.sh").stat().st_mode & 0o100


def test_helm_charts_in_the_tree_are_skipped(repo: GitRepo) -> None:
    sha = repo.commit(
        {
            "charts/web/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n",
            "charts/web/values.yaml": "replicas: 2\n",
            "charts/web/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\n"
            "metadata: {name: {{ .Release.Name }}}\n",
            "charts/webby/cm.yaml": CM.format(name="kept"),
            "apps/cm.yaml": CM.format(name="a"),
        }
    )
    assert names(gitsource.read_tree(repo.root, sha)) == ["ConfigMap/a", "ConfigMap/kept"]
