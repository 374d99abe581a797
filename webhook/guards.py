"""The webhook's own guards: who may create, change or delete the speculation fence Lease.

A guard the deployer can switch off is no guard. So the fence Lease is itself decided here:
- a deployer identity may never CREATE, UPDATE or DELETE it (deployers have no business with the
  fence; clearing it would let the candidate's prunes through, and creating it held would wedge
  every deployer prune and CI's own `gate fence hold`);
- nobody records another user as its holder: a write that sets the annotation `HOLDER_USER` to
  a user sets it to the requester's own name, and a write that takes the fence (creates it held,
  or holds a fence that was free, expired or another holder's) records the requester. Whoever
  holds the fence can be asked, and only they may weaken it (below);
- nobody writes a fence that holds more than `MAX_HOLD_SECONDS` from now (a long duration, or a
  renewTime in the future): a fence says when it ends, soon, and is renewed;
- while it is held, only its holder (the Kubernetes user `gate fence hold` recorded in the
  annotation `HOLDER_USER`) may clear it, hand it to another holder, move `acquireTime` or
  `renewTime` back, shorten `leaseDurationSeconds`, rewrite the recorded user, or delete it.
  Renewals and releases by the holder pass; anyone may extend it (that only keeps guards on).
- a member of a break-glass group may do what the holder may (an operator removing a stale
  fence), allowed with an Event that says so; it too records only itself as a holder.
An expired or free fence may be taken by anyone but a deployer: an expired fence is never obeyed
forever. The chart creates the Lease unheld (no holder, no recorded user): that passes. A held
fence whose holder user was never recorded (written by hand, by an older gate, or while the
webhook was not called) has an unknown holder: nobody but break-glass may weaken it until it
expires.

Pure: the request, the policy and the fence as the cache last saw it are passed in, with the
instant it was evaluated at (the request's). Whether the Lease in `oldObject` is held is taken
from that fence status when it is the same holder, else assumed held: a holder the cache has not
seen yet must not be cleared on a guess.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gate.engine.fence import (
    HOLDER_USER,
    MAX_HOLD_SECONDS,
    FenceState,
    FenceStatus,
    Lease,
    fence_status,
    parse_lease,
)
from gate.engine.policy import Policy
from gate.engine.verdict import Verdict
from gate.model.events import MAX_EVENT_MESSAGE, EventSpec
from gate.model.findings import Code, Finding
from gate.model.refs import ObjectRef
from webhook.identity import break_glass_group, is_deployer
from webhook.outcome import MAX_WARNING, Outcome, allowed, refused
from webhook.review import AdmissionRequest

#: How far the writer's clock (CI's, which sets renewTime) may run ahead of the webhook's before
#: a fence of the longest duration is taken for one that holds too long.
CLOCK_SKEW_SECONDS = 300

#: Event reasons for the fence Lease (Warning type).
GUARD_TAMPERED_EVENT = "GuardTampered"
GUARD_OVERRIDDEN_EVENT = "GuardOverridden"


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """The answer for a request that touches a guard: refused (with why) or allowed with a note."""

    allowed: bool
    message: str
    namespace: str
    name: str
    uid: str
    #: Event reason to record on the Lease; empty when there is nothing to record.
    event_reason: str = ""


def is_fence_request(req: AdmissionRequest, policy: Policy) -> bool:
    """True for a CREATE, UPDATE or DELETE of the configured fence Lease."""
    fence = policy.webhook.fence
    return (
        fence is not None
        and req.operation in ("CREATE", "UPDATE", "DELETE")
        and (req.kind.group, req.kind.kind) == ("coordination.k8s.io", "Lease")
        and (req.namespace, _name(req)) == fence
    )


def _name(req: AdmissionRequest) -> str:
    """The Lease's name: the request's, else the object's (a collection DELETE has no name in
    the request; a CREATE from generateName has its generated name only in the object)."""
    if req.name:
        return req.name
    for obj in (req.old_object, req.new_object):
        meta = (obj or {}).get("metadata")
        if isinstance(meta, dict) and meta.get("name"):
            return str(meta["name"])
    return ""


def holder_user(obj: dict[str, Any] | None) -> str | None:
    """The Kubernetes user recorded as the fence's holder, if any."""
    meta = (obj or {}).get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(HOLDER_USER) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) and value else None


