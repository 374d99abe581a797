"""Kustomize builds are reused across revisions and runs only when the build would be the same.

A kept build is reused when its inputs are the same and every file, listing and existence it
read is the same at the other revision (gate.sources.buildcache). Each test changes one thing a
build reads, in a real repository built by the real helper, and shows the build is done again
with the new content; and changes what it does not read, and shows it is reused. A stale reuse
is a wrong verdict, so most of these tests are about misses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gate.sources import buildcache, partial, render
from gate.sources.buildcache import TreeIndex, relative_reads
from gate.sources.gitsource import Exported, ExportPlan, TreeEntry
from gate.sources.render import ExportedTree
from tests.unit.helpers import GitRepo
from tests.unit.test_build_server import needs_helper

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: {value}\n"


def cm(name: str, value: str = "one") -> str:
    return CM.format(name=name, value=value)


def values(objects: list[Any]) -> dict[str, str]:
    """Each ConfigMap's name -> its value."""
    return {
        o.body["metadata"]["name"]: o.body.get("data", {}).get("value", "")
        for o in objects
        if o.body.get("kind") == "ConfigMap"
    }


def build(repo: GitRepo, rev: str, path: str, **fields: Any) -> list[Any]:
    with ExportedTree(repo.root, rev) as tree:
        return tree.build(path, **fields)


def counts() -> tuple[int, int]:
    return buildcache.BUILDS.hits, buildcache.BUILDS.misses


# --- the index: what a read sees, without reading ------------------------------------------


def index(files: dict[str, str], links: tuple[str, ...] = ()) -> TreeIndex:
    return TreeIndex(
        TreeEntry(p, "120000" if p in links else "100644", sha) for p, sha in files.items()
    )


def test_a_file_read_sees_its_blob_and_an_existence_check_only_that_it_is_there() -> None:
    one, two = index({"a/x.yaml": "1"}), index({"a/x.yaml": "2"})
    assert one.fingerprint("file", "a/x.yaml") != two.fingerprint("file", "a/x.yaml")
    assert one.fingerprint("stat", "a/x.yaml") == two.fingerprint("stat", "a/x.yaml")
    assert one.fingerprint("stat", "a/y.yaml") != index({"a/y.yaml": "1"}).fingerprint(
        "stat", "a/y.yaml"
    )
    assert one.fingerprint("stat", "a") == "d"


def test_a_listing_sees_names_and_a_tree_sees_everything_below() -> None:
    one = index({"a/x.yaml": "1", "a/b/y.yaml": "1"})
    content = index({"a/x.yaml": "1", "a/b/y.yaml": "2"})
    added = index({"a/x.yaml": "1", "a/b/y.yaml": "1", "a/z.txt": "1"})
    assert one.fingerprint("list", "a") == content.fingerprint("list", "a")
    assert one.fingerprint("tree", "a") != content.fingerprint("tree", "a")
    assert one.fingerprint("list", "a") != added.fingerprint("list", "a")
    # a sibling with the directory's name as a prefix is not below it
    assert one.fingerprint("tree", "a") == index(
        {"a/x.yaml": "1", "a/b/y.yaml": "1", "ab/q.yaml": "9"}
    ).fingerprint("tree", "a")


def test_nothing_read_through_a_symlink_can_be_told() -> None:
    linked = index({"a": "target", "b/x.yaml": "1", "c/l.yaml": "x"}, links=("a", "c/l.yaml"))
    assert linked.fingerprint("file", "a/x.yaml") is None
    assert linked.fingerprint("stat", "a") is None
    assert linked.fingerprint("tree", "c") is None
    assert linked.fingerprint("file", "b/x.yaml") is not None


def test_an_absent_path_that_differs_from_one_there_only_by_case_cannot_be_told() -> None:
    """A file system that ignores case answers `app/kustomization.yaml` with
    `App/Kustomization.yaml`: git's listing cannot say what the build saw there."""
    cased = index({"App/Kustomization.yaml": "1"})
    assert cased.fingerprint("file", "app/kustomization.yaml") is None
    assert cased.fingerprint("stat", "app") is None
    assert cased.fingerprint("file", "other/kustomization.yaml") == "-"


