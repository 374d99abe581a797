"""One DELETE (or UPDATE), decided by the rule engine of `gate check`: no second copy of any rule.

The request becomes a `Change` (action DELETE, the request's `oldObject` as its base) in a `World`
whose context is `admission`, whose inventories are empty and whose live view is the watch cache,
overlaid with the `oldObject` itself (the freshest truth of the object being deleted). The rules
that apply at admission run on it; `NOT_RETIRED` and the speculation fence only for requests by
the configured deployer identities, since a person deleting by hand is not a prune. Policy
(severity for the admission context, exemptions) and the verdict come from `gate.engine.verdict`; an
exemption that turns a refusal into an allow is never silent (a warning, a `PruneExempted` Event).

The garbage collector's and the StatefulSet controller's DELETEs are decided like a deployer's
(see `webhook.identity.is_cascade_controller`); a deployer's own DELETE does not honour the
allow-delete annotation. UPDATEs are judged by `webhook.updates` (object against oldObject): a
deployer's change that would make a controller delete a guarded object is refused, anyone else's
is allowed and logged. A request whose object has no name anywhere is refused
(UNIDENTIFIED_OBJECT), never allowed. Changes to the fence Lease are `webhook.guards`' to decide.

Pure, like the engine: the cache's state, the fence's status, today and now are passed in. The
result says what to answer, what to log, and which Events to record; the app does those.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from gate.engine.context import Context
from gate.engine.fence import FenceState, FenceStatus
from gate.engine.livestate import project_object
from gate.engine.plan import Action, Change
from gate.engine.policy import Policy
from gate.engine.rules import Door, World, change_rules
from gate.engine.verdict import Decision, Exempted, Verdict, apply_policy, decide
from gate.model.events import MAX_EVENT_MESSAGE, EventSpec
from gate.model.findings import Code, Finding, Severity, command
from gate.model.liveview import LiveObject, LiveView, PodUse, Volume
from gate.model.objects import Inventory, Manifest
from gate.model.refs import CLUSTER_SCOPED, ObjectRef
from webhook.guards import guard_outcome
from webhook.identity import (
    break_glass_group,
    cause,
    is_cascade_controller,
    is_deployer,
)
from webhook.outcome import (
    MAX_MESSAGE,
    MAX_WARNING,
    Outcome,
    allow_untouched,
    allowed,
    cut,
    refused,
)
from webhook.review import AdmissionRequest
from webhook.updates import update_findings

#: Rules that decide every guarded DELETE, whoever makes it (the registry's `admission` door).
ADMISSION_RULES = change_rules(Door.ADMISSION)
#: Rules that decide only DELETEs by a deployer identity (a prune, not a person): NOT_RETIRED and
#: the speculation fence (the registry's `deployer` door).
DEPLOYER_RULES = change_rules(Door.DEPLOYER)

#: Event reasons (Kubernetes Event `reason`), Warning type.
PRUNE_BLOCKED = "PruneBlocked"
PRUNE_OVERRIDDEN = "PruneOverridden"
#: A policy exemption turned what would have been a refusal into an allow.
PRUNE_EXEMPTED = "PruneExempted"
FENCE_EXPIRED = "FenceExpired"

#: Subresources whose UPDATEs change metadata as the object's own would (`webhook.register`
#: `metadata_subresources` registers them): judged as UPDATEs, never let through unread.
METADATA_SUBRESOURCES = frozenset({"status", "finalize"})


class _Overlay:
    """The cache's live view, with the object being deleted answered from `oldObject`."""

    def __init__(self, live: LiveView, obj: LiveObject | None) -> None:
        self._live = live
        self._obj = obj

    def get(self, ref: ObjectRef) -> LiveObject | None:
        if self._obj is not None and ref == self._obj.ref:
            return self._obj
        return self._live.get(ref)

    def claim_users(self, namespace: str, claim: str) -> list[PodUse]:
        return self._live.claim_users(namespace, claim)

    def claim_consumers(self, namespace: str, claim: str) -> list[ObjectRef]:
        return self._live.claim_consumers(namespace, claim)

    def guarded_in_namespace(self, namespace: str) -> list[ObjectRef]:
        return self._live.guarded_in_namespace(namespace)

    def custom_resource_count(self, group: str, kind: str) -> int | None:
        return self._live.custom_resource_count(group, kind)

    def bound_volume(self, namespace: str, claim: str) -> Volume | None:
        return self._live.bound_volume(namespace, claim)

    def ready_snapshots(self, namespace: str, claim: str) -> list[str]:
        return self._live.ready_snapshots(namespace, claim)

    def dependents(self, owner: ObjectRef) -> list[ObjectRef]:
        return self._live.dependents(owner)

    def owners(self, ref: ObjectRef) -> list[ObjectRef]:
        return self._live.owners(ref)

    def release_members(self, namespace: str, release: str) -> list[ObjectRef]:
        return self._live.release_members(namespace, release)

    def applied_by(self, parent: ObjectRef) -> list[ObjectRef] | None:
        return self._live.applied_by(parent)


