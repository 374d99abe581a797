"""`gate heal`: the few safe ways out of a wedge, each only on evidence, each leaving an Event.

Nothing un-deletes an object with a deletionTimestamp, so healing means letting the deletion
finish without losing data:
- a claim whose data is disposable: delete the pods that pin it (gracefully, with their uid as
  precondition); the deployer recreates the claim, the pods' owners recreate the pods;
- a claim whose data must survive (`--rescue`): first set its volume's reclaim policy to Retain
  while the claim is still Terminating, then release it the same way; once the claim is gone,
  clear the volume's `claimRef` uid so the claim git recreates binds to the same volume;
- a pod stuck on a dead node: force-delete it, only when every piece of evidence holds
  (`gate.engine.doctor.force_delete_missing`).
Never: strip a finalizer, force-delete a pod with finalizers or on a Ready node, touch a volume
prune-gate did not retain. Pure: the plan is data; `gate.kube.heal` carries it out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gate.engine.doctor import (
    Diagnosis,
    Doctor,
    State,
    elapsed_text,
    force_delete_missing,
    node_line,
)
from gate.engine.ledger import (
    DATA_ANNOTATION,
    DISPOSABLE,
    HEAL_FIELD_MANAGER,
    RESCUED_CLAIM_UID,
    Claim,
    Pod,
    Volume,
)
from gate.engine.marks import DEFAULT_MARKS, MarkReader
from gate.engine.policy import duration_text
from gate.model.events import EventSpec
from gate.model.liveview import retain_command
from gate.model.refs import ObjectRef

#: Its reclaim policy before the rescue, to put back by hand once the data is safe.
RESCUED_POLICY = "prune-gate.io/rescued-reclaim-policy"


class ActionKind(StrEnum):
    DELETE_POD = "DeletePod"
    FORCE_DELETE_POD = "ForceDeletePod"
    RETAIN_VOLUME = "RetainVolume"
    RESERVE_VOLUME = "ReserveVolume"


class Reason(StrEnum):
    """The Event reasons heal records, one per kind of action."""

    POD_FORCE_DELETED = "PodForceDeleted"
    CLAIM_RELEASED = "ClaimReleased"
    VOLUME_RESCUED = "VolumeRescued"


@dataclass(frozen=True)
class Action:
    """One change to the cluster, with its preconditions and the Event that records it."""

    kind: ActionKind
    target: ObjectRef
    uid: str
    #: The stuck object this heals (the claim for a pod deleted to release it).
    heals: ObjectRef
    event: EventSpec
    #: What a person would type to do the same (without the preconditions).
    command: str
    resource_version: str = ""
    #: A JSON patch for volume actions: its `test` operations are preconditions.
    patch: tuple[dict[str, Any], ...] = ()
    #: Index in the plan of an action that must succeed first (a rescue's RetainVolume).
    requires: int | None = None
    #: The Event's message in the conditional: what a dry run, or the prompt of `--apply`,
    #: says it would record (the Event itself says what was done, in the past tense).
    would: str = ""


@dataclass(frozen=True)
class Skip:
    """A stuck object heal leaves alone, and why."""

    ref: ObjectRef
    state: State
    why: str


@dataclass(frozen=True)
class HealPlan:
    actions: tuple[Action, ...] = ()
    skipped: tuple[Skip, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What became of one action (`gate.kube.heal.carry_out`)."""

    action: Action
    #: done | would do (a dry run the API server accepted) | skipped | failed
    result: str
    detail: str = ""


@dataclass(frozen=True)
class HealOptions:
    rescue: bool = False
    #: Release claims whose data is disposable (`gate heal --watch`: `heal.watch` in the policy).
    release: bool = True
    #: Force-delete pods on dead nodes (the same).
    force: bool = True
    #: Why an action that is off is off: what to turn on.
    off_because: str = ""
    #: No person confirms the plan (`--watch`, `--apply --yes`): whoever deploys a claim writes
    #: its labels and annotations, a speculative deploy included, so a mark counts only where
    #: managedFields show a person's hand wrote it, and `heal.disposableClaims` by namespace and
    #: name (`gate.engine.marks`).
    unattended: bool = False
    #: The policy's marks: `heal.disposableClaims` and `heal.trustedManagers`.
    marks: MarkReader = DEFAULT_MARKS


