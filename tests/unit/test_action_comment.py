"""action/comment, the Action's sticky pull request comment, run as the comment step runs it (a
subprocess with the runner's environment) against a loopback stand-in for GitHub's API
(tests/unit/githubapi.py, which records every request): it posts once and then updates the same
comment, follows the Link header through every page, keeps to GitHub's 65,536 characters without
cutting a code fence or leaving a `<details>` open, turns a 403 (a fork's read-only token, a job
without `pull-requests: write`) into a warning with the fix and exit 0, and keeps two gates'
comments apart. The step run by the real runner, act, is tests/e2e/test_action_comment.py.

The report it posts is the check step's step summary: the last test holds that it is what
`gate check -o markdown` prints, so the comment needs no second check."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.githubapi import BODY_LIMIT, GitHubStandIn, serve
from tests.unit.helpers import GitRepo, claim, deployment, doc

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "action" / "comment"
REPO = "acme/fleet"
PR = 7


def _load() -> Any:
    """action/comment as a module (it has no .py suffix: it is run as a script)."""
    loader = importlib.machinery.SourceFileLoader("action_comment", str(SCRIPT))
    spec = importlib.util.spec_from_loader("action_comment", loader)
    assert spec
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


comment: Any = _load()


def report(verdict: str = "block", extra: str = "") -> str:
    return f"## prune-gate: {verdict.upper()}\n\n1 deletion blocked.\n{extra}"


def pull_request(head_repo: str = REPO, sha: str = "a" * 40) -> dict[str, Any]:
    return {
        "action": "synchronize",
        "number": PR,
        "pull_request": {
            "number": PR,
            "head": {"sha": sha, "repo": {"full_name": head_repo}},
            "base": {"sha": "b" * 40, "repo": {"full_name": REPO}},
        },
        "repository": {"full_name": REPO},
    }


def run_step(
    api: GitHubStandIn,
    tmp: Path,
    *,
    verdict: str = "block",
    text: str | None = None,
    event: str = "pull_request",
    payload: dict[str, Any] | None = None,
    token: str | None = None,
    **inputs: str,
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The comment step once: its output, and the outputs it wrote."""
    tmp.mkdir(parents=True, exist_ok=True)
    event_file, report_file, output = tmp / "event.json", tmp / "report.md", tmp / "output"
    event_file.write_text(json.dumps(payload or pull_request()), encoding="utf-8")
    report_file.write_text(report(verdict) if text is None else text, encoding="utf-8")
    output.write_text("", encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TOKEN": api.token if token is None else token,
        "VERDICT": verdict,
        "REPORT": str(report_file),
        "GITHUB_API_URL": api.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": event,
        "GITHUB_EVENT_PATH": str(event_file),
        "GITHUB_SERVER_URL": "https://github.example",
        "GITHUB_RUN_ID": "42",
        "GITHUB_WORKFLOW": "ci",
        "GITHUB_JOB": "gate",
        "GITHUB_SHA": "c" * 40,
        "GITHUB_OUTPUT": str(output),
        **{name.upper(): value for name, value in inputs.items()},
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return done, outputs


def warnings(done: subprocess.CompletedProcess[str]) -> list[str]:
    return re.findall(r"^::warning title=prune-gate comment::(.*)$", done.stdout, re.M)


def bodies(api: GitHubStandIn) -> list[str]:
    return [str(c["body"]) for c in api.comments.get((REPO, PR), [])]


def test_it_posts_once_then_updates_the_same_comment_and_keeps_the_history(
    tmp_path: Path,
) -> None:
    with serve(GitHubStandIn()) as api:
        first, out = run_step(api, tmp_path / "1", verdict="block")
        assert first.returncode == 0 and warnings(first) == [], first.stdout + first.stderr
        (made,) = api.comments[(REPO, PR)]
        assert out["url"] == made["html_url"]
        assert "posted on #7 (BLOCK)" in first.stdout
        second, _ = run_step(
            api, tmp_path / "2", verdict="allow", text=report("allow"),
            payload=pull_request(sha="d" * 40),
        )  # fmt: skip
    assert second.returncode == 0 and warnings(second) == [], second.stdout
    assert [(r.method, r.path) for r in api.writes()] == [
        ("POST", f"/repos/{REPO}/issues/{PR}/comments"),
        ("PATCH", f"/repos/{REPO}/issues/comments/{made['id']}"),
    ]
    assert all(r.headers["authorization"] == f"Bearer {api.token}" for r in api.requests)
    (body,) = bodies(api)
    assert body.startswith("<!-- prune-gate:comment key=")
    assert "## prune-gate: ALLOW" in body and "## prune-gate: BLOCK" not in body
    assert "The verdict changed: BLOCK at `aaaaaaaaaaaa` → ALLOW at `dddddddddddd`." in body
    assert "Earlier runs (1)" in body and "| BLOCK | `aaaaaaaaaaaa` |" in body
    assert "https://github.example/acme/fleet/actions/runs/42" in body


def test_a_first_run_that_allows_posts_nothing(tmp_path: Path) -> None:
    with serve(GitHubStandIn()) as api:
        done, out = run_step(api, tmp_path, verdict="allow", text=report("allow"))
    assert done.returncode == 0 and warnings(done) == []
    assert api.writes() == [] and "url" not in out
    assert "allow, and no earlier comment to update" in done.stdout


def test_it_finds_its_comment_on_a_later_page_by_the_link_header(tmp_path: Path) -> None:
    with serve(GitHubStandIn(page_size=3)) as api:
        run_step(api, tmp_path / "1")
        api.comments[(REPO, PR)][:0] = [
            {"id": i, "body": f"comment {i}", "html_url": ""} for i in range(1, 8)
        ]
        api.requests.clear()
        done, _ = run_step(api, tmp_path / "2")
    assert done.returncode == 0 and warnings(done) == [], done.stdout
    pages = [r.query.get("page", "1") for r in api.requests if r.method == "GET"]
    assert pages == ["1", "2", "3"]  # 7 others, then this gate's: the 8th, on page 3
    assert [r.method for r in api.writes()] == ["PATCH"]
    assert len(bodies(api)) == 8


def test_a_next_page_on_another_origin_is_not_followed_with_the_token(tmp_path: Path) -> None:
    with serve(GitHubStandIn(page_size=1, links_to="http://127.0.0.2:9")) as api:
        api.add(REPO, PR, "a person's comment")
        api.add(REPO, PR, "another")
        done, _ = run_step(api, tmp_path)
    assert done.returncode == 0, done.stdout
    (said,) = warnings(done)
    assert "the next page of #7's comments is on http://127.0.0.2:9, not" in said
    assert [r.method for r in api.requests] == ["GET", "POST"]


def test_another_gate_and_a_quoted_marker_are_left_alone(tmp_path: Path) -> None:
    """Two gates in one repository (other paths) keep a comment each; a person's reply that
    quotes the marker is never taken for the gate's own."""
    with serve(GitHubStandIn()) as api:
        run_step(api, tmp_path / "apps", paths="apps\n")
        (apps,) = bodies(api)
        marker = apps.splitlines()[0]
        api.add(REPO, PR, f"> {marker}\n> quoted by a person")
        run_step(api, tmp_path / "infra", paths="infra\n")
        run_step(
            api, tmp_path / "infra-again", paths="infra\n", verdict="warn", text=report("warn")
        )
        run_step(
            api, tmp_path / "apps-again", paths="apps\n", verdict="allow", text=report("allow")
        )
    methods = [r.method for r in api.writes()]
    assert methods == ["POST", "POST", "PATCH", "PATCH"]
    apps_now, quoted, infra = bodies(api)
    assert apps_now.splitlines()[0] == marker and "ALLOW" in apps_now
    assert quoted == f"> {marker}\n> quoted by a person"
    assert infra.splitlines()[0] != marker and "## prune-gate: WARN" in infra
    for part in ("GITHUB_WORKFLOW", "GITHUB_JOB", "PATHS", "FLUX_ROOTS", "CONFIG", "KUBE_CONTEXT"):
        assert comment.comment_key({part: "a"}) != comment.comment_key({part: "b"}), part


def test_a_report_over_the_limit_is_cut_outside_fences_and_details(tmp_path: Path) -> None:
    findings = "\n".join(
        f"### block `NOT_RETIRED` PersistentVolumeClaim app/data-{i}\n\nwhy {i}\n\n"
        f"1. in the repository, run:\n   ```sh\n   {'x' * 300} {i}\n   ```"
        for i in range(400)
    )
    standing = "\n".join(f"- standing {i}" for i in range(200))
    big = report(
        "block", f"\n{findings}\n\n<details><summary>s</summary>\n\n{standing}\n\n</details>"
    )
    assert len(big) > BODY_LIMIT
    with serve(GitHubStandIn()) as api:
        done, _ = run_step(api, tmp_path, text=big)
    assert done.returncode == 0 and warnings(done) == [], done.stdout
    (body,) = bodies(api)  # the stand-in refuses a body over 65,536 characters, as GitHub does
    assert BODY_LIMIT - 1000 < len(body) <= BODY_LIMIT
    assert "The report is cut here to fit GitHub's comment limit (65,536 characters)." in body
    fences = [line for line in body.splitlines() if line.strip().startswith("```")]
    assert len(fences) % 2 == 0
    assert body.count("<details") == body.count("</details>")
    assert comment.read_state(body)[-1]["verdict"] == "block"  # the record survives the cut


def test_a_cut_that_would_fall_in_a_fence_or_details_is_made_before_or_closed() -> None:
    text = "head\n```sh\n" + "y\n" * 50 + "```\ntail"
    cut = comment.fit(text, 40, "NOTE")
    assert cut == "head\n\nNOTE"
    details = "<details><summary>s</summary>\n\n" + "- line\n" * 50 + "</details>"
    cut = comment.fit(details, 80, "NOTE")
    assert cut.startswith("<details><summary>s</summary>\n\n- line")
    assert cut.endswith("- line\n</details>\n\nNOTE") and len(cut) <= 80
    assert comment.fit("short", 80, "NOTE") == "short"


def test_a_403_is_a_warning_that_names_the_permission_and_the_step_passes(
    tmp_path: Path,
) -> None:
    refused = ("POST", 403, "Resource not accessible by integration")
    with serve(GitHubStandIn(refuse=refused)) as api:
        done, out = run_step(api, tmp_path / "same-repo")
        fork, _ = run_step(api, tmp_path / "fork", payload=pull_request(head_repo="someone/fleet"))
    assert done.returncode == 0 and "url" not in out
    (said,) = warnings(done)
    assert "posting a comment on #7: 403 Resource not accessible by integration" in said
    assert "pull-requests: write" in said and "The verdict stands" in said
    (said,) = warnings(fork)
    assert "comes from the fork someone/fleet" in said and "read-only token" in said
    assert fork.returncode == 0


def test_a_bad_token_and_an_unreachable_api_are_warnings_too(tmp_path: Path) -> None:
    with serve(GitHubStandIn()) as api:
        bad, _ = run_step(api, tmp_path / "token", token="wrong")
        url = api.url
    (said,) = warnings(bad)
    assert "401 Bad credentials" in said and "comment-token" in said
    api.url = url  # the server is gone: nothing answers there now
    gone, _ = run_step(api, tmp_path / "gone")
    assert gone.returncode == 0
    (said,) = warnings(gone)
    assert "listing the comments of #7: no answer" in said


def test_a_merge_group_comments_on_the_pull_request_its_head_ref_names(tmp_path: Path) -> None:
    payload = {
        "merge_group": {
            "head_sha": "e" * 40, "base_sha": "b" * 40,
            "head_ref": f"refs/heads/gh-readonly-queue/release/v2/pr-{PR}-{'b' * 40}",
        },
    }  # fmt: skip
    with serve(GitHubStandIn()) as api:
        done, _ = run_step(api, tmp_path / "queue", event="merge_group", payload=payload)
        push, _ = run_step(api, tmp_path / "push", event="push", payload={"after": "f" * 40})
    assert done.returncode == 0 and warnings(done) == [], done.stdout
    (body,) = bodies(api)
    assert "head `eeeeeeeeeeee`" in body
    assert "no pull request to comment on in this push run" in push.stdout
    assert len(api.writes()) == 1


def test_a_check_that_could_not_decide_says_so(tmp_path: Path) -> None:
    with serve(GitHubStandIn()) as api:
        done, _ = run_step(api, tmp_path, verdict="", text="")
    assert done.returncode == 0 and warnings(done) == []
    (body,) = bodies(api)
    assert "## prune-gate: could not decide" in body and "exit 2" in body


@pytest.mark.parametrize("verdict", ["block", "allow"])
def test_the_step_summary_the_comment_posts_is_what_gate_check_o_markdown_prints(
    tmp_path: Path, verdict: str
) -> None:
    """The check step runs `gate check --format github` once, its step summary going to the
    file the comment step reads: the same markdown `-o markdown` prints, with no second check."""
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"deploy/app.yaml": doc(claim()), "deploy/web.yaml": deployment()})
    head = repo.commit({"deploy/app.yaml": None} if verdict == "block" else {"README": "x"})
    gate = [sys.executable, "-m", "gate", "check", "--base", base, "--head", head]
    gate += ["--render", "none", "--context", "preview"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI"))}
    summary = tmp_path / "summary.md"
    github = subprocess.run(
        [*gate, "--format", "github"], cwd=repo.root, capture_output=True, text=True, timeout=120,
        env={**env, "GITHUB_STEP_SUMMARY": str(summary)}, check=False,
    )  # fmt: skip
    markdown = subprocess.run(
        [*gate, "-o", "markdown"], cwd=repo.root, capture_output=True, text=True, timeout=120,
        env=env, check=False,
    )  # fmt: skip
    assert github.returncode == markdown.returncode == (1 if verdict == "block" else 0)
    assert summary.read_text("utf-8") == markdown.stdout
    assert f"## prune-gate: {verdict.upper()}" in markdown.stdout


def test_the_action_runs_the_comment_step_after_the_check_only_when_asked(tmp_path: Path) -> None:
    """action.yml as the emulator (tests/unit/actionrunner.py) runs it after a passing check:
    with `comment: true` the comment step runs (on a push it finds no pull request and says so),
    and the check's summary is still the step summary; by default the step is skipped. After a
    failing check, the step is act's to run (tests/e2e/test_action_comment.py)."""
    from tests.unit.actionrunner import run_action

    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"deploy/app.yaml": doc(claim())})
    head = repo.commit({"README": "x"})
    runs = {}
    for value in ("true", "false"):
        temp = tmp_path / f"runner-{value}"
        temp.mkdir()
        runs[value] = run_action(
            repo.root, temp, event="push", payload={"before": base, "after": head}, sha=head,
            inputs={"render": "none", "comment": value},
        )  # fmt: skip
    asked, default = runs["true"], runs["false"]
    assert asked.code == default.code == 0, asked.stdout + asked.stderr
    assert [s.name for s in asked.steps][-2:] == ["gate check", "comment on the pull request"]
    assert [s.name for s in default.steps][-1] == "gate check"
    assert "no pull request to comment on in this push run" in asked.steps[-1].stdout
    assert "## prune-gate: ALLOW" in asked.steps[-2].summary
    assert asked.outputs["comment-url"] == ""
