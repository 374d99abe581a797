"""`gate check` as a function: two sides in, a decision out. Shared by the CLI and the Action.

This is the seam between the pure engine and its edges: callers load manifests (files, git,
renderers) and an optional live view, and pass `today` so nothing here reads the clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gate.engine.argocd import explain_removals as explain_argo
from gate.engine.context import Context
from gate.engine.flux import explain_removals
from gate.engine.plan import Change, compute_plan
from gate.engine.policy import Policy
from gate.engine.rules import World, run_rules
from gate.engine.verdict import Decision, apply_policy, decide
from gate.model.findings import Finding, Severity
from gate.model.liveview import LiveView
from gate.model.objects import Inventory, RawObject, build_inventory, learn_scopes
from gate.model.refs import ObjectRef, Scopes


@dataclass(frozen=True)
class CheckResult:
    """The decision and what it was made on."""

    decision: Decision
    changes: tuple[Change, ...]
    base: Inventory
    head: Inventory
    #: The live view it was decided with (--live, the webhook's cache), for the prune plan.
    live: LiveView | None = None
    #: The policy it was decided under (which kinds are guarded), for the prune plan.
    policy: Policy | None = None


def check_objects(
    base_raw: Sequence[RawObject],
    head_raw: Sequence[RawObject],
    *,
    context: Context,
    policy: Policy,
    today: dt.date,
    default_namespace: str = "default",
    force: bool = False,
    live: LiveView | None = None,
    extra_changes: Sequence[Change] = (),
    extra_findings: Sequence[Finding] = (),
) -> CheckResult:
    """Compare base and candidate objects and decide (`extra_findings`: see
    `check_inventories`)."""
    base, head = build_sides(base_raw, head_raw, default_namespace)
    return check_inventories(
        base,
        head,
        context=context,
        policy=policy,
        today=today,
        force=force,
        live=live,
        extra_changes=extra_changes,
        extra_findings=extra_findings,
    )


def build_sides(
    base_raw: Sequence[RawObject], head_raw: Sequence[RawObject], default_namespace: str
) -> tuple[Inventory, Inventory]:
    """Identify the objects of both sides; CRDs on either side tell which kinds are cluster-wide."""
    scopes = Scopes()
    learn_scopes(scopes, base_raw, head_raw)
    base = build_inventory(base_raw, scopes, default_namespace)
    return base, build_inventory(head_raw, scopes, default_namespace, like=base)


def check_inventories(
    base: Inventory,
    head: Inventory,
    *,
    context: Context,
    policy: Policy,
    today: dt.date,
    force: bool = False,
    live: LiveView | None = None,
    extra_changes: Sequence[Change] = (),
    extra_findings: Sequence[Finding] = (),
) -> CheckResult:
    """Plan, run the rules, apply the policy, decide.

    `extra_findings` are about no manifest (a guard setting of the policy file the candidate
    changes): they take the policy's severities and exemptions like the rules' findings, with
    no labels, so no object a candidate declares can lend them its labels.
    """
    planned = compute_plan(base, head, force_all=force, live=live)
    changes = explain_argo(explain_removals(planned, base, head), base, head)
    known = {c.ref for c in changes}
    changes.extend(c for c in extra_changes if c.ref not in known)
    world = World(base=base, head=head, context=context, policy=policy, live=live)
    raw = list(run_rules(changes, world))
    labels = exemption_labels({f.ref for f in raw}, base, head, live)
    raw.extend(f for f in extra_findings)
    labels.update({f.ref: {} for f in extra_findings})
    findings, exempted = apply_policy(raw, policy, context, today, labels)
    steady = World(base, base, context, policy, live)
    findings, standing = split_standing(findings, steady, head)
    decision = decide(findings, exempted, standing)
    return CheckResult(decision, tuple(changes), base, head, live, policy)


def split_standing(
    findings: list[Finding], steady: World, head: Inventory
) -> tuple[list[Finding], list[Finding]]:
    """(what the change's verdict weighs, the standing warnings): a warning on an object the
    candidate leaves unchanged that the rules also make on base alone (`steady`: base on both
    sides, no change) with the same code, object and message stands whatever the candidate
    does (FORCE_DISABLED_VOID on objects that never
    change made every verdict "warn"). Only warnings: a block or a defer that stands still
    stops the deploy, since a deploy is what would do the damage it names. The second run of
    the rules happens only when there is a warning."""
    if not any(f.severity is Severity.WARN for f in findings):
        return findings, []
    before = {(f.code, f.ref, f.message) for f in run_rules([], steady)}
    weighed: list[Finding] = []
    standing: list[Finding] = []
    for f in findings:
        stands = (
            f.severity is Severity.WARN
            and (f.code, f.ref, f.message) in before
            and _unchanged(f.ref, steady.base, head)
        )
        (standing if stands else weighed).append(f)
    return weighed, standing


def _unchanged(ref: ObjectRef, base: Inventory, head: Inventory) -> bool:
    """The candidate leaves the object as base declares it (a warning on an object it edits is
    part of this change's story, even when base had it too)."""
    before, after = base.get(ref), head.get(ref)
    if before is None or after is None:
        return before is after
    return before.body == after.body


def exemption_labels(
    refs: Iterable[ObjectRef], base: Inventory, head: Inventory, live: LiveView | None
) -> dict[ObjectRef, dict[str, str]]:
    """The labels exemptions are matched against, for each of `refs` (the objects findings name):
    the live object's when there is a live view and the object is in it (what a prune deletes is
    the live object, and the webhook matches its live labels too; an object only live, pruned by
    `--prune-scope`, has no base), else the base's, else the candidate's. Only those objects: a
    check names a few of its thousands."""
    labels: dict[ObjectRef, dict[str, str]] = {}
    for ref in refs:
        obj = live.get(ref) if live is not None else None
        m = base.get(ref) or head.get(ref)
        if obj is not None:
            labels[ref] = obj.labels
        elif m is not None:
            labels[ref] = m.labels
    return labels