def _escape(key: str) -> str:
    """A JSON-pointer segment (RFC 6901): `/` and `~` escaped."""
    return key.replace("~", "~0").replace("/", "~1")


def _add_annotations(current: dict[str, str], new: dict[str, str]) -> list[dict[str, Any]]:
    if not current:
        return [{"op": "add", "path": "/metadata/annotations", "value": new}]
    return [
        {"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
        for k, v in new.items()
    ]


class Healer:
    """Plans heal actions over the doctor's diagnoses."""

    def __init__(self, doctor: Doctor, options: HealOptions = HealOptions()) -> None:
        self.doctor = doctor
        self.ledger = doctor.ledger
        self.at = doctor.at
        self.options = options
        self._actions: list[Action] = []
        self._skipped: list[Skip] = []
        self._seen: set[ObjectRef] = set()

    def plan(
        self, roots: Iterable[Diagnosis], reserve: Callable[[str, str], bool] = lambda ns, n: True
    ) -> HealPlan:
        """Actions for every diagnosis under `roots`; with --rescue, also the reservation of
        each volume prune-gate retained whose claim is gone, for the claims (namespace, name)
        that `reserve` accepts."""
        for root in roots:
            for diag in root.walk():
                if diag.ref in self._seen:
                    continue
                self._seen.add(diag.ref)
                self._one(diag)
        if self.options.rescue:
            for volume in sorted(self.ledger.volumes.values(), key=lambda v: v.meta.ref.name):
                ref = volume.claim_ref
                if ref is not None and reserve(ref.namespace, ref.name):
                    self._reserve(volume)
        return HealPlan(tuple(self._actions), tuple(self._skipped))

    def _skip(self, diag: Diagnosis, why: str) -> None:
        self._skipped.append(Skip(diag.ref, diag.state, why))

    def _one(self, diag: Diagnosis) -> None:
        kind = (diag.ref.group, diag.ref.kind)
        if kind == ("", "PersistentVolumeClaim") and diag.state is State.WAITING_ON_PODS:
            self._release(self.ledger.claims[(diag.ref.namespace, diag.ref.name)], diag)
        elif kind == ("", "Pod") and diag.state is State.NODE_UNREACHABLE:
            self._force(self.ledger.pods[(diag.ref.namespace, diag.ref.name)], diag)
        elif diag.state is State.WAITING_ON_NAMESPACE_CONTENT:
            return  # its content is healed one by one
        else:
            self._skip(diag, _NO_ACTION.get(diag.state, "heal has no action for this state"))

    def _release(self, claim: Claim, diag: Diagnosis) -> None:
        volume = self.ledger.volume_of(claim)
        requires: int | None = None
        disposable = ""
        if self.options.rescue:
            if volume is None:
                self._skip(
                    diag,
                    "--rescue: no volume is bound to it, so there is no data to rescue; if that "
                    f"is right, mark it {DATA_ANNOTATION}={DISPOSABLE} to release it",
                )
                return
            if volume.reclaim_policy != "Retain":
                requires = len(self._actions)
                self._actions.append(self._retain(volume, claim))
        elif not self.options.release:
            self._skip(
                diag,
                "releasing claims is not enabled here"
                + (
                    f" ({self.options.off_because}.releaseDisposableClaims)"
                    if self.options.off_because
                    else ""
                ),
            )
            return
        else:
            disposable, doubt = self.options.marks.disposable(
                claim.meta, unattended=self.options.unattended
            )
            if not disposable:
                self._skip(diag, _not_disposable(doubt))
                return
        users = [p for p in self.ledger.claim_users(claim) if not p.meta.deleting]
        if not users:
            self._skip(
                diag,
                "every pod that pins it is Terminating already: see their own diagnoses "
                "(a pod on a dead node is force-deleted only on evidence)",
            )
            return
        why = (
            "its volume is Retain, so the data outlives it"
            if self.options.rescue
            else f"its data is disposable: {disposable}"
        )
        for pod in users:
            self._actions.append(self._delete_pod(pod, claim, why, requires))

    def _retain(self, volume: Volume, claim: Claim) -> Action:
        name = volume.meta.ref.name
        claim_ref = claim.meta.ref
        patch = (
            {"op": "test", "path": "/metadata/uid", "value": volume.meta.uid},
            {
                "op": "test",
                "path": "/spec/persistentVolumeReclaimPolicy",
                "value": volume.reclaim_policy,
            },
            {"op": "replace", "path": "/spec/persistentVolumeReclaimPolicy", "value": "Retain"},
            *_add_annotations(
                volume.meta.annotations,
                {RESCUED_CLAIM_UID: claim.meta.uid, RESCUED_POLICY: volume.reclaim_policy},
            ),
        )
        message = (
            f"prune-gate heal --rescue: reclaimPolicy {volume.reclaim_policy} -> Retain while "
            f"claim {claim_ref.namespace}/{claim_ref.name} (uid {claim.meta.uid}) is Terminating, "
            "so its data outlives the claim"
        )
        would = (
            f"prune-gate heal --rescue would set reclaimPolicy {volume.reclaim_policy} -> "
            f"Retain while claim {claim_ref.namespace}/{claim_ref.name} (uid {claim.meta.uid}) "
            "is Terminating, so that its data would outlive the claim"
        )
        return Action(
            kind=ActionKind.RETAIN_VOLUME,
            target=volume.meta.ref,
            uid=volume.meta.uid,
            heals=claim_ref,
            event=EventSpec(Reason.VOLUME_RESCUED, message, volume.meta.ref, "v1", volume.meta.uid),
            command=retain_command(name),
            resource_version=volume.meta.resource_version,
            patch=patch,
            would=would,
        )

    def _delete_pod(self, pod: Pod, claim: Claim, why: str, requires: int | None) -> Action:
        ref = pod.meta.ref
        owner = pod.meta.controller
        comes_back = (
            f"its {owner.kind} {owner.name} recreates it, Pending until the claim exists again"
            if owner
            else "it has no owner: it will not come back"
        )
        claim_ref = claim.meta.ref
        pinned = f"(uid {pod.meta.uid}, node {pod.node}, {pod.phase}) that pinned claim"
        message = (
            f"prune-gate heal deleted pod {ref.name} {pinned} {claim_ref.name}, {why}; {comes_back}"
        )
        would = (
            f"prune-gate heal would delete pod {ref.name} {pinned} {claim_ref.name}, {why}; "
            f"{comes_back}"
        )
        return Action(
            kind=ActionKind.DELETE_POD,
            target=ref,
            uid=pod.meta.uid,
            heals=claim_ref,
            event=EventSpec(Reason.CLAIM_RELEASED, message, claim_ref, "v1", claim.meta.uid),
            command=f"kubectl delete pod -n {ref.namespace} {ref.name}",
            resource_version="",
            requires=requires,
            would=would,
        )

    def _force(self, pod: Pod, diag: Diagnosis) -> None:
        if not self.options.force:
            self._skip(
                diag,
                "force-deleting pods on dead nodes is not enabled here"
                + (
                    f" ({self.options.off_because}.forceDeletePodsOnDeadNodes)"
                    if self.options.off_because
                    else ""
                ),
            )
            return
        node = self.ledger.nodes.get(pod.node)
        missing = force_delete_missing(pod, node, self.at, self.doctor.th)
        if missing:
            self._skip(
                diag, "not force-deleted, the evidence does not hold yet: " + "; ".join(missing)
            )
            return
        assert node is not None and pod.meta.deletion is not None
        ref = pod.meta.ref
        past = (self.at - pod.meta.deletion).total_seconds()
        th = self.doctor.th
        evidence = (
            f"(uid {pod.meta.uid}): its deadline passed {elapsed_text(past)} ago (slack "
            f"{duration_text(th.deadline_slack)}), it has no finalizers, and "
            f"{node_line(node, self.at)} (dead after {duration_text(th.node_dead_after)})"
        )
        message = f"prune-gate heal force-deleted pod {ref.name} {evidence}"
        would = f"prune-gate heal would force-delete pod {ref.name} {evidence}"
        force = f"kubectl delete pod -n {ref.namespace} {ref.name} --grace-period=0 --force"
        self._actions.append(
            Action(
                kind=ActionKind.FORCE_DELETE_POD,
                target=ref,
                uid=pod.meta.uid,
                heals=ref,
                event=EventSpec(Reason.POD_FORCE_DELETED, message, ref, "v1", pod.meta.uid),
                command=force,
                resource_version=pod.meta.resource_version,
                would=would,
            )
        )

    def _reserve(self, volume: Volume) -> None:
        ref = volume.claim_ref
        rescued = volume.meta.annotations.get(RESCUED_CLAIM_UID)
        if ref is None or not rescued or ref.uid != rescued or volume.phase != "Released":
            return  # not a volume heal retained, or not released yet, or reserved already
        if volume.rescue_marked_by != {HEAL_FIELD_MANAGER}:
            # Only a volume heal itself retained is ever reserved; the mark in a manifest (a
            # deployer's, a candidate's) would hand a released volume's data to a new claim.
            return
        claim = self.ledger.claims.get((ref.namespace, ref.name))
        if claim is not None and claim.meta.uid == ref.uid:
            return  # its claim is still there (Terminating): the next run reserves it
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": volume.meta.uid},
            {"op": "test", "path": "/spec/claimRef/uid", "value": ref.uid},
            {"op": "remove", "path": "/spec/claimRef/uid"},
        ]
        if ref.resource_version:
            patch.append({"op": "remove", "path": "/spec/claimRef/resourceVersion"})
        cls = volume.storage_class or '""'
        declare = f"volumeName: {volume.meta.ref.name}, storageClassName: {cls}"
        message = (
            f"prune-gate heal --rescue: claimRef uid {ref.uid} cleared, so this volume is "
            f"reserved for claim {ref.namespace}/{ref.name}: the claim git recreates binds to it "
            f"(it must declare {declare}, and ask no more than the volume holds)"
        )
        would = (
            f"prune-gate heal --rescue would clear claimRef uid {ref.uid}, so that this volume "
            f"would be reserved for claim {ref.namespace}/{ref.name}: the claim git recreates "
            f"would bind to it (it must declare {declare}, and ask no more than the volume holds)"
        )
        claim_ref = ObjectRef("", "PersistentVolumeClaim", ref.namespace, ref.name)
        self._actions.append(
            Action(
                kind=ActionKind.RESERVE_VOLUME,
                target=volume.meta.ref,
                uid=volume.meta.uid,
                heals=claim_ref,
                event=EventSpec(
                    Reason.VOLUME_RESCUED, message, volume.meta.ref, "v1", volume.meta.uid
                ),
                command=(
                    f"kubectl patch pv {volume.meta.ref.name} --type json -p "
                    '\'[{"op":"remove","path":"/spec/claimRef/uid"}]\''
                ),
                resource_version=volume.meta.resource_version,
                patch=tuple(patch),
                would=would,
            )
        )