def test_reads_outside_the_tree_are_not_kept(tmp_path: Path) -> None:
    tree, wrapper = tmp_path / "tree", tmp_path / "wrapper"
    reads = [["file", f"{tree}/a/k.yaml"], ["stat", str(tree)], ["file", f"{wrapper}/k.yaml"]]
    assert relative_reads(reads, tree, [wrapper]) == [("file", "a/k.yaml"), ("stat", "")]
    assert relative_reads([*reads, ["file", "/etc/passwd"]], tree, [wrapper]) is None
    assert relative_reads([["file", f"{tree}x/a"]], tree, [wrapper]) is None


# --- real builds ------------------------------------------------------------------------------


@pytest.fixture
def overlay(tmp_path: Path) -> tuple[GitRepo, str]:
    """An overlay over a base elsewhere in the repository, and an unrelated app."""
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {
            "base/kustomization.yaml": "resources: [cm.yaml]\n",
            "base/cm.yaml": cm("base"),
            "prod/kustomization.yaml": "resources: [../base, cm.yaml]\n",
            "prod/cm.yaml": cm("prod"),
            "other/kustomization.yaml": "resources: [cm.yaml]\n",
            "other/cm.yaml": cm("other"),
        }
    )
    return repo, sha


@needs_helper
def test_a_build_is_reused_at_a_revision_that_changed_nothing_it_read(
    overlay: tuple[GitRepo, str],
) -> None:
    repo, first = overlay
    before = build(repo, first, "prod")
    second = repo.commit({"other/cm.yaml": cm("other", "two"), "README.md": "hello\n"})
    with ExportedTree(repo.root, second) as tree:
        again = tree.build("prod")
        assert not tree._exported  # reused: the revision was not even written out
    assert counts() == (1, 1)
    assert [(o.body, o.source) for o in again] == [(o.body, o.source) for o in before]


@needs_helper
@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"base/cm.yaml": cm("base", "two")}, {"base": "two", "prod": "one"}),
        (
            {
                "base/kustomization.yaml": "resources: [cm.yaml, more.yaml]\n",
                "base/more.yaml": cm("more"),
            },
            {"base": "one", "prod": "one", "more": "one"},
        ),
        ({"prod/kustomization.yaml": "resources: [../base]\n"}, {"base": "one"}),
        # a kustomization file of another name, which kustomize looks for too
        (
            {"base/kustomization.yaml": None, "base/kustomization.yml": "resources: []\n"},
            {"prod": "one"},
        ),
    ],
    ids=["a file the base reads", "a file added to the base", "the overlay", "another name"],
)
def test_a_build_is_done_again_when_anything_it_read_changed(
    overlay: tuple[GitRepo, str], change: dict[str, str | None], expect: dict[str, str]
) -> None:
    repo, first = overlay
    build(repo, first, "prod")
    second = repo.commit(change)
    assert values(build(repo, second, "prod")) == expect
    assert counts() == (0, 2)


@needs_helper
def test_flux_generator_scan_is_read_as_the_generator_reads_it(tmp_path: Path) -> None:
    """A path without a kustomization file is built from every manifest below it, down to the
    directories that hold one (which kustomize builds): a manifest added deep down is a new
    build; a change inside a directory with its own kustomization only rebuilds when that
    directory's build reads it."""
    repo = GitRepo(tmp_path / "repo")
    first = repo.commit(
        {
            "apps/a.yaml": cm("a"),
            "apps/deep/b.yaml": cm("b"),
            "apps/app/kustomization.yaml": "resources: [c.yaml]\n",
            "apps/app/c.yaml": cm("c"),
            "apps/app/unused.yaml": cm("unused"),
        }
    )
    three = {"a": "one", "b": "one", "c": "one"}
    assert values(build(repo, first, "apps", kustomization={})) == three
    unread = repo.commit({"apps/app/unused.yaml": cm("unused", "two")})
    assert values(build(repo, unread, "apps", kustomization={})) == three
    assert counts() == (1, 1)
    deeper = repo.commit({"apps/deep/deeper/d.yaml": cm("d")})
    assert values(build(repo, deeper, "apps", kustomization={})) == {**three, "d": "one"}
    own = repo.commit({"apps/deep/kustomization.yaml": "resources: [b.yaml]\n"})
    assert values(build(repo, own, "apps", kustomization={})) == three
    assert counts() == (1, 3)