def _held(old: Lease, fence: FenceStatus) -> bool:
    if old.holder is None:
        return False
    if fence.lease is not None and fence.holder == old.holder:
        return fence.state is FenceState.HELD
    return True


def weakenings(
    old: Lease, new: Lease | None, old_user: str | None, new_user: str | None
) -> list[str]:
    """What a change does to a held fence that only its holder may do; empty when nothing."""
    if new is None:
        return ["deletes it"]
    out: list[str] = []
    if new.holder != old.holder:
        out.append(
            "clears its holderIdentity" if new.holder is None else f"hands it to {new.holder}"
        )
    if old.duration_seconds is not None and (
        new.duration_seconds is None or new.duration_seconds < old.duration_seconds
    ):
        out.append(
            f"shortens leaseDurationSeconds from {old.duration_seconds} to "
            f"{new.duration_seconds if new.duration_seconds is not None else 'nothing'}"
        )
    if old.renewed is not None and (new.renewed is None or new.renewed < old.renewed):
        out.append("moves renewTime/acquireTime back")
    if new_user != old_user:
        out.append(f"rewrites the recorded holder user {old_user or '(none)'} to {new_user}")
    return out


def recording_problem(
    req: AdmissionRequest, old: Lease, new: Lease, fence: FenceStatus, old_user: str | None
) -> str | None:
    """Why a CREATE or UPDATE may not write this Lease whoever asks (break-glass too); None
    when it may. It records another user as the holder, takes the fence without recording the
    requester, or holds it too long."""
    user = req.user.username
    new_obj = req.new_object
    new_user = holder_user(new_obj)
    if new_user is not None and new_user != old_user and new_user != user:
        return (
            f"records {new_user} as the fence's holder user ({HOLDER_USER}), but the request is "
            f"by {user or 'an unknown user'}: nobody records another user as the holder"
        )
    at = fence.at
    held = at is None or fence_status(new, at).state is FenceState.HELD
    if not held:
        return None  # free, released or already expired: it holds nothing back
    taken = req.operation == "CREATE" or new.holder != old.holder or not _held(old, fence)
    if taken and new_user != user:
        return (
            f"takes the fence for {new.holder} without recording its own user "
            f"{user or '(unknown)'} as the holder ({HOLDER_USER}: "
            f"{new_user or 'none'}): whoever holds the fence must be known, so that only "
            "they release it"
        )
    if at is None:
        return "holds the fence, and the webhook cannot tell the time to check until when"
    expires = fence_status(new, at).expires
    latest = at + dt.timedelta(seconds=MAX_HOLD_SECONDS + CLOCK_SKEW_SECONDS)
    if expires is not None and expires > latest:
        return (
            f"holds the fence until {expires.isoformat()}, more than {MAX_HOLD_SECONDS // 3600}h "
            "from now (leaseDurationSeconds, or a renewTime in the future): a fence must say it "
            "ends soon and be renewed while it is needed"
        )
    return None


def decide_guard(req: AdmissionRequest, policy: Policy, fence: FenceStatus) -> GuardDecision | None:
    """The decision for a request on the fence Lease; None when the request is not about it.
    `fence` is the fence as the cache saw it at the request's instant (`fence.at`)."""
    if not is_fence_request(req, policy):
        return None
    user = req.user.username or "an unknown user"
    old_obj = req.old_object or {}
    new_obj = req.new_object if req.operation in ("CREATE", "UPDATE") else None
    meta = (old_obj or new_obj or {}).get("metadata") or {}
    namespace, name = req.namespace, _name(req)
    uid = str(meta.get("uid") or "")
    where = f"Lease {namespace}/{name}"

    def refuse(why: str) -> GuardDecision:
        return GuardDecision(False, why, namespace, name, uid, GUARD_TAMPERED_EVENT)

    if is_deployer(req, policy):
        return refuse(
            f"{req.operation} of the speculation fence {where} by deployer {user} refused: a "
            "deployer may not create, change or remove the fence that guards its own prunes; "
            "fix: let CI hold and release it with `gate fence hold|release` (the chart creates "
            "the Lease)"
        )
    old = parse_lease(old_obj)
    old_user = holder_user(old_obj)
    new = parse_lease(new_obj) if new_obj is not None else None
    allowed = GuardDecision(True, "", namespace, name, uid)
    if req.operation != "CREATE" and _held(old, fence):
        decided = _decide_weakening(req, policy, old, new, allowed, refuse)
    else:
        decided = allowed  # a CREATE, or a fence that holds nothing back: nothing to weaken
    if not decided.allowed or new is None:
        return decided
    problem = recording_problem(req, old, new, fence, old_user)
    if problem is None:
        return decided
    return refuse(
        f"{req.operation} of the speculation fence {where} by {user} refused: it {problem}; "
        "fix: hold the fence with `gate fence hold --holder SHA` as the user that will release "
        "it: it records that user, holds for --duration (30m) and is run again to renew"
    )


