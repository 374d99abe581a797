"""Context detection from the GitHub Actions environment, with real event payload files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.engine.context import Context
from gate.model.errors import InputError
from gate.sources.github import CIContext, detect_ci_context

BASE = "1111111111111111111111111111111111111111"
HEAD = "2222222222222222222222222222222222222222"
RUN_SHA = "3333333333333333333333333333333333333333"


def actions_env(tmp_path: Path, event: str, payload: dict[str, Any]) -> dict[str, str]:
    """The variables GitHub Actions sets for a workflow run, with the payload written to a file."""
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    return {
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": event,
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_SHA": RUN_SHA,
    }


def test_merge_group_is_speculative_with_the_queue_revisions(tmp_path: Path) -> None:
    env = actions_env(
        tmp_path,
        "merge_group",
        {
            "action": "checks_requested",
            "merge_group": {
                "head_sha": HEAD,
                "head_ref": "refs/heads/gh-readonly-queue/main/pr-7-" + BASE,
                "base_sha": BASE,
                "base_ref": "refs/heads/main",
            },
        },
    )
    assert detect_ci_context(env) == CIContext(Context.SPECULATIVE, BASE, HEAD, "merge_group")


@pytest.mark.parametrize("event", ["pull_request", "pull_request_target"])
def test_pull_request_is_preview(tmp_path: Path, event: str) -> None:
    env = actions_env(
        tmp_path,
        event,
        {
            "action": "synchronize",
            "number": 7,
            "pull_request": {"base": {"sha": BASE, "ref": "main"}, "head": {"sha": HEAD}},
        },
    )
    assert detect_ci_context(env) == CIContext(Context.PREVIEW, BASE, HEAD, event)


def test_pull_request_without_a_head_sha_uses_the_run_sha(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "pull_request", {"pull_request": {"base": {"sha": BASE}}})
    assert detect_ci_context(env) == CIContext(Context.PREVIEW, BASE, RUN_SHA, "pull_request")


def test_push_is_merged_with_before_and_after(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "push", {"ref": "refs/heads/main", "before": BASE, "after": HEAD})
    assert detect_ci_context(env) == CIContext(Context.MERGED, BASE, HEAD, "push")


def test_push_of_a_new_branch_has_no_base(tmp_path: Path) -> None:
    env = actions_env(
        tmp_path, "push", {"ref": "refs/heads/new", "before": "0" * 40, "after": HEAD}
    )
    assert detect_ci_context(env) == CIContext(Context.MERGED, None, HEAD, "push")


def test_push_without_after_uses_the_run_sha(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "push", {"before": BASE})
    assert detect_ci_context(env) == CIContext(Context.MERGED, BASE, RUN_SHA, "push")


def test_other_events_are_preview_at_the_run_sha(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "workflow_dispatch", {"inputs": {}})
    assert detect_ci_context(env) == CIContext(Context.PREVIEW, None, RUN_SHA, "workflow_dispatch")


def test_outside_ci_is_preview() -> None:
    assert detect_ci_context({}) == CIContext(Context.PREVIEW)
    assert detect_ci_context({"CI": "true"}) == CIContext(Context.PREVIEW)


def test_an_event_name_without_github_actions_is_ignored(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "merge_group", {"merge_group": {"base_sha": BASE}})
    del env["GITHUB_ACTIONS"]
    assert detect_ci_context(env) == CIContext(Context.PREVIEW)


def test_a_missing_payload_file_is_an_input_error(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "merge_group", {})
    env["GITHUB_EVENT_PATH"] = str(tmp_path / "missing.json")
    with pytest.raises(InputError, match="cannot read the GitHub event payload"):
        detect_ci_context(env)


def test_a_malformed_payload_is_an_input_error(tmp_path: Path) -> None:
    env = actions_env(tmp_path, "push", {})
    Path(env["GITHUB_EVENT_PATH"]).write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match=r"event\.json: cannot read the GitHub event payload"):
        detect_ci_context(env)


def test_no_payload_path_means_no_revisions() -> None:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "merge_group"}
    assert detect_ci_context(env) == CIContext(Context.SPECULATIVE, None, None, "merge_group")
