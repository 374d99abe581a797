"""The reading edge's fast paths give what the plain ones give: a directory's files looked up in
the parse cache in batches, read without a Path per file, parsed once per content; a git tree
listed once per commit, its blobs read in one process, each parsed once per run and not at all
when the cache has its id; errors in their turn. No test here measures time.

What the fast paths save is counted, not tested: the cache's queries per batch, the blobs asked
of git per side, the git processes a commit's reads start are figures with targets in
`python -m bench.bench_internals`. Here: the answers, and what is parsed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gate.model.errors import GitError, InputError
from gate.model.objects import RawObject
from gate.sources import gitsource, manifests, parsecache, yamlevents
from tests.unit.helpers import GitRepo

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: n}}\ndata: {{k: v}}\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("PRUNE_GATE_PARSE_CACHE", str(folder))
    _forget_this_process()
    yield folder
    _forget_this_process()


def _forget_this_process() -> None:
    """What a new process sees: only what was written."""
    parsecache.flush()
    parsecache.reset()


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def _summary(objects: list[RawObject]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(str(o.source), o.root, o.body) for o in objects]


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts `manifests` parses from now on."""
    parsed: list[str] = []
    real = yamlevents.load_documents

    def counting(text: str, max_depth: int) -> Any:
        parsed.append(text)
        return real(text, max_depth)

    monkeypatch.setattr(manifests, "load_documents", counting)
    return parsed


# --- the parse cache ---------------------------------------------------------------------------


def test_get_many_gives_what_get_gives(cache: Path) -> None:
    texts = [CM.format(name=f"c{i}") for i in range(1_200)]  # more than one query's worth
    for i, text in enumerate(texts):
        parsecache.put(parsecache.key(text, True), [({"i": i}, i + 1)])
    pending = parsecache.get_many([parsecache.key(t, True) for t in texts])  # not yet written
    _forget_this_process()
    keys = [parsecache.key(t, True) for t in texts] + [parsecache.key("absent", True)]
    many = parsecache.get_many(keys)
    assert len(many) == len(texts)
    assert many == pending
    assert all(many[k] == parsecache.get(k) for k in keys[::97] if k in many)
    assert parsecache.key("absent", True) not in many
    assert parsecache.get_many([]) == {}


def test_bytes_key_is_the_key_of_the_text() -> None:
    text = "apiVersion: v1  # ünïcode\n"
    for only_objects in (True, False):
        assert parsecache.bytes_key(text.encode(), only_objects) == parsecache.key(
            text, only_objects
        )
    assert parsecache.key(text, True) != parsecache.key(text, False)