def _metadata(req: AdmissionRequest) -> dict[str, Any]:
    """The metadata of the object the request is about: `oldObject` first for a DELETE (the
    object being deleted), `object` first for anything else."""
    first, second = (
        (req.old_object, req.new_object)
        if req.operation == "DELETE"
        else (req.new_object, req.old_object)
    )
    for obj in (first, second):
        meta = (obj or {}).get("metadata")
        if isinstance(meta, dict) and meta.get("name"):
            return meta
    return {}


def ref_of_request(req: AdmissionRequest) -> ObjectRef:
    """The identity of the object the request deletes or changes.

    `request.name`, or when it is empty the object's own metadata: a collection DELETE
    (`DELETE /api/v1/namespaces/NS/persistentvolumeclaims`) calls the webhook once per item with
    `request.name` empty and the item as `oldObject`. An empty `name` in the result means the
    object cannot be identified; `decide_admission` refuses such a request, never allows it.
    """
    group, kind = req.kind.group, req.kind.kind
    meta = _metadata(req)
    name = req.name or str(meta.get("name") or "")
    ns = (
        "" if (group, kind) in CLUSTER_SCOPED else req.namespace or str(meta.get("namespace") or "")
    )
    return ObjectRef(group, kind, ns, name)


def _warning(f: Finding) -> str:
    return cut(f"{f.code}: {f.message}", MAX_WARNING)


def how_to_override(ref: ObjectRef, policy: Policy) -> str:
    """The way past a refusal for a person who must delete anyway: the annotation, and the
    break-glass groups when there are any."""
    hint = (
        f"to delete anyway: kubectl annotate {ref.kubectl()} "
        f'{policy.allow_delete_annotation}="<reason>"'
    )
    groups = policy.webhook.break_glass_groups
    if groups:
        hint += f", or act as a member of a break-glass group ({', '.join(groups)})"
    return hint


def refusal_message(
    blocking: list[Finding], override: str = "", limit: int = MAX_MESSAGE, lead: str = ""
) -> str:
    """What a person reads in kubectl: the first reason, its evidence and its fix; then the rest;
    then how to override. At most `limit` characters: a long body is cut, never the override."""
    first = blocking[0]
    parts = [f"prune-gate {first.code}: {first.message}"]
    if first.evidence:
        parts.append("evidence: " + "; ".join(first.evidence[:5]))
    if first.remediation:
        parts.append(f"fix: {first.remediation}")
    for other in blocking[1:]:
        parts.append(f"also {other.code}: {other.message}")
    body = lead + ". ".join(p.rstrip(".") for p in parts)
    tail = f". {override}" if override else ""
    if limit - len(tail) < limit // 2:
        return cut(body + tail, limit)  # an absurd tail: keep the reason first
    return cut(body, limit - len(tail)) + tail