@needs_helper
def test_a_component_that_appears_is_a_new_build(tmp_path: Path) -> None:
    """`ignoreMissingComponents`: Flux's generator leaves out a component that is not there, so
    the build never reads it; its appearing must still be seen."""
    repo = GitRepo(tmp_path / "repo")
    first = repo.commit(
        {"app/kustomization.yaml": "resources: [cm.yaml]\n", "app/cm.yaml": cm("app")}
    )
    fields = {"spec": {"components": ["../extra"], "ignoreMissingComponents": True}}
    assert values(build(repo, first, "app", kustomization=fields)) == {"app": "one"}
    component = (
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [more.yaml]\n"
    )
    second = repo.commit({"extra/kustomization.yaml": component, "extra/more.yaml": cm("more")})
    assert values(build(repo, second, "app", kustomization=fields)) == {"app": "one", "more": "one"}
    assert counts() == (0, 2)


@needs_helper
def test_the_post_build_values_are_part_of_the_key(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {"app/kustomization.yaml": "resources: [cm.yaml]\n", "app/cm.yaml": cm("app", "${v}")}
    )

    def flux(value: str) -> dict[str, Any]:
        post = {"substitute": {"v": value}}
        return {"namespace": "flux-system", "postBuild": post, "strict": True, "unresolved": False}

    assert values(build(repo, sha, "app", flux=flux("a"))) == {"app": "a"}
    assert values(build(repo, sha, "app", flux=flux("b"))) == {"app": "b"}
    assert values(build(repo, sha, "app", flux=flux("a"))) == {"app": "a"}
    assert counts() == (1, 2)