def test_a_damaged_entry_is_left_out_of_a_batch_and_its_file_read_again(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "m"
    _write(root, {f"f{i}.yaml": CM.format(name=f"c{i}") for i in range(5)})
    first = manifests.read_path(root)
    _forget_this_process()
    (db,) = cache.glob("*.sqlite")
    flipped, text = (
        parsecache.bytes_key((root / f).read_bytes(), True) for f in ("f1.yaml", "f3.yaml")
    )
    with sqlite3.connect(db) as conn:
        ((data,),) = conn.execute("SELECT data FROM entries WHERE key = ?", (flipped,))
        damaged = data[:-1] + bytes([data[-1] ^ 0xFF])
        conn.execute("UPDATE entries SET data = ? WHERE key = ?", (damaged, flipped))
        # not even a blob, nor UTF-8: only this entry is lost, not the query
        conn.execute("UPDATE entries SET data = CAST(x'ff00ff' AS TEXT) WHERE key = ?", (text,))
    parsecache.reset()
    parsed = _count_parses(monkeypatch)
    assert _summary(manifests.read_path(root)) == _summary(first)
    assert parsed == [(root / f).read_text() for f in ("f1.yaml", "f3.yaml")]


def test_the_reader_names_itself_in_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = parsecache._code_version()
    monkeypatch.setattr(yamlevents, "READER_ID", "native 0.0.0 test", raising=False)
    assert parsecache._code_version() != before


def test_off_still_reads_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRUNE_GATE_PARSE_CACHE", "off")
    _forget_this_process()
    try:
        _write(tmp_path / "m", {"a.yaml": CM.format(name="a"), "b.yaml": CM.format(name="b")})
        assert [o.body["metadata"]["name"] for o in manifests.read_path(tmp_path / "m")] == [
            "a",
            "b",
        ]
        parsecache.flush()
    finally:
        _forget_this_process()
    assert not list((tmp_path / "m").glob("*.sqlite"))


# --- directories -------------------------------------------------------------------------------


def test_a_warm_directory_of_several_batches_is_read_from_the_cache_alone(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "m"
    files = 3 * manifests._BATCH + 5
    _write(root, {f"d{i % 7}/f{i}.yaml": CM.format(name=f"c{i}") for i in range(files)})
    first = manifests.read_path(root)
    assert len(first) == files
    _forget_this_process()
    parsed = _count_parses(monkeypatch)
    again = manifests.read_path(root)
    assert _summary(again) == _summary(first)
    assert parsed == []


def test_the_same_content_is_parsed_once_in_a_directory_and_across_sides(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    same = CM.format(name="same")
    _write(tmp_path / "base", {"a.yaml": same, "b/c.yaml": same, "d.yaml": CM.format(name="d")})
    _write(tmp_path / "head", {"a.yaml": same, "x.yaml": same})
    parsed = _count_parses(monkeypatch)
    base = manifests.read_path(tmp_path / "base")
    head = manifests.read_path(tmp_path / "head")
    assert sorted(parsed) == sorted([same, CM.format(name="d")])
    assert [str(o.source) for o in base] == [
        f"{(tmp_path / 'base').as_posix()}/{rel}:1" for rel in ("a.yaml", "b/c.yaml", "d.yaml")
    ]
    assert [str(o.source) for o in head] == [
        f"{(tmp_path / 'head').as_posix()}/{rel}:1" for rel in ("a.yaml", "x.yaml")
    ]
    assert base[0].body is head[1].body  # one parse, shared: bodies are never mutated


@pytest.mark.parametrize("form", ["plain", "slash", "dot", "dot-sub", "double-slash"])
def test_labels_are_what_pathlib_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    _write(tmp_path / "sub", {"a.yaml": CM.format(name="a"), "b/c.yml": CM.format(name="c")})
    monkeypatch.chdir(tmp_path)
    given = {
        "plain": str(tmp_path / "sub"),
        "slash": f"{tmp_path / 'sub'}/",
        "dot": ".",
        "dot-sub": "./sub",
        "double-slash": f"{tmp_path}//sub",
    }[form]
    if form == "dot":
        monkeypatch.chdir(tmp_path / "sub")
    labels = [o.source.path for o in manifests.read_path(given)]
    assert labels == [(Path(given) / rel).as_posix() for rel in ("a.yaml", "b/c.yml")]


def test_walk_skips_hidden_charts_kustomizations_symlinked_dirs_and_other_files(
    tmp_path: Path,
) -> None:
    root = tmp_path / "m"
    _write(
        root,
        {
            "a.yaml": CM.format(name="a"),
            "z/b.json": '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}',
            ".hidden/x.yaml": "broken: [",
            "d/.hidden.yaml": "broken: [",
            "chart/Chart.yaml": "name: c\n",
            "chart/templates/x.yaml": "{{ broken }",
            "k/kustomization.yaml": "resources: [../a.yaml]\n",
            "notes.txt": "broken: [",
            "outside/o.yaml": CM.format(name="o"),
        },
    )
    (root / "linked").symlink_to(root / "outside", target_is_directory=True)
    (root / "file-link.yaml").symlink_to(root / "a.yaml")
    (root / "dangling.yaml").symlink_to(root / "nowhere.yaml")
    got = [o.source.path[len(root.as_posix()) + 1 :] for o in manifests.read_path(root)]
    assert got == ["a.yaml", "file-link.yaml", "outside/o.yaml", "z/b.json"]


def test_file_order_is_by_path_parts(tmp_path: Path) -> None:
    order = ("a-b.yaml", "a/b.yaml", "a.yaml", "B.yaml", "a/a/z.yaml")
    _write(tmp_path, {rel: CM.format(name=f"n{i}") for i, rel in enumerate(order)})
    got = [o.source.path[len(tmp_path.as_posix()) + 1 :] for o in manifests.read_path(tmp_path)]
    assert got == sorted(got, key=lambda rel: rel.split("/"))
    assert got == ["B.yaml", "a/a/z.yaml", "a/b.yaml", "a-b.yaml", "a.yaml"]


# --- errors, in their turn ---------------------------------------------------------------------


def test_a_file_that_cannot_be_read_after_a_broken_one_is_not_the_error(tmp_path: Path) -> None:
    _write(tmp_path, {"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"})
    (tmp_path / "b.yaml").write_bytes(b"apiVersion: v1\nkind: \xff\n")
    with pytest.raises(InputError, match=r"a\.yaml:1: ConfigMap has no metadata.name"):
        manifests.read_path(tmp_path)
    (tmp_path / "a.yaml").write_text(CM.format(name="a"))
    with pytest.raises(InputError, match=r"b\.yaml: cannot read: 'utf-8' codec"):
        manifests.read_path(tmp_path)


def test_read_errors_are_raised_in_their_turn_and_nothing_after_is_parsed(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, {"a.yaml": CM.format(name="a"), "c.yaml": CM.format(name="c")})
    (tmp_path / "b.yaml").write_bytes(b"apiVersion: v1\nkind: \xff\n")
    parsed = _count_parses(monkeypatch)
    with pytest.raises(InputError, match=r"b\.yaml: cannot read: 'utf-8' codec can't decode"):
        manifests.read_path(tmp_path)
    assert parsed == [CM.format(name="a")]


def test_too_big_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, {"a.yaml": CM.format(name="a"), "b.yaml": CM.format(name="b") + "#" * 100})
    monkeypatch.setattr(manifests, "MAX_MANIFEST_BYTES", 90)
    with pytest.raises(InputError, match=r"b\.yaml: 0\.0 MiB is over the 0 MiB limit"):
        manifests.read_path(tmp_path)


# --- git mode ----------------------------------------------------------------------------------


@pytest.fixture
def git_cache(cache: Path) -> Iterator[Path]:
    yield cache  # the cache fixture forgets this process's parses, git's too


@pytest.fixture
def two_commits(tmp_path: Path) -> tuple[GitRepo, str, str]:
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "apps/a.yaml": CM.format(name="a"),
            "apps/copy-of-a.yaml": CM.format(name="a"),
            "apps/b.yaml": CM.format(name="b"),
            "apps/kustomization.yaml": "resources: [a.yaml]\n",
            "other/c.yaml": CM.format(name="c"),
            ".github/ci.yaml": "on: push\n",
        }
    )
    head = repo.commit({"apps/b.yaml": CM.format(name="b2"), "other/d.yaml": CM.format(name="d")})
    return repo, base, head