def decide_admission(
    req: AdmissionRequest,
    policy: Policy,
    live: LiveView,
    fence: FenceStatus,
    today: dt.date,
) -> Outcome:
    """Decide one AdmissionReview request: guarded DELETEs, the UPDATEs that would make a
    controller delete a guarded object, and changes to the fence Lease. Anything else is allowed
    untouched."""
    if (guarded := guard_outcome(req, policy, fence)) is not None:
        return guarded
    if req.sub_resource and not (
        req.operation == "UPDATE" and req.sub_resource in METADATA_SUBRESOURCES
    ):
        return allow_untouched(req)
    # A /status or a Namespace's /finalize UPDATE (registered for the guarded kinds) is judged
    # as the UPDATE it is: the API server keeps the spec, but labels, annotations and
    # ownerReferences change as they would.
    if req.operation == "UPDATE":
        return decide_update(req, policy, fence, today)
    if req.operation == "CREATE":
        return decide_create(req, policy, fence, today)
    if req.operation == "DELETE":
        return decide_delete(req, policy, live, fence, today)
    return allow_untouched(req)


def decide_delete(
    req: AdmissionRequest,
    policy: Policy,
    live: LiveView,
    fence: FenceStatus,
    today: dt.date,
) -> Outcome:
    """Decide a DELETE: the admission rules for everyone; for a deployer (or a cascade
    controller), the deployer rules and the speculation fence too. A refusal may be overridden
    by the allow-delete annotation (not on a deployer's own DELETE) or a break-glass group."""
    ref = ref_of_request(req)
    if (ref.group, ref.kind) not in policy.webhook.guarded_kinds:
        return allow_untouched(req)
    if not ref.name:
        return _unidentified(req, ref)
    body = req.old_object or {"metadata": {"name": ref.name, "namespace": ref.namespace}}
    own = project_object(ref, body) if req.old_object is not None else None
    deployer = is_deployer(req, policy)
    change = Change(ref, Action.DELETE, Manifest(ref, req.api_version, body), None, cause(req))
    world = World(
        base=Inventory(),
        head=Inventory(),
        context=Context.ADMISSION,
        policy=policy,
        live=_Overlay(live, own),
        fence=fence,
    )
    raw = _delete_findings(change, world, deployer or is_cascade_controller(req))
    labels = own.labels if own is not None else {}
    decision, blocking, warnings, exempted = _judge(raw, policy, today, ref, labels)
    events: list[EventSpec] = []
    if fence.state is FenceState.EXPIRED and any(
        f.code is Code.SPECULATION_FENCE for f in decision.findings
    ):
        events.append(_event(req, ref, FENCE_EXPIRED, f"not obeyed: {fence.describe()}"))
    if not blocking:
        return _let_through(req, ref, decision, warnings, exempted, events, deployer)
    # A deployer's own DELETE does not honour the annotation: a manifest could carry it.
    override = _override(req, policy, None if deployer else own)
    if override is None:
        hint = how_to_override(ref, policy)
        return _refused(req, ref, decision, blocking, warnings, hint, events, deployer)
    codes = ", ".join(dict.fromkeys(f.code.value for f in blocking))
    note = f"allowed by override ({override}) despite {codes}: {blocking[0].message}"
    events.append(_event(req, ref, PRUNE_OVERRIDDEN, f"{note}; requested by {req.user.username}"))
    return Outcome(
        allowed(req, (cut(f"prune-gate: {note}", MAX_WARNING), *warnings)),
        decision.verdict,
        decision.findings,
        override,
        tuple(events),
        deployer,
    )


def _delete_findings(change: Change, world: World, as_deployer: bool) -> list[Finding]:
    """The raw findings of a DELETE: the admission rules, and for a deployer's (or a cascade
    controller's) the deployer rules, the speculation fence among them (it reads `world.fence`)."""
    raw: list[Finding] = []
    for rule in ADMISSION_RULES + (DEPLOYER_RULES if as_deployer else ()):
        raw.extend(rule.check(change, world))
    return raw


def _event(req: AdmissionRequest, ref: ObjectRef, reason: str, message: str) -> EventSpec:
    return EventSpec(reason, message, ref, req.api_version, _uid(req))


