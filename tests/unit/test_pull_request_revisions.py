"""A pull request is judged on its own changes: from the merge base of its base and head.

On `pull_request` the gate compared the PR's base SHA (main's tip) with the branch tip, so a
branch behind main was blocked for a claim main added after the branch forked: to that diff the
claim looked removed. Real `gate check` runs in a real repository, with the event as GitHub
Actions gives it (GITHUB_ACTIONS, GITHUB_EVENT_NAME, a GITHUB_EVENT_PATH payload file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.helpers import GitRepo, claim, doc

ROOT = Path(__file__).resolve().parents[2]
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: app}}\n"


def _claim(name: str) -> str:
    return claim().replace("name: data", f"name: {name}")


def _settings(value: str) -> str:
    return CONFIG_MAP.format() + f"data: {{mode: {value}}}\n"


def _check_event(
    repo: GitRepo, tmp_path: Path, event: str, payload: dict[str, object], *args: str
) -> subprocess.CompletedProcess[str]:
    """`gate check -o json` in the repository, as a GitHub Actions step on `event` runs it."""
    path = tmp_path / f"{event}.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(
        GITHUB_ACTIONS="true",
        GITHUB_EVENT_NAME=event,
        GITHUB_EVENT_PATH=str(path),
        PYTHONPATH=str(ROOT),
    )
    return subprocess.run(
        [sys.executable, "-m", "gate", "check", "-o", "json", *args],
        cwd=repo.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _pr(base: str, head: str) -> dict[str, object]:
    return {"pull_request": {"base": {"sha": base}, "head": {"sha": head}}}


def _behind_main(tmp_path: Path, branch_files: dict[str, str | None]) -> tuple[GitRepo, str, str]:
    """main declares claim data; a branch forks; main then adds claim added-on-main; the branch
    makes its own change. Returns the repository, main's tip and the branch's tip."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/data.yaml": _claim("data"), "deploy/cm.yaml": _settings("a")}, "base")
    repo.git("branch", "feature")
    main = repo.commit({"deploy/added.yaml": _claim("added-on-main")}, "main adds a claim")
    repo.git("checkout", "-q", "feature")
    head = repo.commit(branch_files, "the branch's change")
    return repo, main, head


def test_a_branch_behind_main_is_not_blocked_for_a_claim_main_added(tmp_path: Path) -> None:
    repo, main, head = _behind_main(tmp_path, {"deploy/cm.yaml": _settings("b")})
    result = _check_event(repo, tmp_path, "pull_request", _pr(main, head))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["context"], report["verdict"]) == ("preview", "allow")
    assert "added-on-main" not in result.stdout


def test_a_pull_request_that_removes_a_claim_is_still_blocked(tmp_path: Path) -> None:
    repo, main, head = _behind_main(tmp_path, {"deploy/data.yaml": None})
    result = _check_event(repo, tmp_path, "pull_request", _pr(main, head))
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "block"
    assert "PersistentVolumeClaim app/data" in result.stdout
    assert "added-on-main" not in result.stdout  # main's claim is not the PR's removal


def test_an_explicit_base_is_compared_as_given(tmp_path: Path) -> None:
    """--base names the revision to compare with; the event only supplies defaults."""
    repo, main, head = _behind_main(tmp_path, {"deploy/cm.yaml": _settings("b")})
    result = _check_event(repo, tmp_path, "pull_request", _pr(main, head), "--base", main)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "added-on-main" in result.stdout


def test_merge_group_and_push_compare_the_event_revisions_as_they_are(tmp_path: Path) -> None:
    repo, main, head = _behind_main(tmp_path, {"deploy/cm.yaml": _settings("b")})
    queued: dict[str, object] = {"merge_group": {"base_sha": main, "head_sha": head}}
    pushed: dict[str, object] = {"before": main, "after": head}
    for event, payload in (("merge_group", queued), ("push", pushed)):
        result = _check_event(repo, tmp_path, event, payload)
        assert result.returncode == 1, (event, result.stdout, result.stderr)
        assert "added-on-main" in result.stdout, event


def test_unrelated_histories_are_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    main = repo.commit({"deploy/data.yaml": doc(_claim("data"))}, "base")
    repo.git("checkout", "-q", "--orphan", "other")
    head = repo.commit({"deploy/data.yaml": _claim("data")}, "unrelated")
    result = _check_event(repo, tmp_path, "pull_request", _pr(main, head))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no common ancestor" in result.stderr and "--base and --head" in result.stderr
    assert "Traceback" not in result.stderr