def test_git_blobs_are_parsed_once_per_run_and_not_at_all_the_next_run(
    git_cache: Path, two_commits: tuple[GitRepo, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, base, head = two_commits
    parsed = _count_parses(monkeypatch)
    first = (gitsource.read_tree(repo.root, base), gitsource.read_tree(repo.root, head))
    # base: a (and its copy, the same blob), b, c; head: only what changed
    assert sorted(parsed) == sorted(CM.format(name=n) for n in ("a", "b", "c", "b2", "d"))
    assert [str(o.source) for o in first[0]] == [
        "apps/a.yaml:1",
        "apps/b.yaml:1",
        "apps/copy-of-a.yaml:1",
        "other/c.yaml:1",
    ]
    assert [o.root for o in first[1]] == ["."] * 5

    _forget_this_process()
    parsed.clear()
    again = (gitsource.read_tree(repo.root, base), gitsource.read_tree(repo.root, head))
    assert [_summary(side) for side in again] == [_summary(side) for side in first]
    assert parsed == []


def test_every_read_of_one_commit_answers_from_its_listing(
    git_cache: Path, two_commits: tuple[GitRepo, str, str]
) -> None:
    repo, base, _ = two_commits
    assert gitsource.resolve_revision(repo.root, base) == base
    assert gitsource.submodules(repo.root, base) == {}
    assert gitsource.kustomization_files(repo.root, base) == ["apps/kustomization.yaml"]
    names = [o.body["metadata"]["name"] for o in gitsource.read_tree(repo.root, base)]
    assert names == ["a", "b", "a", "c"]
    assert gitsource.read_file(repo.root, base, "apps/b.yaml") == CM.format(name="b")
    assert gitsource.read_file(repo.root, base, "apps/missing.yaml") is None
    assert gitsource.read_file(repo.root, base, "apps") is None  # a directory is not a file
    assert gitsource.read_blob(repo.root, base, ".github/ci.yaml") == (False, b"on: push\n")


def test_a_path_outside_the_listed_ones_is_still_read(
    git_cache: Path, two_commits: tuple[GitRepo, str, str]
) -> None:
    repo, base, _ = two_commits
    gitsource.read_tree(repo.root, base, ["apps"])
    assert gitsource.read_file(repo.root, base, "apps/a.yaml") == CM.format(name="a")
    assert gitsource.read_file(repo.root, base, "other/c.yaml") == CM.format(name="c")
    assert gitsource.read_file(repo.root, base, "other/none.yaml") is None


def test_unknown_revisions_are_still_refused(two_commits: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = two_commits
    gitsource.read_tree(repo.root, base)
    with pytest.raises(GitError, match="unknown revision"):
        gitsource.read_tree(repo.root, "0" * 40)
    with pytest.raises(GitError, match="unknown revision"):
        gitsource.resolve_revision(repo.root, base[:-1] + ("0" if base[-1] != "0" else "1"))
    other = GitRepo(repo.root.parent / "other")
    other.commit({"x.yaml": CM.format(name="x")})
    with pytest.raises(GitError, match="unknown revision"):  # known in another repository
        gitsource.read_tree(other.root, base)


def test_git_errors_keep_their_turn(
    git_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {
            "a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
            "b.yaml": "broken: [",
            "c.yaml": CM.format(name="c"),
        }
    )
    parsed = _count_parses(monkeypatch)
    with pytest.raises(InputError, match=r"^a\.yaml:1: ConfigMap has no metadata.name"):
        gitsource.read_tree(repo.root, sha)
    assert parsed == ["apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"]  # nothing after it


def test_reading_a_tree_needs_no_gitpython(two_commits: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = two_commits
    code = (
        "import sys; from gate.sources import gitsource; "
        f"objs = gitsource.read_tree({str(repo.root)!r}, {base!r}); "
        f"gitsource.read_file({str(repo.root)!r}, {base!r}, 'apps/a.yaml'); "
        "print(len(objs), 'git' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["4", "False"]


def test_the_repository_is_found_as_git_finds_it(
    two_commits: tuple[GitRepo, str, str], tmp_path: Path
) -> None:
    repo, base, _ = two_commits
    expected = _summary(gitsource.read_tree(repo.root, base))
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(bare)], check=True)
    for where in (repo.root / "apps", repo.root / "apps" / "a.yaml", repo.root / ".git", bare):
        assert _summary(gitsource.read_tree(where, base)) == expected, where
    assert gitsource.read_tree(repo.root / "apps", base, [str(repo.root / "apps")])
    with pytest.raises(GitError, match="an absolute path needs a work tree"):
        gitsource.read_tree(bare, base, [str(repo.root / "apps")])
    with pytest.raises(GitError, match="is outside the repository"):
        gitsource.read_tree(repo.root, base, [str(tmp_path)])
    with pytest.raises(GitError, match=r"nowhere: no such directory"):
        gitsource.read_tree(tmp_path / "nowhere", base)
    with pytest.raises(GitError, match=r"plain: not a git repository \(git mode reads"):
        (tmp_path / "plain").mkdir()
        gitsource.read_tree(tmp_path / "plain", base)


def test_git_that_cannot_run_is_said_so(
    two_commits: tuple[GitRepo, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _, _ = two_commits
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(GitError, match="git is not installed"):
        gitsource.resolve_revision(repo.root, "HEAD")


def test_single_files_are_read_by_a_kept_process_replaced_when_it_dies(
    two_commits: tuple[GitRepo, str, str], tmp_path: Path
) -> None:
    repo, base, head = two_commits
    gitsource._close_reader()
    for _ in range(3):
        assert gitsource.read_file(repo.root, base, "apps/b.yaml") == CM.format(name="b")
        assert gitsource.read_file(repo.root, head, "apps/b.yaml") == CM.format(name="b2")
        assert gitsource.read_blob(repo.root, head, "other/d.yaml") == (
            False,
            CM.format(name="d").encode(),
        )

    # a reader that died is replaced, and the read still answers
    (reader,) = gitsource._READER.values()
    reader.process.kill()
    reader.process.wait()
    assert gitsource.read_file(repo.root, base, "apps/a.yaml") == CM.format(name="a")
    (replacement,) = gitsource._READER.values()
    assert replacement is not reader and replacement.process.poll() is None

    # another repository: its own reader, the first one closed (one at a time)
    other = GitRepo(tmp_path / "other")
    sha = other.commit({"x.yaml": CM.format(name="x")})
    (first,) = gitsource._READER.values()
    assert gitsource.read_file(other.root, sha, "x.yaml") == CM.format(name="x")
    assert first.process.poll() is not None
    assert len(gitsource._READER) == 1
    gitsource._close_reader()
    assert gitsource._READER == {}


def test_a_blob_git_does_not_have_is_an_error_and_the_next_read_works(
    two_commits: tuple[GitRepo, str, str],
) -> None:
    repo, base, _ = two_commits
    r = gitsource._open(repo.root)
    missing = gitsource.TreeEntry("gone.yaml", "100644", "0" * 40)
    with pytest.raises(
        GitError, match=r"cannot read gone\.yaml \(0{40}\): git answered '0{40} missing'"
    ):
        gitsource._blob(r, missing)
    assert gitsource.read_file(repo.root, base, "apps/a.yaml") == CM.format(name="a")