def _judge(
    raw: list[Finding], policy: Policy, today: dt.date, ref: ObjectRef, labels: dict[str, str]
) -> tuple[Decision, list[Finding], tuple[str, ...], tuple[Exempted, ...]]:
    """Policy applied to the raw findings (admission severities, exemptions): the decision, the
    findings that refuse, the warnings to answer with, and the refusals an exemption silenced."""
    kept, exempted = apply_policy(raw, policy, Context.ADMISSION, today, {ref: labels})
    decision = decide(kept, exempted)
    blocking = [f for f in decision.findings if f.severity in _REFUSING]
    warnings = tuple(_warning(f) for f in decision.findings if f.severity is Severity.WARN)
    silenced = tuple(e for e in exempted if e.finding.severity in _REFUSING)
    return decision, blocking, warnings, silenced


#: Severities that refuse at admission.
_REFUSING = (Severity.BLOCK, Severity.DEFER)


def exemption_note(exempted: tuple[Exempted, ...]) -> str:
    """Why a request that would have been refused is allowed: the exemption, its expiry and the
    codes it silenced, with the first finding's message."""
    first = exempted[0]
    codes = ", ".join(dict.fromkeys(e.finding.code.value for e in exempted))
    return (
        f"allowed by policy exemption ({first.reason!r}, expires {first.expires.isoformat()}) "
        f"despite {codes}: {first.finding.message}"
    )


def _let_through(
    req: AdmissionRequest,
    ref: ObjectRef,
    decision: Decision,
    warnings: tuple[str, ...],
    exempted: tuple[Exempted, ...],
    events: list[EventSpec],
    deployer: bool,
) -> Outcome:
    """The allowed answer. When an exemption silenced a refusal, it is not silent: the answer
    warns, and a `PruneExempted` Event records who was let through and by which exemption."""
    if exempted:
        note = exemption_note(exempted)
        warnings = (cut(f"prune-gate: {note}", MAX_WARNING), *warnings)
        message = cut(f"{note}; requested by {req.user.username}", MAX_EVENT_MESSAGE)
        events = [*events, EventSpec(PRUNE_EXEMPTED, message, ref, req.api_version, _uid(req))]
    return Outcome(
        allowed(req, warnings),
        decision.verdict,
        decision.findings,
        None,
        tuple(events),
        deployer,
        exempted,
    )


def _refused(
    req: AdmissionRequest,
    ref: ObjectRef,
    decision: Decision,
    blocking: list[Finding],
    warnings: tuple[str, ...],
    hint: str,
    events: list[EventSpec],
    deployer: bool,
) -> Outcome:
    """The 403 answer, with its `PruneBlocked` Event after any `events` already due."""
    lead = f"{req.operation} by {req.user.username} refused: "
    blocked = EventSpec(
        PRUNE_BLOCKED,
        refusal_message(blocking, hint, MAX_EVENT_MESSAGE, lead),
        ref,
        req.api_version,
        _uid(req),
    )
    message = refusal_message(blocking, hint)
    return Outcome(
        refused(req, blocking[0].code.value, message, warnings),
        decision.verdict,
        decision.findings,
        None,
        (*events, blocked),
        deployer,
    )


def _uid(req: AdmissionRequest) -> str:
    return str(_metadata(req).get("uid") or "")


def _unidentified(req: AdmissionRequest, ref: ObjectRef) -> Outcome:
    """Refuse a request whose object has no name anywhere: deciding blind would allow it."""
    where = f" in namespace {ref.namespace}" if ref.namespace else ""
    one_by_one = command(
        f"kubectl delete {ref.kind.lower()} NAME{' -n ' + ref.namespace if ref.namespace else ''}"
    )
    finding = Finding(
        code=Code.UNIDENTIFIED_OBJECT,
        ref=ref,
        message=f"the {ref.kind} this {req.operation} by {req.user.username or 'an unknown user'}"
        f"{where} is about cannot be identified: request.name is empty and the object in the "
        "review has no metadata.name",
        evidence=(
            f"oldObject {'present' if req.old_object is not None else 'absent'}, "
            f"object {'present' if req.new_object is not None else 'absent'}",
        ),
        remediation=f"delete the objects one at a time by name ({one_by_one.text}), so that "
        "each deletion is decided on its own",
        actions=(one_by_one,),
        api_version=req.api_version,
    )
    response = refused(req, Code.UNIDENTIFIED_OBJECT.value, refusal_message([finding]))
    return Outcome(response, Verdict.BLOCK, (finding,))


