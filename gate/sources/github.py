"""The deploy context as GitHub Actions tells it: the event's name and its payload file.

merge_group is speculative, push is merged, a pull request (or anything else) is a preview. A
pull request is judged on what it changes: from the merge base of its base and head to its head.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.engine.context import Context
from gate.model.errors import InputError

#: The events of a pull request, whose base is the branch it merges into.
PULL_REQUEST_EVENTS = frozenset({"pull_request", "pull_request_target"})


@dataclass(frozen=True)
class CIContext:
    """What the CI environment says: the context, and base/head revisions if the event has them."""

    context: Context
    base: str | None = None
    head: str | None = None
    event: str | None = None

    @property
    def from_merge_base(self) -> bool:
        """True when the comparison starts from the merge base of `base` and `head`, not from
        `base` itself: a pull request is judged on its own changes, and its base branch may have
        moved on since it forked."""
        return self.event in PULL_REQUEST_EVENTS


def detect_ci_context(env: Mapping[str, str]) -> CIContext:
    """Read GITHUB_EVENT_NAME and the event payload; outside GitHub Actions it is `preview`.

    merge_group -> speculative (merge_group.base_sha / head_sha); pull_request -> preview
    (pull_request.base.sha / head.sha, compared from their merge base); push -> merged
    (before / after).
    """
    event = env.get("GITHUB_EVENT_NAME")
    if not event or env.get("GITHUB_ACTIONS") != "true":
        return CIContext(Context.PREVIEW)
    payload = _read_event(env.get("GITHUB_EVENT_PATH"))
    if event == "merge_group":
        mg = payload.get("merge_group") or {}
        return CIContext(Context.SPECULATIVE, mg.get("base_sha"), mg.get("head_sha"), event)
    if event in PULL_REQUEST_EVENTS:
        pr = payload.get("pull_request") or {}
        base = (pr.get("base") or {}).get("sha")
        head = (pr.get("head") or {}).get("sha") or env.get("GITHUB_SHA")
        return CIContext(Context.PREVIEW, base, head, event)
    if event == "push":
        before = payload.get("before")
        if isinstance(before, str) and set(before) == {"0"}:
            before = None  # a new branch has no "before"
        return CIContext(
            Context.MERGED, before, payload.get("after") or env.get("GITHUB_SHA"), event
        )
    return CIContext(Context.PREVIEW, None, env.get("GITHUB_SHA"), event)


def _read_event(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import json  # in GitHub Actions only

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the GitHub event payload: {exc}", path) from None
    return data if isinstance(data, dict) else {}