@needs_helper
def test_a_build_that_read_through_a_symlink_is_not_kept(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    (tmp_path / "repo" / "shared").mkdir()
    (tmp_path / "repo" / "shared" / "cm.yaml").write_text(cm("shared"))
    (tmp_path / "repo" / "app").mkdir()
    (tmp_path / "repo" / "app" / "cm.yaml").symlink_to("../shared/cm.yaml")
    first = repo.commit({"app/kustomization.yaml": "resources: [cm.yaml]\n"})
    assert values(build(repo, first, "app")) == {"shared": "one"}
    second = repo.commit({"shared/cm.yaml": cm("shared", "two")})
    assert values(build(repo, second, "app")) == {"shared": "two"}
    assert counts() == (0, 2)


@needs_helper
def test_a_failed_build_is_not_kept(overlay: tuple[GitRepo, str]) -> None:
    repo, _ = overlay
    broken = repo.commit({"prod/kustomization.yaml": "resources: [../missing]\n"})
    for _ in range(2):
        with pytest.raises(Exception, match="missing"):
            build(repo, broken, "prod")
    assert counts() == (0, 2)


@needs_helper
def test_off_keeps_nothing(overlay: tuple[GitRepo, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(buildcache.ENV, "off")
    buildcache.reset()
    repo, first = overlay
    build(repo, first, "prod")
    build(repo, first, "prod")
    assert counts() == (0, 0)


_AGAIN = """
import json, sys
from gate.sources import buildcache, partial, render
from gate.sources.render import ExportedTree
with ExportedTree(sys.argv[1], sys.argv[2]) as tree:
    objects = tree.build("prod")
    exported = tree._exported is not None
print(json.dumps({"hits": buildcache.BUILDS.hits, "exported": exported,
                  "objects": [[o.body, o.source.path, o.source.line] for o in objects]}))
"""


def _in_a_process(repo: GitRepo, rev: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _AGAIN, str(repo.root), rev],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,  # a hang guard, not a speed target
    )
    got: dict[str, Any] = json.loads(done.stdout)
    return got


@needs_helper
def test_a_later_run_reuses_the_build_and_a_damaged_store_is_built_again(
    overlay: tuple[GitRepo, str],
) -> None:
    repo, first = overlay
    cold = _in_a_process(repo, first)
    warm = _in_a_process(repo, first)
    assert (cold["hits"], cold["exported"]) == (0, True)
    assert (warm["hits"], warm["exported"]) == (1, False)
    assert warm["objects"] == cold["objects"]
    folder = Path(os.environ[buildcache.ENV])
    stores = list(folder.rglob("*.sqlite"))
    assert stores, f"nothing kept under {folder}"
    for store in stores:
        store.write_bytes(b"not a database" * 100)
    damaged = _in_a_process(repo, first)
    assert damaged["objects"] == cold["objects"]


# --- a miss writes only what the build read before, and proves that was enough ----------------


def built_on_part(repo: GitRepo, rev: str, path: str, **fields: Any) -> tuple[list[Any], bool]:
    """The build in a fresh directory (no spare export to write over), and whether the build
    was done on part of the revision."""
    render.forget_kept()
    with ExportedTree(repo.root, rev) as tree:
        objects = tree.build(path, **fields)
        assert tree._exported is not None
        return objects, not tree._exported.complete


@needs_helper
def test_a_miss_builds_on_the_part_it_read_before_or_on_the_whole_when_it_reads_past_it(
    tmp_path: Path,
) -> None:
    repo = GitRepo(tmp_path / "repo")
    files = {f"other/{i}/cm.yaml": cm(f"other-{i}") for i in range(20)}
    first = repo.commit(
        {
            **files,
            "apps/a.yaml": cm("a"),
            "apps/deep/b.yaml": cm("b"),
            "apps/app/kustomization.yaml": "resources: [c.yaml, ../../shared/s.yaml]\n",
            "apps/app/c.yaml": cm("c"),
            "shared/s.yaml": cm("s"),
        }
    )
    four = {"a": "one", "b": "one", "c": "one", "s": "one"}
    objects, on_part = built_on_part(repo, first, "apps", kustomization={})
    assert (values(objects), on_part) == (four, False)
    # content it read changed: the part it read before is enough, and it is the same build
    second = repo.commit({"shared/s.yaml": cm("s", "two")})
    objects, on_part = built_on_part(repo, second, "apps", kustomization={})
    assert (values(objects), on_part) == ({**four, "s": "two"}, True)
    # a directory new below a scanned one (an app added): what a scanned directory holds is
    # written whole, so the part holds it too
    third = repo.commit({"apps/deep/deeper/d.yaml": cm("d")})
    objects, on_part = built_on_part(repo, third, "apps", kustomization={})
    assert (values(objects), on_part) == ({**four, "s": "two", "d": "one"}, True)
    # a resource named now that was not written: the part fails, the whole builds
    fourth = repo.commit(
        {"apps/app/kustomization.yaml": "resources: [c.yaml, ../../other/3/cm.yaml]\n"}
    )
    objects, on_part = built_on_part(repo, fourth, "apps", kustomization={})
    assert values(objects) == {"a": "one", "b": "one", "c": "one", "d": "one", "other-3": "one"}
    assert not on_part


def plan_of(files: list[str]) -> ExportPlan:
    entries = {p: TreeEntry(p, "100644", "0" * 40) for p in files}
    dirs = {p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/") + 1)}
    return ExportPlan(entries, frozenset(dirs))


def part_of(files: list[str]) -> Exported:
    written = plan_of(files)
    return Exported("x", dict.fromkeys(written.files, ("100644", "0" * 40)), written.dirs, False)


@pytest.mark.parametrize(
    ("read", "covered"),
    [
        (("file", "a/k.yaml"), True),
        (("file", "a/new.yaml"), False),  # there in the whole, not in the part
        (("file", "a/none.yaml"), True),  # in neither
        (("stat", "b"), False),  # a directory the part lacks
        (("list", "a"), False),  # the part lists fewer names
        (("list", "c"), True),
        (("tree", "a"), False),
        (("tree", "c"), True),
        (("list", ""), False),  # the root's listing lacks `b`
        (("tree", ""), False),  # and so does everything below it
        (("stat", ""), True),
    ],
)
def test_a_build_on_part_of_a_revision_counts_only_when_each_read_is_answered_the_same(
    read: tuple[str, str], covered: bool
) -> None:
    plan = plan_of(["a/k.yaml", "a/new.yaml", "b/x.yaml", "c/d/y.yaml"])
    part = part_of(["a/k.yaml", "c/d/y.yaml"])
    assert partial.covers([read], part, plan) is covered
    assert partial.covers([read], part_of(list(plan.files)), plan)  # the whole covers all


@needs_helper
def test_a_first_build_is_tried_on_its_own_directory(tmp_path: Path) -> None:
    """A path built for the first time (an app added) most likely reads below itself: only
    that is written, and the build counts when it read nothing else."""
    repo = GitRepo(tmp_path / "repo")
    files = {f"other/{i}/cm.yaml": cm(f"other-{i}") for i in range(20)}
    sha = repo.commit(
        {**files, "app/kustomization.yaml": "resources: [cm.yaml]\n", "app/cm.yaml": cm("app")}
    )
    objects, on_part = built_on_part(repo, sha, "app")
    assert (values(objects), on_part) == ({"app": "one"}, True)
