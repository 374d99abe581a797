"""Retirement status: where each claim marked for retirement stands, and what it still waits on.

Retirement has two stages (see DESIGN.md): stage 1 marks the claim `prune-gate.io/retire` and
removes its consumers; stage 2 removes the manifest. Between the two, people ask "can I remove it
yet?" and the honest answer is live: a pod that still mounts the claim (any phase, until the Pod
object is gone) would pin the deletion behind pvc-protection, and a workload template would make
such a pod again. `gate retire status` answers from the same live view the check uses, so its
"safe now" and `gate check --live` never disagree. Like the check, stage 1 counts only when the
mark is on the merged branch too: given the base revision's manifests, a claim marked live but
not in base is `unmerged` (a speculative deploy may have applied the mark), and a claim marked in
base but not live is `not-marked` (merged, not deployed yet).

Pure: takes live projections and returns `RetireStatus` values and their renderings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gate.model.liveview import LiveObject, LiveView, PodUse, retain_command
from gate.model.objects import Inventory
from gate.model.refs import ObjectRef

CLAIM = ("", "PersistentVolumeClaim")


class Stage(StrEnum):
    """Where a claim stands in its retirement."""

    NOT_MARKED = "not-marked"  # stage 1 is not deployed: no retire annotation on the live claim
    UNMERGED = "unmerged"  # marked live, but the base branch does not carry the mark
    WAITING = "waiting"  # stage 1 deployed, consumers remain
    READY = "ready"  # stage 1 deployed, nothing uses it: stage 2 may remove the manifest
    TERMINATING = "terminating"  # already being deleted


@dataclass(frozen=True)
class RetireStatus:
    """One claim's retirement, with the evidence for it."""

    ref: ObjectRef
    reason: str | None
    stage: Stage
    pods: tuple[PodUse, ...] = ()
    workloads: tuple[ObjectRef, ...] = ()
    deletion_timestamp: str | None = None
    #: Data that goes with the claim: "PersistentVolume pv-1 has reclaimPolicy Delete ...".
    data_warning: str = ""

    @property
    def safe_to_remove(self) -> bool:
        """True when removing the manifest now neither wedges a deploy nor breaks a workload."""
        return self.stage is Stage.READY

    def waits_on(self) -> list[str]:
        """What stands between this claim and stage 2, one line each."""
        lines = [u.describe() + " mounts it" for u in self.pods]
        lines += [f"{w.display()} mounts it in its pod template" for w in self.workloads]
        return lines

    def next_step(self, annotation: str) -> str:
        """The one thing to do next."""
        ns, name = self.ref.namespace, self.ref.name
        if self.stage is Stage.NOT_MARKED:
            return (
                f'stage 1: merge a change that annotates the claim `{annotation}: "<reason>"` '
                "and removes it from its workloads, and let it deploy"
            )
        if self.stage is Stage.UNMERGED:
            return (
                f"stage 1 counts only from the merged branch: merge the change that annotates "
                f"the claim `{annotation}` and let it deploy (the live mark came from a revision "
                f"that is not merged, perhaps a speculative deploy); if the claim should stay, "
                f"remove the mark: kubectl annotate pvc -n {ns} {name} {annotation}-"
            )
        if self.stage is Stage.TERMINATING:
            return (
                f"it is already being deleted; see what holds it: kubectl get pvc -n {ns} {name} "
                "-o yaml (finalizers), and the pods listed above"
            )
        if self.stage is Stage.WAITING:
            steps = []
            if self.workloads:
                steps.append(
                    "remove the claim from "
                    + ", ".join(w.display() for w in self.workloads)
                    + " and deploy that"
                )
            if self.pods:
                finished = [p for p in self.pods if p.phase in ("Succeeded", "Failed")]
                if finished and len(finished) == len(self.pods) and not self.workloads:
                    names = " ".join(p.name for p in finished)
                    steps.append(f"delete the finished pods: kubectl delete pod -n {ns} {names}")
                else:
                    names = " ".join(p.name for p in self.pods)
                    steps.append(
                        "wait until the pods listed above are gone (once no workload template "
                        f"mounts the claim, stop them: kubectl delete pod -n {ns} {names})"
                    )
            return "; ".join(steps) + "; then run this again"
        return f"stage 2: remove the manifest of claim {ns}/{name}; it is safe now"

    def to_json(self, annotation: str) -> dict[str, Any]:
        """The JSON form (`gate retire status -o json`)."""
        return {
            "object": {
                "apiVersion": "v1",
                "kind": self.ref.kind,
                "namespace": self.ref.namespace,
                "name": self.ref.name,
            },
            "reason": self.reason,
            "stage": str(self.stage),
            "safeToRemove": self.safe_to_remove,
            "deletionTimestamp": self.deletion_timestamp,
            "pods": [
                {
                    "namespace": p.namespace,
                    "name": p.name,
                    "node": p.node,
                    "phase": p.phase,
                    "since": p.since,
                    "ephemeral": p.ephemeral,
                }
                for p in self.pods
            ],
            "workloads": [
                {"kind": w.kind, "namespace": w.namespace, "name": w.name} for w in self.workloads
            ],
            "dataWarning": self.data_warning or None,
            "next": self.next_step(annotation),
        }