def _not_disposable(doubt: str) -> str:
    """Why an unmarked claim, or one whose mark does not count here, is left alone."""
    if doubt:
        return (
            f"{doubt}; unattended heal takes a mark only from a person's hand (an Update by a "
            "manager in heal.trustedManagers, nobody else owning it) and heal.disposableClaims "
            "by namespace and name: whoever deploys a claim writes its labels and annotations, a "
            "speculative deploy included; name it in heal.disposableClaims by namespace and "
            "name, mark it yourself (kubectl label / kubectl annotate), or run gate heal --apply "
            "without --yes and confirm"
        )
    return (
        f"its data is not marked disposable ({DATA_ANNOTATION}={DISPOSABLE} on the claim, or "
        "heal.disposableClaims in the policy): use --rescue to keep its volume, then release it"
    )


_NO_ACTION: dict[State, str] = {
    State.WAITING_ON_CLAIM: "a volume goes once its claim is gone: heal the claim",
    State.WAITING_ON_FINALIZER: "prune-gate never strips another controller's finalizer",
    State.SHUTTING_DOWN: "its kubelet is stopping it: nothing to do",
    State.WAITING_ON_KUBELET: "its node is Ready: a Ready node is never treated as dead",
    State.NODE_GONE: "the pod garbage collector deletes pods of vanished nodes",
    State.CONTROLLER_GONE: "the controller that owns its finalizer must run again",
    State.UNKNOWN: "prune-gate does not act on a state it cannot name",
}
