"""`gate doctor`: what each stuck deletion is waiting on, with its evidence and the one safe fix.

"Stuck" tells an operator nothing; every object with a deletionTimestamp is waiting on something
specific, and this module names it from a closed vocabulary (`State`). A state it cannot name is
`Unknown`, reported loudly, never dropped. Pure: the ledger, the clock and what git declares are
passed in. The rules it follows are pvc-protection's, pv-protection's, the namespace controller's
and node lifecycle's (see KUBERNETES-FACTS.md); heal (`gate.engine.heal`) acts on these answers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from gate.engine.deployers import finalizer_owner as deployer_finalizer
from gate.engine.ledger import (
    DATA_ANNOTATION,
    DISPOSABLE,
    NOT_READY_TAINT,
    OUT_OF_SERVICE_TAINT,
    PV_PROTECTION,
    PVC_PROTECTION,
    UNREACHABLE_TAINT,
    Claim,
    Ledger,
    Meta,
    Namespace,
    Node,
    Pod,
    Volume,
)
from gate.engine.marks import DEFAULT_MARKS, Mark, MarkReader
from gate.engine.policy import duration_text
from gate.model.refs import ObjectRef


class State(StrEnum):
    """What a deletion waits on. Closed: a new case is a new member, documented in MEANING."""

    WAITING_ON_PODS = "WaitingOnPods"
    WAITING_ON_CLAIM = "WaitingOnClaim"
    WAITING_ON_NAMESPACE_CONTENT = "WaitingOnNamespaceContent"
    WAITING_ON_FINALIZER = "WaitingOnFinalizer"
    SHUTTING_DOWN = "ShuttingDown"
    WAITING_ON_KUBELET = "WaitingOnKubelet"
    NODE_UNREACHABLE = "NodeUnreachable"
    NODE_GONE = "NodeGone"
    CONTROLLER_GONE = "ControllerGone"
    UNKNOWN = "Unknown"


MEANING: dict[State, str] = {
    State.WAITING_ON_PODS: "a claim kept by pvc-protection while pods use it",
    State.WAITING_ON_CLAIM: "a volume kept by pv-protection while it is Bound to a claim",
    State.WAITING_ON_NAMESPACE_CONTENT: "a namespace waiting for its content to be deleted",
    State.WAITING_ON_FINALIZER: "an object waiting on a finalizer of another controller",
    State.SHUTTING_DOWN: "a pod within its grace period on a Ready node: its kubelet stops it",
    State.WAITING_ON_KUBELET: "a pod past its deadline on a Ready node: the kubelet has not "
    "confirmed",
    State.NODE_UNREACHABLE: "a pod on a node whose Ready condition is not True: nothing will "
    "confirm its shutdown",
    State.NODE_GONE: "a pod bound to a node that no longer exists",
    State.CONTROLLER_GONE: "the finalizer's owner should have acted on the evidence and has not",
    State.UNKNOWN: "prune-gate cannot tell what this deletion waits on (please report it)",
}


@dataclass(frozen=True)
class Thresholds:
    """Durations (seconds) that separate waiting from stuck; validated by the caller."""

    #: Report deletions asked for at least this long ago (`--older-than`).
    older_than: float = 120.0
    #: A pod is past its deadline only this long after its deletionTimestamp.
    deadline_slack: float = 60.0
    #: A node is dead only after its Ready condition has not been True for this long.
    node_dead_after: float = 300.0


#: Who owns a finalizer, and when it lets go.
_FINALIZER_OWNERS: dict[str, str] = {
    PVC_PROTECTION: "kube-controller-manager (pvc-protection): removed once no pod uses the claim",
    PV_PROTECTION: "kube-controller-manager (pv-protection): removed once the volume is not Bound",
    "kubernetes": "kube-controller-manager (namespace): removed once the namespace is empty",
    "foregroundDeletion": "the garbage collector: removed once every dependent that blocks "
    "owner deletion is gone",
    "orphan": "the garbage collector: removed once the dependents are orphaned",
    "customresourcecleanup.apiextensions.k8s.io": "kube-apiserver (apiextensions): removed once "
    "every custom resource of the CRD is deleted",
    "kubernetes.io/pv-controller": "kube-controller-manager (persistentvolume): removed once the "
    "volume's storage is deleted",
    "external-provisioner.volume.kubernetes.io/finalizer": "the CSI external-provisioner: removed "
    "once the backing volume is deleted",
    "batch.kubernetes.io/job-tracking": "the Job controller: removed once it has counted the pod",
}
#: (The deployers' finalizers are theirs to name: `gate.engine.deployers.finalizer_owner`.)
_FINALIZER_PREFIXES: tuple[tuple[str, str], ...] = (
    ("external-attacher/", "the CSI external-attacher: removed once the volume is detached"),
    (
        "snapshot.storage.kubernetes.io/",
        "the snapshot controller: removed once the snapshot's content is handled",
    ),
)


def finalizer_owner(name: str) -> str:
    """Who removes a finalizer, and when; an unknown one names the domain that owns it."""
    if name in _FINALIZER_OWNERS:
        return _FINALIZER_OWNERS[name]
    deployer = deployer_finalizer(name)
    if deployer is not None:
        return deployer
    for prefix, owner in _FINALIZER_PREFIXES:
        if name.startswith(prefix):
            return owner
    domain = name.split("/", 1)[0]
    return f"not one prune-gate knows: the controller behind {domain!r} removes it"


@dataclass(frozen=True)
class Finalizer:
    name: str
    owner: str


@dataclass(frozen=True)
class PodEvidence:
    """A pod that pins a claim, as the operator needs to see it."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    since: dt.datetime | None
    terminating: bool
    owner: str
    node_ready: str

    def describe(self, now: dt.datetime) -> str:
        since = f" since {stamp(self.since)} ({_age(now, self.since)})" if self.since else ""
        term = ", itself Terminating" if self.terminating else ""
        owner = f", owned by {self.owner}" if self.owner else ", no owner"
        ready = f" (Ready={self.node_ready or 'not reported'})" if self.node else ""
        return (
            f"pod {self.namespace}/{self.name} on node {self.node}{ready}: "
            f"{self.phase}{since}{term}{owner}"
        )