def _mark(annotations: dict[str, str], key: str) -> str | None:
    value = annotations.get(key)
    return (value.strip() or None) if isinstance(value, str) else None


def claim_status(
    claim: LiveObject, live: LiveView, annotation: str, base: Inventory | None = None
) -> RetireStatus:
    """The retirement status of one live claim; with `base` (the merged branch's manifests),
    stage 1 counts only when base carries the mark too."""
    ref = claim.ref
    reason = _mark(claim.annotations, annotation)
    pods = tuple(live.claim_users(ref.namespace, ref.name))
    workloads = tuple(live.claim_consumers(ref.namespace, ref.name))
    declared = base.get(ref) if base is not None else None
    merged = base is None or (declared is not None and _mark(declared.annotations, annotation))
    if claim.deletion_timestamp:
        stage = Stage.TERMINATING
    elif reason is None:
        stage = Stage.NOT_MARKED
    elif not merged:
        stage = Stage.UNMERGED
    elif pods or workloads:
        stage = Stage.WAITING
    else:
        stage = Stage.READY
    warning = ""
    volume = live.bound_volume(ref.namespace, ref.name)
    if volume and volume.reclaim_policy == "Delete" and not live.ready_snapshots(*_nn(ref)):
        warning = (
            f"PersistentVolume {volume.name} has reclaimPolicy Delete and no ready VolumeSnapshot "
            f"of the claim exists: removing the claim destroys its data "
            f"({retain_command(volume.name)} to keep it)"
        )
    return RetireStatus(
        ref, reason, stage, pods, workloads, claim.deletion_timestamp, data_warning=warning
    )


def _nn(ref: ObjectRef) -> tuple[str, str]:
    return ref.namespace, ref.name


def retire_statuses(
    objects: Iterable[LiveObject],
    live: LiveView,
    annotation: str,
    namespace: str | None = None,
    name: str | None = None,
    base: Inventory | None = None,
) -> list[RetireStatus]:
    """Every live claim marked for retirement (or the one named, marked or not), sorted; with
    `base`, judged against the merged branch's marks too."""
    out = []
    for obj in objects:
        ref = obj.ref
        if (ref.group, ref.kind) != CLAIM:
            continue
        if namespace is not None and ref.namespace != namespace:
            continue
        if name is not None:
            if ref.name == name:
                out.append(claim_status(obj, live, annotation, base))
        elif _mark(obj.annotations, annotation):
            out.append(claim_status(obj, live, annotation, base))
    return sorted(out, key=lambda s: s.ref)


_HEADLINE = {
    Stage.NOT_MARKED: "not marked for retirement (stage 1 not deployed)",
    Stage.UNMERGED: "marked live but not on the base branch: a speculative deploy may have "
    "applied it, and stage 1 does not count",
    Stage.WAITING: "stage 1 deployed; waiting on {n} consumer(s)",
    Stage.READY: "ready for stage 2: nothing mounts or references it",
    Stage.TERMINATING: "already being deleted (deletionTimestamp {ts})",
}


def render_text(statuses: Iterable[RetireStatus], annotation: str) -> str:
    """One block per claim: stage, what it waits on, whether removing it is safe, what to do."""
    blocks = []
    for s in statuses:
        reason = f'  {annotation}: "{s.reason}"' if s.reason else ""
        lines = [f"claim {s.ref.namespace}/{s.ref.name}{reason}"]
        n = len(s.pods) + len(s.workloads)
        lines.append("  " + _HEADLINE[s.stage].format(n=n, ts=s.deletion_timestamp))
        lines += [f"    - {w}" for w in s.waits_on()]
        if s.data_warning:
            lines.append(f"  warning: {s.data_warning}")
        lines.append(
            f"  safe to remove from the manifests now: {'yes' if s.safe_to_remove else 'no'}"
        )
        lines.append(f"  next: {s.next_step(annotation)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_json(statuses: Iterable[RetireStatus], annotation: str) -> str:
    """`{"annotation": ..., "claims": [...]}`, stable key order."""
    claims = [s.to_json(annotation) for s in statuses]
    return json.dumps({"annotation": annotation, "claims": claims}, indent=2)