def _decide_weakening(
    req: AdmissionRequest,
    policy: Policy,
    old: Lease,
    new: Lease | None,
    allowed: GuardDecision,
    refuse: Callable[[str], GuardDecision],
) -> GuardDecision:
    """A request on a held fence: its recorded holder may weaken it, break-glass may (with an
    Event), anyone may strengthen it; anyone else's weakening is refused."""
    user = req.user.username or "an unknown user"
    namespace, name = allowed.namespace, allowed.name
    where = f"Lease {namespace}/{name}"
    old_user = holder_user(req.old_object)
    new_user = holder_user(req.new_object if req.operation == "UPDATE" else None)
    if old_user is None and new_user == user and new is not None:
        new_user = None  # a renewal that records its user on a fence written before users were
    if user == old_user and new_user in (None, user):
        return allowed
    changes = weakenings(old, new, old_user, new_user)
    if not changes:
        return allowed
    holder = f"user {old_user}" if old_user else "a user that was not recorded"
    what = (
        f"{req.operation} of the speculation fence {where} by {user}: "
        f"{', '.join(changes)} while it is held by candidate {old.holder} ({holder})"
    )
    group = break_glass_group(req, policy)
    if group is not None:
        return GuardDecision(
            True,
            f"allowed by break-glass group {group}: {what}",
            namespace,
            name,
            allowed.uid,
            GUARD_OVERRIDDEN_EVENT,
        )
    return refuse(
        f"{what} refused: only the holder may release or weaken a held fence; fix: wait for "
        f"`gate fence release` or for it to expire (`gate fence status --lease {namespace}/"
        f"{name}`), or act as a member of a break-glass group"
        + (
            f" ({', '.join(policy.webhook.break_glass_groups)})"
            if policy.webhook.break_glass_groups
            else ""
        )
    )


def guard_outcome(req: AdmissionRequest, policy: Policy, fence: FenceStatus) -> Outcome | None:
    """`decide_guard` as the webhook's answer: a 403 with GUARD_TAMPERED, a warning, an Event.

    A refusal or a break-glass pass carries its GUARD_TAMPERED finding, so the app logs and
    counts it like any other decision.
    """
    d = decide_guard(req, policy, fence)
    if d is None:
        return None
    ref = ObjectRef("coordination.k8s.io", "Lease", d.namespace, d.name)
    events = (
        (EventSpec(d.event_reason, d.message[:MAX_EVENT_MESSAGE], ref, req.api_version, d.uid),)
        if d.event_reason
        else ()
    )
    findings = (
        (Finding(Code.GUARD_TAMPERED, ref, d.message, api_version=req.api_version),)
        if d.event_reason
        else ()
    )
    deployer = is_deployer(req, policy)
    if d.allowed:
        warnings = (d.message[:MAX_WARNING],) if d.message else ()
        response = allowed(req, warnings)
        override = d.message.partition(":")[0] if d.message else None
        return Outcome(response, Verdict.ALLOW, findings, override, events, deployer)
    message = f"prune-gate {Code.GUARD_TAMPERED}: {d.message}"
    response = refused(req, Code.GUARD_TAMPERED.value, message)
    return Outcome(response, Verdict.BLOCK, findings, None, events, deployer)