@dataclass(frozen=True)
class Diagnosis:
    """One stuck object: its state, why, the evidence, the fixes, and what it waits on."""

    ref: ObjectRef
    uid: str
    state: State
    reason: str
    requested: dt.datetime | None
    finalizers: tuple[Finalizer, ...] = ()
    evidence: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    pods: tuple[PodEvidence, ...] = ()
    #: Where git still declares it (`path:line`), when desired manifests were given.
    declared: str | None = None
    #: What it waits on that is stuck too: a namespace's claims, a claim's Terminating pods.
    children: tuple[Diagnosis, ...] = field(default_factory=tuple)
    api_version: str = "v1"
    #: The marks it carries (disposable, the labels heal.disposableClaims reads, retire), each
    #: with who wrote it by managedFields: whose word heal would act on.
    marks: tuple[Mark, ...] = ()

    def walk(self) -> Iterable[Diagnosis]:
        yield self
        for child in self.children:
            yield from child.walk()


def stamp(t: dt.datetime | None) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else "unknown"


def elapsed_text(seconds: float) -> str:
    """How long, in whole seconds, as durations are written: `3725.4` -> `1h2m5s`."""
    return duration_text(float(max(0, int(seconds))))


def _age(now: dt.datetime, since: dt.datetime | None) -> str:
    return elapsed_text((now - since).total_seconds()) if since else "unknown"


def _finalizers(meta: Meta) -> tuple[Finalizer, ...]:
    return tuple(Finalizer(f, finalizer_owner(f)) for f in meta.finalizers)


Declared = Callable[[ObjectRef], str | None]


def _never_declared(_ref: ObjectRef) -> str | None:
    return None


