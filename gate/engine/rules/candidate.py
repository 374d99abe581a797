"""Rules on what the candidate declares: objects it changes so that a controller deletes them,
claims it retires, objects it declares that are already being deleted, a force mark that does
nothing.

Pure, one small function each, over the whole `World` (`gate.engine.rules.registry`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from gate.engine.deployers import flux
from gate.engine.kustomizations import (
    force_disabled,
    forcing_kustomization,
    kustomization_forces,
)
from gate.engine.plan import Action, Change, flux_skips_apply
from gate.engine.rules.common import consumer_findings, finding
from gate.engine.rules.world import CLAIM, Retirement, World, retirement
from gate.engine.updates import change_findings
from gate.model.findings import Code, Finding, command, edit


def check_retiring_consumers(world: World) -> Iterator[Finding]:
    """CONSUMER_REMAINS for stage 1: a claim marked for retirement must lose its consumers."""
    key = world.policy.retire_annotation
    for m in world.head.of_kind(*CLAIM):
        if m.annotations.get(key):
            change = Change(m.ref, Action.UPDATE, world.base.get(m.ref), m, "retiring")
            yield from consumer_findings(change, world, f"is marked `{key}`")


def check_already_terminating(world: World) -> Iterator[Finding]:
    """ALREADY_TERMINATING: the candidate declares (or prunes) an object that is being deleted."""
    if world.live is None:
        return
    deleting = {c.ref: c for c in world.changes if c.deletes}
    terminating = {}
    pruned = (ref for ref in deleting if ref not in world.head)
    for ref in itertools.chain((m.ref for m in world.head), pruned):
        live = world.live.get(ref)
        if live is not None and live.deletion_timestamp:
            terminating[ref] = live
    for ref in sorted(terminating):  # the few being deleted, not every object, are sorted
        live = terminating[ref]
        head = world.head.get(ref)
        change = deleting.get(ref) or Change(
            ref, Action.UPDATE, world.base.get(ref), head, "declared by the candidate"
        )
        pending = ", ".join(live.finalizers) or "none"
        yield finding(
            Code.ALREADY_TERMINATING,
            change,
            f"{ref.display()} is already being deleted (deletionTimestamp "
            f"{live.deletion_timestamp}): a deploy that declares it waits on it and fails",
            [f"deletionTimestamp: {live.deletion_timestamp}", f"finalizers: {pending}"],
            f"see what holds it (kubectl get {ref.kubectl()} -o yaml: finalizers, and for a "
            "claim the pods that still mount it); let the deletion finish before deploying "
            "this object again",
            [
                command(f"kubectl get {ref.kubectl()} -o yaml"),
                edit("deploy the object again only once its deletion has finished"),
            ],
        )


def check_candidate_updates(world: World) -> Iterator[Finding]:
    """OWNER_REFERENCE_ADDED, RETENTION_DELETES_CLAIMS, OVERRIDE_IN_MANIFEST: an object in base
    and candidate that the candidate changes so that a controller deletes it (or that carries
    the override from a manifest), judged as the webhook judges the UPDATE (`gate.engine.updates`).

    The deploy applies no DELETE here, so no deletion rule sees it: the garbage collector or the
    StatefulSet controller deletes the claims later, on the strength of this change. An object
    the candidate adds is judged as the webhook judges its CREATE (an owner or the override it
    already carries).
    """
    for head in world.head:
        base = world.base.get(head.ref)
        if base is not None and (base.body is head.body or base.body == head.body):
            continue
        if base is not None and flux_skips_apply(base, head, world.head, world.live):
            continue  # Flux does not apply this change (reconcile: disabled, ssa policies)
        cause = "changed by the candidate" if base is not None else "created by the candidate"
        guarded = world.policy.is_guarded_kind(head.ref.group, head.ref.kind)
        # Stage 1 matters only to an owner added to a guarded object: read it only then.
        stage_1 = (
            retirement(Change(head.ref, Action.UPDATE, base, head, cause), world)
            if guarded
            else Retirement(None, "")
        )
        for f in change_findings(
            head.ref,
            base.body if base is not None else {},
            head.body,
            world.policy,
            cause,
            guarded=guarded,
            created=base is None,
            retired=stage_1.reason is not None,
            unretired=stage_1.evidence,
        ):
            yield replace(f, source=head.source or (base.source if base is not None else None))


def check_void_force_disabled(world: World) -> Iterator[Finding]:
    """FORCE_DISABLED_VOID: `force: disabled` on an object whose Kustomization forces.

    The annotation reads like a guard, and Flux ignores it under `spec.force: true` (fluxcd/pkg
    ssa): the next immutable change to the object deletes and recreates it. Said once per object
    in the candidate, whatever else changes, so it is fixed before it matters. A warning by
    default (`CODES`), like every severity applied by policy afterwards: the rule sets none."""
    kustomizations = world.head.of_kind(*flux.KUSTOMIZATION.gk)
    if not any(kustomization_forces(k) for k in kustomizations):
        return  # none forces: no object can be forced whatever it says (and most say nothing)
    for m in world.head:
        if not force_disabled(m):
            continue
        k = forcing_kustomization(m, world.head)
        if k is None:
            continue
        yield Finding(
            code=Code.FORCE_DISABLED_VOID,
            ref=m.ref,
            message=f"{m.ref.display()} carries {flux.FORCE}: disabled, which does nothing: "
            f"{k.ref.display()} has spec.force: true, so Flux still deletes and recreates it on an "
            "immutable change",
            evidence=(
                f"{k.ref.display()}: spec.force: true"
                + (f" ({k.source})" if k.source is not None else ""),
                f"{m.ref.display()}: {flux.FORCE}: disabled",
            ),
            remediation=f"turn force off on {k.ref.display()} (spec.force: false) and mark the "
            f"objects that need it with {flux.FORCE}: enabled, or move this object to a "
            "Kustomization without force",
            api_version=m.api_version,
            source=m.source,
            actions=(
                edit(f"set spec.force: false on {k.ref.display()}", k.source),
                edit(f"annotate only the objects that must be replaced with {flux.FORCE}: enabled"),
            ),
        )
