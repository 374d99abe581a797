"""`gate history`: the gate replayed over real git repositories, commit by commit.

Each test builds a repository in tmp_path with real commits and runs the real CLI entry point.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from gate.cli.root import main
from gate.engine.history import Commit, Revision, RevisionCache, summarize
from gate.model.errors import InputError
from gate.model.objects import RawObject
from gate.sources import gitsource, render
from tests.ci import needs_binaries
from tests.unit.helpers import GitRepo, claim, cli_runner, deployment

CONFIG = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: app\n"
BROKEN = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n"


def gate(*args: str) -> Result:
    return cli_runner().invoke(main, ["history", *args])


def rows(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    commits: list[dict[str, Any]] = data["commits"]
    return commits


@pytest.fixture
def history(tmp_path: Path) -> tuple[GitRepo, str]:
    """start: a claim and its workload; then an allowed change, a claim removed without
    retirement, a malformed manifest, and its fix."""
    repo = GitRepo(tmp_path / "repo")
    start = repo.commit(
        {"app/claim.yaml": claim(), "app/web.yaml": deployment(), "README": "x\n"}, "start"
    )
    repo.commit({"app/settings.yaml": CONFIG}, "add settings")
    repo.commit({"app/claim.yaml": None, "app/web.yaml": None}, "drop the claim")
    repo.commit({"app/broken.yaml": BROKEN}, "a broken manifest")
    repo.commit({"app/broken.yaml": None}, "fix it")
    return repo, start


def test_each_commit_is_a_row_with_its_verdict(history: tuple[GitRepo, str]) -> None:
    repo, start = history
    got = rows(gate("--repo", str(repo.root), "--range", f"{start}..HEAD", "-o", "json"))
    assert [r["subject"] for r in got] == [
        "add settings",
        "drop the claim",
        "a broken manifest",
        "fix it",
    ]
    allowed, blocked, broken, fixed = got
    assert (allowed["verdict"], allowed["codes"], allowed["objects"]) == ("allow", [], 3)
    assert blocked["verdict"] == "block"
    assert "NOT_RETIRED" in blocked["codes"]
    assert len(blocked["codes"]) == len(set(blocked["codes"]))  # deduplicated
    assert {f["code"] for f in blocked["findings"]} == set(blocked["codes"])
    assert blocked["findings"][0]["object"]["kind"] == "PersistentVolumeClaim"
    assert blocked["objects"] == 1
    # Could not decide: an error row naming the file and line, and the replay went on.
    assert broken["verdict"] == "error"
    assert "app/broken.yaml:5" in broken["error"]
    # Its parent is the broken revision: judged against the last buildable ancestor instead
    # (Flux applied nothing from the broken one), which it equals: allowed, and said.
    assert (fixed["verdict"], fixed["error"], fixed["base"]) == ("allow", None, blocked["sha"])
    assert blocked["base"] is None and allowed["base"] is None
    (note,) = fixed["notes"]
    assert f"the parent {broken['sha'][:12]} cannot be built" in note
    assert "app/broken.yaml:5" in note
    assert f"last buildable ancestor {blocked['sha'][:12]}" in note
    assert all(isinstance(r["seconds"], float) for r in got)


def test_the_table_and_its_summary(history: tuple[GitRepo, str]) -> None:
    repo, start = history
    result = gate("--repo", str(repo.root), "--range", f"{start}..HEAD")
    assert result.exit_code == 0, result.output  # blocked commits are rows, not the exit code
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["COMMIT", "SUBJECT", "VERDICT", "CODES", "OBJECTS", "SECONDS"]
    blocked = next(line for line in lines if "drop the claim" in line)
    assert blocked.split()[4] == "block" and "NOT_RETIRED" in blocked
    assert any(line.startswith("  error: ") and "app/broken.yaml:5" in line for line in lines)
    assert lines[-1].startswith("4 commits (context merged): 2 allow, 0 warn, 1 block, 0 defer")
    assert "1 error" in lines[-1] and "s per commit" in lines[-1]
    assert any(line.startswith("  note: ") and "last buildable ancestor" in line for line in lines)


def test_json_summary_counts_the_rows(history: tuple[GitRepo, str]) -> None:
    repo, start = history
    result = gate("--repo", str(repo.root), "--range", f"{start}..HEAD", "-o", "json")
    data = json.loads(result.stdout)
    assert data["context"] == "merged"
    assert data["range"] == f"{start}..HEAD"
    summary = data["summary"]
    assert (summary["commits"], summary["allow"], summary["block"], summary["error"]) == (
        4,
        2,
        1,
        1,
    )


def test_each_revision_is_read_once(
    history: tuple[GitRepo, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, start = history
    calls: Counter[str] = Counter()
    real = gitsource.read_tree

    def counting(repo_dir: str | Path, rev: str, paths: Any = ()) -> list[RawObject]:
        calls[rev] += 1
        return real(repo_dir, rev, paths)

    monkeypatch.setattr(gitsource, "read_tree", counting)
    got = rows(gate("--repo", str(repo.root), "--range", f"{start}..HEAD", "-o", "json"))
    revisions = [start, *(r["sha"] for r in got)]
    assert calls == Counter(dict.fromkeys(revisions, 1))


def test_merges_are_followed_by_their_first_parent_only(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    start = repo.commit({"app/claim.yaml": claim(), "app/web.yaml": deployment()}, "start")
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"app/claim.yaml": None, "app/web.yaml": None}, "feature: drop the claim")
    repo.commit({"app/claim.yaml": claim(), "app/web.yaml": deployment()}, "feature: put it back")
    repo.git("checkout", "-q", "main")
    repo.commit({"app/settings.yaml": CONFIG}, "main: settings")
    repo.git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    got = rows(gate("--repo", str(repo.root), "--range", f"{start}..main", "-o", "json"))
    # The feature's own commits are not replayed; the merge is compared with main before it,
    # where the claim never left.
    assert [(r["subject"], r["verdict"]) for r in got] == [
        ("main: settings", "allow"),
        ("merge feature", "allow"),
    ]


def test_a_path_missing_at_a_revision_is_read_as_empty(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    start = repo.commit({"other/settings.yaml": CONFIG}, "start")
    repo.commit({"app/claim.yaml": claim()}, "add app")
    repo.commit({"app/claim.yaml": None, "other/x": "x\n"}, "remove app")
    repo.commit({"other/y": "y\n"}, "later")
    args = ["--repo", str(repo.root), "--path", "app", "--path", "other", "-o", "json"]
    added, removed, later = rows(gate(*args, "--range", f"{start}..HEAD"))
    assert added["verdict"] == "allow"
    assert added["notes"] == ["app is not at the parent: read as empty (the commit adds it)"]
    assert removed["verdict"] == "block"  # the whole root went: its claim with it
    assert removed["notes"] == [
        f"app is not at {removed['sha'][:12]}: read as empty (the commit removes it)"
    ]
    assert later["verdict"] == "allow"  # app is at neither end of the range, but in it
    assert later["notes"] == []  # absent on both sides: nothing to say


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--range", "HEAD"], "A..B"),
        (["--range", "HEAD...HEAD~1"], "A..B"),
        (["--range", "HEAD..HEAD"], "no commits"),
        (["--range", "nope..HEAD"], "unknown revision nope"),
        (
            ["--range", "HEAD~1..HEAD", "--path", "typo"],
            "typo: not in the repository at any revision",
        ),
        (["--range", "HEAD~1..HEAD", "--render", "kustomize"], "needs at least one --path"),
    ],
)
def test_bad_arguments_exit_2(history: tuple[GitRepo, str], args: list[str], message: str) -> None:
    repo, _ = history
    result = gate("--repo", str(repo.root), *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_git_directory_without_a_work_tree_or_config_is_replayed(
    history: tuple[GitRepo, str], tmp_path: Path
) -> None:
    """A mirror (a bare git directory; some hold no `config` file, which GitPython then takes
    for a work tree's parent): exit 3 before, from GitPython's `git log` run outside it."""
    repo, start = history
    bare = tmp_path / "mirror"
    repo.git("clone", "--quiet", "--bare", str(repo.root), str(bare))
    (bare / "config").unlink()
    args = ["--range", f"{start}..HEAD", "--path", "app", "-o", "json"]
    got = rows(gate("--repo", str(bare), *args))
    assert [r["verdict"] for r in got] == ["allow", "block", "error", "allow"]
    assert got == [
        {**row, "seconds": r["seconds"]}
        for row, r in zip(rows(gate("--repo", str(repo.root), *args)), got, strict=True)
    ]
    missing = gate("--repo", str(bare), "--range", f"{start}..HEAD", "--path", "typo")
    assert missing.exit_code == 2 and "typo: not in the repository" in missing.stderr


def test_an_unreadable_repository_exits_2(tmp_path: Path) -> None:
    result = gate("--repo", str(tmp_path), "--range", "HEAD~1..HEAD")
    assert result.exit_code == 2
    assert "not a git repository" in result.stderr


def test_the_policy_is_the_range_ends(history: tuple[GitRepo, str]) -> None:
    repo, start = history
    repo.commit({"prune-gate.yaml": 'severity:\n  NOT_RETIRED: {merged: "off"}\n'}, "policy: off")
    got = rows(gate("--repo", str(repo.root), "--range", f"{start}..HEAD", "-o", "json"))
    # The policy at the range's end applies to every commit, those before it too.
    dropped = next(r for r in got if r["subject"] == "drop the claim")
    assert "NOT_RETIRED" not in dropped["codes"]


def test_the_cache_reads_each_sha_once_and_keeps_errors() -> None:
    reads: list[str] = []

    def read(sha: str) -> Revision:
        reads.append(sha)
        if sha == "bad":
            raise InputError("cannot parse", "f.yaml:3")
        return Revision(())

    cache = RevisionCache(read)
    for sha in ("a", "a", "bad", "bad", "b", "b"):
        try:
            cache.get(sha)
        except InputError as exc:
            assert str(exc) == "f.yaml:3: cannot parse"
    assert reads == ["a", "bad", "b"]
    assert summarize([]).seconds_per_commit == 0.0
    assert Commit("s", None, "root").parent is None


#: `make test` puts the confined renderer on PATH; a missing one is a failure in CI, not a skip.
needs_helper = needs_binaries(
    shutil.which(render.HELPER) is not None,
    reason="prune-gate-kustomize is not on PATH (run `make test`, which builds it)",
)


@needs_helper
def test_render_kustomize_replays_what_the_kustomization_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = GitRepo(tmp_path / "repo")
    both = "resources: [claim.yaml, web.yaml]\n"
    start = repo.commit(
        {
            "app/kustomization.yaml": both,
            "app/claim.yaml": claim(),
            "app/web.yaml": deployment(),
            "app/unused.yaml": CONFIG,  # not in resources: plain git mode would read it
        },
        "start",
    )
    repo.commit({"app/unused.yaml": None}, "drop a file kustomize never built")
    # The claim leaves the build while its file stays: only a render sees the removal.
    repo.commit({"app/kustomization.yaml": "resources: []\n"}, "drop the claim from resources")
    calls: Counter[str] = Counter()
    real: Callable[..., list[RawObject]] = render.render_kustomize_paths

    def counting(repo_dir: str | Path, rev: str, paths: Any, **kw: Any) -> list[RawObject]:
        calls[rev] += 1
        return real(repo_dir, rev, paths, **kw)

    monkeypatch.setattr(render, "render_kustomize_paths", counting)
    args = ["--repo", str(repo.root), "--range", f"{start}..HEAD", "--path", "app"]
    untouched, dropped = rows(gate(*args, "--render", "kustomize", "-o", "json"))
    assert (untouched["verdict"], untouched["objects"]) == ("allow", 2)
    assert dropped["verdict"] == "block"
    assert "NOT_RETIRED" in dropped["codes"]
    assert sorted(calls.values()) == [1, 1, 1]


def test_a_subject_cannot_paint_the_terminal(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    start = repo.commit({"app/settings.yaml": CONFIG}, "start")
    repo.commit({"app/claim.yaml": claim()}, "\x1b[2Jadd a claim")
    result = gate("--repo", str(repo.root), "--range", f"{start}..HEAD")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout
    assert "\\x1b[2Jadd a claim" in result.stdout