class Doctor:
    """Diagnoses over one ledger at one instant."""

    def __init__(
        self,
        ledger: Ledger,
        now: dt.datetime,
        thresholds: Thresholds = Thresholds(),
        declared: Declared = _never_declared,
        marks: MarkReader = DEFAULT_MARKS,
    ) -> None:
        self.ledger = ledger
        self.at = now
        self.th = thresholds
        self.declared = declared
        self.marks = marks

    # --- which objects -------------------------------------------------------------------------

    def stuck(self, namespace: str | None = None) -> list[Diagnosis]:
        """Every deletion asked for at least `older_than` ago (in `namespace`, or everywhere),
        each once: what another one waits on is shown under it, not again on its own."""
        candidates: list[Meta] = []
        for ns in self.ledger.namespaces.values():
            if namespace is None or ns.meta.ref.name == namespace:
                candidates.append(ns.meta)
        for volume in self.ledger.volumes.values():
            ref = volume.claim_ref
            if namespace is None or (ref is not None and ref.namespace == namespace):
                candidates.append(volume.meta)
        for claim in self.ledger.claims.values():
            candidates.append(claim.meta)
        for pod in self.ledger.pods.values():
            candidates.append(pod.meta)
        candidates.extend(self.ledger.others.values())
        roots = [
            self.diagnose(m)
            for m in candidates
            if self._old_enough(m)
            and (namespace is None or not m.ref.namespace or m.ref.namespace == namespace)
        ]
        return sorted(_once(roots), key=lambda d: (d.ref.namespace, d.ref.kind, d.ref.name))

    def _old_enough(self, meta: Meta) -> bool:
        requested = meta.requested
        if requested is None:
            return False
        return (self.at - requested).total_seconds() >= self.th.older_than

    def diagnose(self, meta: Meta) -> Diagnosis:
        """The diagnosis of one object that is being deleted."""
        kind = (meta.ref.group, meta.ref.kind)
        if kind == ("", "PersistentVolumeClaim"):
            return self._claim(self.ledger.claims[(meta.ref.namespace, meta.ref.name)])
        if kind == ("", "PersistentVolume"):
            return self._volume(self.ledger.volumes[meta.ref.name])
        if kind == ("", "Pod"):
            return self._pod(self.ledger.pods[(meta.ref.namespace, meta.ref.name)])
        if kind == ("", "Namespace"):
            return self._namespace(self.ledger.namespaces[meta.ref.name])
        return self._other(meta)

    # --- the kinds -----------------------------------------------------------------------------

    def _base(self, meta: Meta, state: State, reason: str, **kw: object) -> Diagnosis:
        return Diagnosis(
            ref=meta.ref,
            uid=meta.uid,
            state=state,
            reason=reason,
            requested=meta.requested,
            finalizers=_finalizers(meta),
            declared=self.declared(meta.ref),
            api_version=meta.api_version,
            marks=self.marks.marks(meta),
            **kw,  # type: ignore[arg-type]
        )

    def _claim(self, claim: Claim) -> Diagnosis:
        meta = claim.meta
        ref = meta.ref
        sel = f"-n {ref.namespace} pvc/{ref.name}"
        volume = self.ledger.volume_of(claim)
        evidence: list[str] = []
        fixes: list[str] = []
        if volume is not None:
            evidence.append(_volume_line(volume))
        declared = self.declared(ref)
        if declared:
            evidence.append(
                f"git still declares it ({declared}): once the deletion completes the deployer "
                "recreates it, with a new, empty volume unless the old one is rescued"
            )
        disposable = meta.annotations.get(DATA_ANNOTATION) == DISPOSABLE
        others = [f for f in meta.finalizers if f != PVC_PROTECTION]
        if PVC_PROTECTION in meta.finalizers:
            users = self.ledger.claim_users(claim)
            if users:
                pods = tuple(self._pod_evidence(p) for p in users)
                children = tuple(self._pod(p) for p in users if p.meta.deleting)
                evidence[:0] = [
                    f"{PVC_PROTECTION} keeps it until no pod uses it; {len(users)} pod(s) do:",
                    *(f"  {p.describe(self.at)}" for p in pods),
                ]
                if volume is not None and volume.reclaim_policy != "Retain":
                    fixes.append(
                        f"keep the data: gate heal --rescue --apply {sel} (sets PersistentVolume "
                        f"{volume.meta.ref.name} to Retain, then deletes the pods that pin it)"
                    )
                elif volume is not None:
                    fixes.append(
                        f"the volume is Retain already; to rebind it to the recreated claim: "
                        f"gate heal --rescue --apply {sel}"
                    )
                if disposable:
                    fixes.append(
                        f"its data is marked {DATA_ANNOTATION}={DISPOSABLE} (who wrote it: see "
                        f"marks): gate heal --apply {sel} deletes the pods that pin it"
                    )
                else:
                    fixes.append(
                        f"if its data may go: kubectl annotate {sel} {DATA_ANNOTATION}={DISPOSABLE}"
                        f", then gate heal --apply {sel}"
                    )
                if children:
                    fixes.append("a pinning pod is Terminating itself: see its own diagnosis below")
                names = ", ".join(f"{p.name} on node {p.node}" for p in pods)
                return self._base(
                    meta,
                    State.WAITING_ON_PODS,
                    f"waiting on {len(users)} pod(s) that still use it: {names}",
                    evidence=tuple(evidence),
                    fixes=tuple(fixes),
                    pods=pods,
                    children=children,
                )
            if not others:
                return self._base(
                    meta,
                    State.CONTROLLER_GONE,
                    f"no pod uses it, yet {PVC_PROTECTION} is still on it after "
                    f"{_age(self.at, meta.requested)}",
                    evidence=(
                        *evidence,
                        "pvc-protection removes its finalizer within seconds of the last pod "
                        "going: kube-controller-manager is not running, or not its "
                        "pvc-protection controller",
                    ),
                    fixes=(
                        "check kube-controller-manager: kubectl -n kube-system get pods "
                        "-l component=kube-controller-manager, and its log for pvc-protection",
                    ),
                )
        if others:
            return self._waiting_on_finalizers(meta, others, evidence)
        return self._unknown(meta, "it has no finalizer left, yet it still exists")

    def _pod_evidence(self, pod: Pod) -> PodEvidence:
        owner = pod.meta.controller or (pod.meta.owners[0] if pod.meta.owners else None)
        node = self.ledger.nodes.get(pod.node)
        return PodEvidence(
            namespace=pod.meta.ref.namespace,
            name=pod.meta.ref.name,
            uid=pod.meta.uid,
            node=pod.node,
            phase=pod.phase,
            since=pod.started or pod.meta.created,
            terminating=pod.meta.deleting,
            owner=owner.display() if owner else "",
            node_ready=node.ready if node else "node not found",
        )

    def _volume(self, volume: Volume) -> Diagnosis:
        meta = volume.meta
        others = [f for f in meta.finalizers if f != PV_PROTECTION]
        evidence = [_volume_line(volume)]
        if PV_PROTECTION in meta.finalizers:
            ref = volume.claim_ref
            if volume.phase == "Bound" and ref is not None:
                claim = self.ledger.claims.get((ref.namespace, ref.name))
                children: tuple[Diagnosis, ...] = ()
                if claim is None:
                    state_line = "the claim is gone: the volume controller will release it"
                elif claim.meta.uid != ref.uid and ref.uid:
                    state_line = "a claim of that name exists with another uid"
                elif claim.meta.deleting:
                    state_line = "the claim is being deleted too"
                    children = (self._claim(claim),)
                else:
                    state_line = "the claim is live and not being deleted"
                fixes = (
                    (
                        f"delete the claim first, or keep the volume: kubectl delete pvc -n "
                        f"{ref.namespace} {ref.name}"
                    )
                    if claim is not None and not claim.meta.deleting
                    else "see the claim's diagnosis: the volume goes once the claim is gone",
                )
                return self._base(
                    meta,
                    State.WAITING_ON_CLAIM,
                    f"{PV_PROTECTION} keeps it while it is Bound to claim "
                    f"{ref.namespace}/{ref.name}; {state_line}",
                    evidence=tuple(evidence),
                    fixes=fixes,
                    children=children,
                )
            if not others:
                return self._base(
                    meta,
                    State.CONTROLLER_GONE,
                    f"it is {volume.phase or 'in no phase'}, not Bound, yet {PV_PROTECTION} is "
                    f"still on it after {_age(self.at, meta.requested)}",
                    evidence=tuple(evidence),
                    fixes=(
                        "check kube-controller-manager: kubectl -n kube-system get pods "
                        "-l component=kube-controller-manager, and its log for pv-protection",
                    ),
                )
        if others:
            return self._waiting_on_finalizers(meta, others, evidence)
        return self._unknown(meta, "it has no finalizer left, yet it still exists")

    def pod_state(self, pod: Pod) -> tuple[State, str, list[str]]:
        """A deleting pod's state, a one-line reason and its evidence."""
        meta = pod.meta
        deadline = meta.deletion
        assert deadline is not None
        past = (self.at - deadline).total_seconds()
        when = (
            f"its deadline {stamp(deadline)} passed {elapsed_text(past)} ago"
            if past >= 0
            else f"its deadline is {stamp(deadline)}, in {elapsed_text(-past)}"
        )
        evidence = [when]
        if not pod.node:
            return State.UNKNOWN, "it was never scheduled, yet it is still there", evidence
        node = self.ledger.nodes.get(pod.node)
        if node is None:
            if "Node" not in self.ledger.read:
                return State.UNKNOWN, f"its node {pod.node} was not read", evidence
            evidence.append(f"no Node {pod.node} exists")
            return (
                State.NODE_GONE,
                f"it is bound to node {pod.node}, which no longer exists",
                evidence,
            )
        evidence.append(node_line(node, self.at))
        if meta.finalizers:
            evidence.append("finalizers: " + ", ".join(meta.finalizers))
        if pod.shut_down:  # the kubelet confirmed, or a force delete: only finalizers remain
            if meta.finalizers:
                return (
                    State.WAITING_ON_FINALIZER,
                    "it is shut down (grace period 0); its finalizers keep it: "
                    + ", ".join(meta.finalizers),
                    evidence,
                )
            return State.UNKNOWN, "it is shut down and has no finalizer, yet it exists", evidence
        if node.ready == "True":
            if past < self.th.deadline_slack:
                return (
                    State.SHUTTING_DOWN,
                    f"the kubelet on node {pod.node} (Ready) is stopping it; {when}",
                    evidence,
                )
            return (
                State.WAITING_ON_KUBELET,
                f"node {pod.node} is Ready, yet its kubelet has not confirmed the shutdown; {when}",
                evidence,
            )
        return (
            State.NODE_UNREACHABLE,
            f"node {pod.node} is Ready={node.ready or 'not reported'}"
            f"{' (' + node.ready_reason + ')' if node.ready_reason else ''} since "
            f"{stamp(node.ready_since)}: nothing will confirm the shutdown; {when}",
            evidence,
        )

    def _pod(self, pod: Pod) -> Diagnosis:
        meta = pod.meta
        ref = meta.ref
        if not meta.deleting:
            raise ValueError(f"{ref.display()} is not being deleted")
        state, reason, evidence = self.pod_state(pod)
        sel = f"-n {ref.namespace} pod/{ref.name}"
        fixes: list[str] = []
        if meta.finalizers and state is not State.UNKNOWN:
            fixes.append(
                "it has finalizers, which survive even a force delete: their controllers must "
                "remove them ("
                + "; ".join(f"{f}: {finalizer_owner(f)}" for f in meta.finalizers)
                + "); prune-gate never strips them"
            )
        if state is State.NODE_UNREACHABLE:
            missing = force_delete_missing(pod, self.ledger.nodes.get(pod.node), self.at, self.th)
            if missing:
                evidence.append("not yet safe to force-delete: " + "; ".join(missing))
                fixes.append(
                    f"gate heal --apply {sel} force-deletes it once every piece of evidence holds"
                )
            else:
                evidence.append(
                    "safe to force-delete: past its deadline, no finalizers, node dead with the "
                    f"{UNREACHABLE_TAINT} taint"
                )
                fixes.append(f"gate heal --apply {sel} (force-deletes it)")
            fixes.append(
                f"if node {pod.node} is known to be shut down: kubectl taint node {pod.node} "
                f"{OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute (Kubernetes then deletes its pods "
                "and detaches their volumes)"
            )
        elif state is State.WAITING_ON_KUBELET:
            fixes.append(
                f"look at the kubelet on node {pod.node} (journalctl -u kubelet | grep {ref.name});"
                " a Ready node is never treated as dead, so heal will not force-delete it"
            )
        elif state is State.NODE_GONE:
            fixes.append(
                "the pod garbage collector deletes pods of vanished nodes; if it has not: "
                f"kubectl delete {sel} --grace-period=0 --force"
            )
        elif state is State.SHUTTING_DOWN:
            fixes.append("nothing: wait for the kubelet")
        if state is State.UNKNOWN:
            return self._unknown(meta, reason)
        return self._base(meta, state, reason, evidence=tuple(evidence), fixes=tuple(fixes))

    def _namespace(self, ns: Namespace) -> Diagnosis:
        meta = ns.meta
        name = meta.ref.name
        children = tuple(
            self.diagnose(m)
            for m in sorted(self.ledger.in_namespace(name), key=lambda m: (m.ref.kind, m.ref.name))
            if m.deleting
        )
        children = tuple(_once(children))
        evidence = [
            f"{c.type}: {c.message or c.reason}"
            for c in ns.conditions
            if c.status == "True" and c.type.startswith("Namespace")
        ]
        live = [
            c.meta.ref.name
            for (cns, _), c in self.ledger.claims.items()
            if cns == name and not c.meta.deleting
        ]
        if live:
            evidence.append(
                "claims not being deleted yet (the namespace controller deletes pods first, "
                "then the rest; a refused DELETE shows as NamespaceDeletionContentFailure): "
                + ", ".join(live)
            )
        content = [c for c in ns.conditions if c.status == "True" and c.type in _CONTENT]
        if children or content or live:
            parts = [f"{c.ref.kind} {c.ref.name} ({c.state.value}: {c.reason})" for c in children]
            what = "; ".join(parts) if parts else "content its conditions name"
            return self._base(
                meta,
                State.WAITING_ON_NAMESPACE_CONTENT,
                f"waiting on its content: {what}",
                evidence=tuple(evidence),
                fixes=("fix what each object below waits on; the namespace goes when it is empty",),
                children=children,
            )
        if "kubernetes" in ns.spec_finalizers:
            return self._base(
                meta,
                State.CONTROLLER_GONE,
                f"it is empty of what prune-gate reads, yet the namespace controller has not "
                f"finished after {_age(self.at, meta.requested)}",
                evidence=(*evidence, "spec.finalizers: kubernetes"),
                fixes=(
                    f"list what is left: kubectl api-resources --verbs=list --namespaced -o name "
                    f"| xargs -n1 kubectl get -n {name} --ignore-not-found; then check "
                    "kube-controller-manager's namespace controller",
                ),
            )
        if meta.finalizers:
            return self._waiting_on_finalizers(meta, list(meta.finalizers), evidence)
        return self._unknown(meta, "no content, no finalizer, yet it still exists")

    def _other(self, meta: Meta) -> Diagnosis:
        if meta.finalizers:
            return self._waiting_on_finalizers(meta, list(meta.finalizers), [])
        return self._unknown(meta, "it has no finalizer left, yet it still exists")

    def _waiting_on_finalizers(
        self, meta: Meta, finalizers: list[str], evidence: list[str]
    ) -> Diagnosis:
        lines = [f"{f}: {finalizer_owner(f)}" for f in finalizers]
        if "foregroundDeletion" in finalizers:
            dependents = [
                p.meta.ref.display()
                for p in self.ledger.pods.values()
                if any(o.uid == meta.uid for o in p.meta.owners)
            ]
            if dependents:
                lines.append("dependents still present: " + ", ".join(dependents))
        return self._base(
            meta,
            State.WAITING_ON_FINALIZER,
            "waiting on finalizer(s) " + ", ".join(finalizers),
            evidence=(*evidence, *lines),
            fixes=(
                "let the finalizer's controller finish (is it running? its log says why it "
                "waits); prune-gate never strips another controller's finalizer, and doing it by "
                "hand skips the cleanup it guards",
            ),
        )

    def _unknown(self, meta: Meta, why: str) -> Diagnosis:
        return self._base(
            meta,
            State.UNKNOWN,
            f"prune-gate cannot tell what this deletion waits on: {why}",
            evidence=tuple(f"finalizers: {f}" for f in meta.finalizers),
            fixes=(
                f"inspect it: kubectl get {meta.ref.kubectl()} -o yaml; please report the case "
                "to prune-gate so it gets a state",
            ),
        )


