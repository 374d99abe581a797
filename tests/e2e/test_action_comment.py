"""The Action's sticky pull request comment (`comment: true`) run by the real runner: act
(nektos/act, as in test_action_runner.py, whose `Act` and stand-ins this reuses) runs action.yml
on `pull_request` events, its GITHUB_API_URL pointing at a loopback stand-in for GitHub's API
(tests/unit/githubapi.py: it records every request and answers as api.github.com does).

act takes GITHUB_API_URL and GITHUB_REPOSITORY from `--env` (a user's value wins over its
default, https://api.github.com, and over the repository it reads from a git remote), and gives
`github.token` the `GITHUB_TOKEN` secret: the stand-in expects that token. No cluster is needed
(`render: none`, no `live`), so this module asks for none.

What is asserted is what a person sees on the pull request: the first run, which blocks, posts
one comment carrying the marker and the verdict; the second, after the candidate is fixed,
updates that same comment (no second one) to say allow and that the verdict changed; and the
verdict is still the check step's (failure, exit 1, then success)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.githubapi import GitHubStandIn, serve
from tests.unit.helpers import GitRepo, claim, doc
from tests.wheelhouse import wheelhouse

from . import charts
from .test_action_runner import Act, action_copy, gate_step, job_path, settings_yaml, workflow

pytestmark = pytest.mark.e2e

REPO = "acme/fleet"
PR = 7


@pytest.fixture(scope="module")
def act(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Act:
    """act and a runner's environment, as test_action_runner's fixture makes them, without the
    cluster (nothing here reads one): kubectl stays on PATH as on GitHub's images."""
    binary = charts.built_binary("act", pytestconfig)
    kubectl = charts.built_binary("kubectl", pytestconfig)
    action = action_copy(tmp_path_factory.mktemp("prune-gate-action"))
    config = tmp_path_factory.mktemp("act-config")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(
            ("GITHUB_", "RUNNER_", "ACT_", "PIP_", "VIRTUAL_ENV", "PYTHON", "PRUNE_GATE_")
        )
        and name not in ("KUBECONFIG", "CI")
    }
    env.update(PATH=job_path(kubectl), XDG_CONFIG_HOME=str(config), ACT_DISABLE_VERSION_CHECK="1")
    job_env = {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_FIND_LINKS": str(wheelhouse()),
        "PIP_NO_INDEX": "1",
        "PIP_NO_COMPILE": "1",
        "GITHUB_REPOSITORY": REPO,
    }
    return Act(binary, action, env, job_env)


def payload(base: str, head: str) -> dict[str, Any]:
    return {
        "action": "synchronize", "number": PR,
        "pull_request": {
            "number": PR,
            "base": {"sha": base, "ref": "main", "repo": {"full_name": REPO}},
            "head": {"sha": head, "ref": "drop", "repo": {"full_name": REPO}},
        },
        "repository": {"full_name": REPO},
    }  # fmt: skip


def test_the_comment_is_posted_on_a_block_then_updated_when_the_fix_allows(
    act: Act, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo")
    settings = settings_yaml("app", "data")
    base = repo.commit({"deploy/app.yaml": doc(settings, claim())})
    repo.git("checkout", "-q", "-b", "drop")
    dropped = repo.commit({"deploy/app.yaml": settings})  # an unretired claim: block
    inputs = {"render": "none", "helper": "none", "cache": "false", "comment": "true"}
    flow = workflow(tmp_path, "pull_request", gate_step("gate", **inputs))

    with serve(GitHubStandIn()) as api:
        runner = dataclasses.replace(act, job_env={**act.job_env, "GITHUB_API_URL": api.url})
        first = runner.run(tmp_path / "run-1", flow, repo, "pull_request", payload(base, dropped))
        assert first.job_result == "failure", first.describe()
        assert (first.result(("gate", "check")), first.exit_status(("gate", "check"))) == (
            "failure", 1,
        ), first.describe()  # fmt: skip
        assert first.result(("gate", "comment")) == "success", first.describe()
        (posted,) = api.writes()
        assert (posted.method, posted.path) == ("POST", f"/repos/{REPO}/issues/{PR}/comments")
        (made,) = api.comments[(REPO, PR)]
        body = str(made["body"])
        assert body.startswith("<!-- prune-gate:comment key="), body
        assert "## prune-gate: BLOCK" in body and "NOT_RETIRED" in body, body
        assert body.rstrip("\n").splitlines()[-1].startswith("<!-- prune-gate:state ")
        assert first.outputs(("gate",))["comment-url"] == made["html_url"]
        # The report is the check step's summary, still in the job's step summary as before.
        summary = first.summary(("gate", "check"))
        assert "NOT_RETIRED" in summary and summary.strip() in body, (summary, body)
        assert first.annotations("warning") == [], first.describe()

        fixed = repo.commit({"deploy/app.yaml": doc(settings, claim())})  # the claim is back
        second = runner.run(tmp_path / "run-2", flow, repo, "pull_request", payload(base, fixed))
        assert second.code == 0 and second.job_result == "success", second.describe()
        assert second.outputs(("gate",))["verdict"] == "allow"

    assert [(r.method, r.path) for r in api.writes()] == [
        ("POST", f"/repos/{REPO}/issues/{PR}/comments"),
        ("PATCH", f"/repos/{REPO}/issues/comments/{made['id']}"),
    ]
    assert all(r.headers.get("authorization") == "Bearer no-token-here" for r in api.requests)
    (now,) = api.comments[(REPO, PR)]
    text = str(now["body"])
    assert text.splitlines()[0] == body.splitlines()[0]  # the same gate's marker
    assert "## prune-gate: ALLOW" in text and "## prune-gate: BLOCK" not in text
    assert f"BLOCK at `{dropped[:12]}` → ALLOW at `{fixed[:12]}`" in text, text
    assert "Earlier runs (1)" in text