def decide_update(
    req: AdmissionRequest, policy: Policy, fence: FenceStatus, today: dt.date
) -> Outcome:
    """Decide an UPDATE: a deployer's change that would make a controller delete a guarded object
    (or satisfy the rules one call early) is refused; anyone else's is allowed and logged (the
    StatefulSet controller's own ownerReference updates among them: see `is_cascade_controller`).
    No override: the allow-delete annotation is about deletions, and it is itself judged here."""
    ref = ref_of_request(req)
    deployer = is_deployer(req, policy)
    if req.old_object is None or req.new_object is None or not ref.name:
        judged = (ref.group, ref.kind) in policy.webhook.guarded_kinds | {("apps", "StatefulSet")}
        if judged and deployer:
            return _unidentified(req, ref)
        return allow_untouched(req)
    raw = update_findings(ref, req.old_object, req.new_object, policy, fence, cause(req))
    return _judge_change(req, ref, raw, deployer, policy, today)


def decide_create(
    req: AdmissionRequest, policy: Policy, fence: FenceStatus, today: dt.date
) -> Outcome:
    """Decide a CREATE of a guarded kind: a deployer may not create an object already carrying
    what an UPDATE may not add (an ownerReference, the allow-delete override, a retire mark while
    the fence is held). Else the two calls split: a claim created with the override and an owner
    is deleted by the garbage collector, whose DELETE honours the override, once the deployer
    deletes the owner. StatefulSets are not judged at CREATE: a new one's claims are new, and
    claims it adopts are deleted only by a garbage-collector DELETE, which is decided."""
    ref = ref_of_request(req)
    new = req.new_object
    if (ref.group, ref.kind) not in policy.webhook.guarded_kinds or new is None:
        return allow_untouched(req)
    if not ref.name:  # generateName: the API server names it after admission
        prefix = str(((new.get("metadata") or {}).get("generateName")) or "")
        ref = replace(ref, name=f"{prefix}<generated>")
    raw = update_findings(ref, {}, new, policy, fence, cause(req), created=True)
    return _judge_change(req, ref, raw, is_deployer(req, policy), policy, today)


def _judge_change(
    req: AdmissionRequest,
    ref: ObjectRef,
    raw: list[Finding],
    deployer: bool,
    policy: Policy,
    today: dt.date,
) -> Outcome:
    """A deployer's CREATE or UPDATE with findings is refused (no override: the allow-delete
    annotation is about deletions, and is itself judged); anyone else's is allowed, findings
    kept as warnings for the log."""
    if not deployer:
        noted = tuple(replace(f, severity=Severity.WARN) for f in raw)
        return Outcome(allowed(req), Verdict.ALLOW, noted)
    labels = (_metadata(req).get("labels") or {}) if raw else {}
    decision, blocking, warnings, exempted = _judge(raw, policy, today, ref, labels)
    if not blocking:
        return _let_through(req, ref, decision, warnings, exempted, [], True)
    return _refused(req, ref, decision, blocking, warnings, "", [], True)


def _override(req: AdmissionRequest, policy: Policy, own: LiveObject | None) -> str | None:
    """Why a refusal is overridden: the allow-delete annotation, or a break-glass group."""
    key = policy.allow_delete_annotation
    reason = own.annotations.get(key) if own is not None else None
    if isinstance(reason, str) and reason.strip():
        return f'{key}: "{reason}"'
    group = break_glass_group(req, policy)
    if group is not None:
        return f"{req.user.username} is in break-glass group {group}"
    return None