def _once(diagnoses: Iterable[Diagnosis]) -> list[Diagnosis]:
    """Each object once: one that another diagnosis waits on (under it, or named as a pod that
    pins its claim) is shown there, not again on its own."""
    diagnoses = list(diagnoses)
    covered = {d.ref for r in diagnoses for d in list(r.walk())[1:]}
    covered |= {
        ObjectRef("", "Pod", p.namespace, p.name)
        for r in diagnoses
        for d in r.walk()
        for p in d.pods
    }
    return [d for d in diagnoses if d.ref not in covered]


_CONTENT = frozenset(
    {
        "NamespaceContentRemaining",
        "NamespaceFinalizersRemaining",
        "NamespaceDeletionContentFailure",
        "NamespaceDeletionDiscoveryFailure",
    }
)


def _volume_line(volume: Volume) -> str:
    name = volume.meta.ref.name
    policy = volume.reclaim_policy
    if policy == "Retain":
        fate = "the volume and its data are kept (Released) when the claim goes"
    else:
        fate = f"when the claim goes, reclaimPolicy {policy} deletes the volume and its data"
    return f"bound to PersistentVolume {name} ({volume.phase}, reclaimPolicy {policy}): {fate}"


def node_line(node: Node, now: dt.datetime) -> str:
    """`node n1: Ready=Unknown (NodeStatusUnknown) since ... (5m); taints ...`."""
    since = (
        f" since {stamp(node.ready_since)} ({_age(now, node.ready_since)})"
        if node.ready_since
        else ""
    )
    reason = f" ({node.ready_reason})" if node.ready_reason else ""
    taints = ", ".join(t.display() for t in node.taints) or "none"
    beat = f"; last heartbeat {stamp(node.last_heartbeat)}" if node.last_heartbeat else ""
    ready = node.ready or "not reported"
    return f"node {node.name}: Ready={ready}{reason}{since}{beat}; taints: {taints}"


