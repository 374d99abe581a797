"""The UPDATEs that delete by proxy, as the webhook judges them.

The finders that compare an object before and after a change live in the core
(`gate.engine.updates`), so that `gate check` finds in a candidate exactly the changes the webhook
refuses in an UPDATE or a CREATE; this module adds the webhook's own part, the speculation fence (a
retire mark applied while a speculative deploy holds it). Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gate.engine.fence import FenceState, FenceStatus
from gate.engine.policy import Policy
from gate.engine.updates import annotation_added, change_findings
from gate.model.findings import Code, Finding, edit
from gate.model.refs import ObjectRef


def retire_under_fence(
    ref: ObjectRef,
    old: dict[str, Any],
    new: dict[str, Any],
    policy: Policy,
    fence: FenceStatus,
    cause: str,
) -> Iterator[Finding]:
    """SPECULATION_FENCE: the retire mark applied while a speculative deploy holds the fence.

    Stage 1 must come from the merged branch: a mark applied by a candidate that may be evicted
    would let the next deploy delete the object on the strength of a revision that never merged.
    """
    key = policy.retire_annotation
    if fence.state is not FenceState.HELD or fence.lease is None:
        return
    if not annotation_added(old, new, key):
        return
    lease = f"{fence.lease.namespace}/{fence.lease.name}"
    release = fence.lease.release_command()
    yield Finding(
        code=Code.SPECULATION_FENCE,
        ref=ref,
        message=f"{ref.display()} is marked `{key}` by a deployer while the speculation fence is "
        f"held by candidate {fence.holder}: stage 1 of a retirement counts only from the merged "
        "branch, not from a candidate that may be evicted",
        evidence=(fence.describe(), f"cause: {cause}"),
        remediation=f"let the merged deploy apply the mark (the deployer retries after Lease "
        f"{lease} is released or expires); if candidate {fence.holder} is gone, release the "
        f"fence: {release.text}",
        actions=(
            edit("nothing to change: the merged deploy applies the mark once the fence is free"),
            release,
        ),
        api_version=str(new.get("apiVersion") or ""),
    )


def update_findings(
    ref: ObjectRef,
    old: dict[str, Any],
    new: dict[str, Any],
    policy: Policy,
    fence: FenceStatus,
    cause: str,
    created: bool = False,
) -> list[Finding]:
    """Every finding of one UPDATE (or, `created`, a CREATE: `old` is empty): the changes both
    doors judge (`gate.engine.updates.change_findings`), and the retire mark under a held fence."""
    guarded = (ref.group, ref.kind) in policy.webhook.guarded_kinds
    found = change_findings(ref, old, new, policy, cause, guarded=guarded, created=created)
    if guarded:
        found.extend(retire_under_fence(ref, old, new, policy, fence, cause))
    return found