def node_dead_missing(node: Node | None, now: dt.datetime, dead_after: float) -> list[str]:
    """What keeps a node from counting as dead; empty when it is dead: Ready not True for at
    least `dead_after` seconds and the unreachable taint on it. A Ready node is never dead,
    whatever its taints."""
    if node is None:
        return ["its node does not exist (the pod garbage collector's case, not heal's)"]
    if node.ready == "True":
        return [f"node {node.name} is Ready"]
    missing = []
    if node.ready_since is None:
        missing.append(f"node {node.name} reports no time for its Ready condition")
    else:
        down = (now - node.ready_since).total_seconds()
        if down < dead_after:
            missing.append(
                f"node {node.name} has been Ready={node.ready or 'unreported'} for "
                f"{elapsed_text(down)} of the {duration_text(dead_after)} required"
            )
    if node.tainted(UNREACHABLE_TAINT) is None:
        have = (
            " (it has not-ready: the kubelet reports, so the node is alive)"
            if node.tainted(NOT_READY_TAINT)
            else ""
        )
        missing.append(f"node {node.name} has no {UNREACHABLE_TAINT} taint{have}")
    return missing


def force_delete_missing(
    pod: Pod, node: Node | None, now: dt.datetime, th: Thresholds
) -> list[str]:
    """What is missing before a Terminating pod may be force-deleted; empty when all holds:
    past its deadline plus the slack, no finalizers, and its node dead (`node_dead_missing`)."""
    missing = []
    deadline = pod.meta.deletion
    if deadline is None:
        return ["it is not being deleted"]
    past = (now - deadline).total_seconds()
    if past < th.deadline_slack:
        missing.append(
            f"it is {elapsed_text(past) if past >= 0 else '-' + elapsed_text(-past)} past its "
            f"deadline of the {duration_text(th.deadline_slack)} slack required"
        )
    if pod.meta.finalizers:
        missing.append("it has finalizers (" + ", ".join(pod.meta.finalizers) + ")")
    missing.extend(node_dead_missing(node, now, th.node_dead_after))
    return missing
