"""The cluster's ledger for `gate doctor` and `gate heal`: what is live, reduced to what a stuck
deletion waits on.

Why its own projection and not `LiveState`: the check asks "who would this deletion hurt", the
doctor asks "what is this deletion waiting on", and needs what the check drops: uids and
resourceVersions (every action is made with preconditions), deletion deadlines and grace periods,
owner references, a node's Ready condition with its transition time and taints, a volume's
`claimRef` and reclaim policy, a namespace's deletion conditions. Pure: the API lists come in as
parsed JSON (`gate.kube.snapshot.list_items`), timestamps are parsed here, the clock is the
caller's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gate.model.refs import ObjectRef
from gate.model.workloads import claim_names, ephemeral_volume_names, pod_uses_claim

#: The claim annotation that says its data may be lost: `gate heal` may then release it.
DATA_ANNOTATION = "prune-gate.io/data"
#: Its one value that says so.
DISPOSABLE = "disposable"
#: On a volume `gate heal --rescue` set to Retain: the uid of the claim it was rescued from.
RESCUED_CLAIM_UID = "prune-gate.io/rescued-claim-uid"
#: The field manager of heal's writes: a rescue mark is heal's only if managedFields say so.
HEAL_FIELD_MANAGER = "prune-gate-heal"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
#: The taint node lifecycle puts on a node whose Ready condition is Unknown (no heartbeats).
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


def parse_time(value: object) -> dt.datetime | None:
    """An RFC 3339 timestamp of the API (`2026-12-04T20:01:02Z`) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def mapping_of(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """`metadata`, `spec` or `status` of an API object; {} when absent or not a mapping."""
    part = obj.get(key)
    return part if isinstance(part, dict) else {}


@dataclass(frozen=True, slots=True)
class Owner:
    """One ownerReference."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False

    def display(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Writer:
    """One managedFields entry that owns a field: who wrote it, how and when, as the API
    server recorded it. `operation` is `Apply` (applied configuration: a manifest) or `Update`
    (any other write); `subresource` is set for a write through one (`status`)."""

    manager: str
    operation: str
    #: The entry's `time`: when this manager last changed any of its fields (so never earlier
    #: than its write of this one).
    written: dt.datetime | None
    subresource: str = ""

    def display(self) -> str:
        """`kustomize-controller (Apply, 2026-12-04T20:01:02Z)`."""
        op = self.operation or "no operation"
        sub = f" of {self.subresource}" if self.subresource else ""
        when = (
            self.written.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if self.written
            else "no time"
        )
        return f"{self.manager or '(no manager)'} ({op}{sub}, {when})"


#: A label or an annotation: (`labels` or `annotations`, key).
FieldKey = tuple[str, str]


def field_writers(obj: dict[str, Any]) -> dict[FieldKey, tuple[Writer, ...]]:
    """Who wrote each label and annotation of an object, by its managedFields: every entry
    whose `fieldsV1` owns `f:metadata.f:labels.f:KEY` (or `f:annotations`). An entry without
    fields owns nothing; a key no entry owns is absent (its writer cannot be told)."""
    out: dict[FieldKey, list[Writer]] = {}
    for entry in mapping_of(obj, "metadata").get("managedFields") or ():
        if not isinstance(entry, dict):
            continue
        meta = mapping_of(mapping_of(entry, "fieldsV1"), "f:metadata")
        writer: Writer | None = None
        for part in ("labels", "annotations"):
            for name in mapping_of(meta, f"f:{part}"):
                if not isinstance(name, str) or not name.startswith("f:"):
                    continue  # "." is the map itself, not one key
                if writer is None:
                    writer = Writer(
                        str(entry.get("manager") or ""),
                        str(entry.get("operation") or ""),
                        parse_time(entry.get("time")),
                        str(entry.get("subresource") or ""),
                    )
                out.setdefault((part, name[2:]), []).append(writer)
    return {key: tuple(writers) for key, writers in out.items()}


@dataclass(frozen=True, slots=True)
class Meta:
    """What every ledger entry keeps of `metadata`."""

    ref: ObjectRef
    api_version: str
    uid: str
    resource_version: str
    created: dt.datetime | None
    deletion: dt.datetime | None
    #: `deletionGracePeriodSeconds`: a pod's deletionTimestamp is its deadline, this much after
    #: the DELETE was asked for; other objects have 0 (or nothing).
    grace_seconds: int | None
    finalizers: tuple[str, ...]
    owners: tuple[Owner, ...]
    annotations: dict[str, str] = field(compare=False)
    labels: dict[str, str] = field(compare=False)
    #: Who wrote each label and annotation (`field_writers`); read for claims, volumes,
    #: namespaces and other guarded objects, not for pods (their marks mean nothing here).
    writers: dict[FieldKey, tuple[Writer, ...]] = field(compare=False, default_factory=dict)

    @property
    def deleting(self) -> bool:
        return self.deletion is not None

    @property
    def requested(self) -> dt.datetime | None:
        """When the deletion was asked for: the deletionTimestamp less the grace period."""
        if self.deletion is None:
            return None
        return self.deletion - dt.timedelta(seconds=self.grace_seconds or 0)

    @property
    def controller(self) -> Owner | None:
        return next((o for o in self.owners if o.controller), None)


def meta_of(
    obj: dict[str, Any], api_version: str, kind: str, group: str, *, writers: bool = True
) -> Meta:
    meta = mapping_of(obj, "metadata")
    owners = tuple(
        Owner(
            str(o.get("apiVersion", "")),
            str(o.get("kind", "")),
            str(o.get("name", "")),
            str(o.get("uid", "")),
            bool(o.get("controller")),
        )
        for o in meta.get("ownerReferences") or ()
        if isinstance(o, dict)
    )
    grace = meta.get("deletionGracePeriodSeconds")
    return Meta(
        ref=ObjectRef(group, kind, str(meta.get("namespace") or ""), str(meta.get("name", ""))),
        api_version=api_version,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        created=parse_time(meta.get("creationTimestamp")),
        deletion=parse_time(meta.get("deletionTimestamp")),
        grace_seconds=grace if isinstance(grace, int) else None,
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        owners=owners,
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        writers=field_writers(obj) if writers else {},
    )


@dataclass(frozen=True, slots=True)
class Pod:
    meta: Meta
    node: str
    phase: str
    started: dt.datetime | None
    claims: tuple[str, ...]
    #: Claim names of generic ephemeral volumes (`<pod>-<volume>`).
    ephemeral_claims: tuple[str, ...]

    @property
    def shut_down(self) -> bool:
        """The kubelet is done with it, or it was force-deleted (pvc-protection's podIsShutDown):
        a deletionTimestamp and a grace period of 0."""
        return self.meta.deleting and self.meta.grace_seconds == 0


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    added: dt.datetime | None

    def display(self) -> str:
        return f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    #: The Ready condition's status: True, False, Unknown, or "" when the node reports none.
    ready: str
    ready_reason: str
    ready_since: dt.datetime | None
    last_heartbeat: dt.datetime | None
    taints: tuple[Taint, ...]

    def tainted(self, key: str) -> Taint | None:
        return next((t for t in self.taints if t.key == key), None)


@dataclass(frozen=True, slots=True)
class Claim:
    meta: Meta
    phase: str
    volume_name: str
    storage_class: str | None


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class Volume:
    meta: Meta
    phase: str
    reclaim_policy: str
    storage_class: str
    claim_ref: ClaimRef | None
    #: `spec.capacity.storage` ("" when absent).
    capacity: str = ""
    #: Who wrote its rescue mark (RESCUED_CLAIM_UID), by managedFields.
    rescue_marked_by: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Namespace:
    meta: Meta
    phase: str
    #: `spec.finalizers` (`kubernetes`): the namespace controller's, not metadata's.
    spec_finalizers: tuple[str, ...]
    conditions: tuple[Condition, ...]


def _conditions(status: dict[str, Any]) -> tuple[Condition, ...]:
    return tuple(
        Condition(
            str(c.get("type", "")),
            str(c.get("status", "")),
            str(c.get("reason", "")),
            str(c.get("message", "")),
        )
        for c in status.get("conditions") or ()
        if isinstance(c, dict)
    )


def project_pod(obj: dict[str, Any]) -> Pod:
    meta = meta_of(obj, "v1", "Pod", "", writers=False)
    spec = mapping_of(obj, "spec")
    status = mapping_of(obj, "status")
    return Pod(
        meta=meta,
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Unknown"),
        started=parse_time(status.get("startTime")),
        claims=tuple(claim_names(spec)),
        ephemeral_claims=tuple(f"{meta.ref.name}-{v}" for v in ephemeral_volume_names(spec)),
    )


def project_node(obj: dict[str, Any]) -> Node:
    meta = mapping_of(obj, "metadata")
    status = mapping_of(obj, "status")
    ready = next(
        (
            c
            for c in status.get("conditions") or ()
            if isinstance(c, dict) and c.get("type") == "Ready"
        ),
        {},
    )
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("effect", "")), parse_time(t.get("timeAdded")))
        for t in mapping_of(obj, "spec").get("taints") or ()
        if isinstance(t, dict)
    )
    return Node(
        name=str(meta.get("name", "")),
        ready=str(ready.get("status") or ""),
        ready_reason=str(ready.get("reason") or ""),
        ready_since=parse_time(ready.get("lastTransitionTime")),
        last_heartbeat=parse_time(ready.get("lastHeartbeatTime")),
        taints=taints,
    )


def annotation_writers(obj: dict[str, Any], key: str) -> list[tuple[str, dt.datetime | None]]:
    """(manager, time) of every managedFields entry that owns annotation `key`. An entry's
    time moves with any of its fields, so it is never earlier than the annotation's write."""
    field = f"f:{key}"
    out = []
    for entry in mapping_of(obj, "metadata").get("managedFields") or ():
        if not isinstance(entry, dict):
            continue
        meta = mapping_of(mapping_of(entry, "fieldsV1"), "f:metadata")
        if field in mapping_of(meta, "f:annotations"):
            out.append((str(entry.get("manager", "")), parse_time(entry.get("time"))))
    return out


def project_claim(obj: dict[str, Any]) -> Claim:
    spec = mapping_of(obj, "spec")
    cls = spec.get("storageClassName")
    return Claim(
        meta=meta_of(obj, "v1", "PersistentVolumeClaim", ""),
        phase=str(mapping_of(obj, "status").get("phase") or "Pending"),
        volume_name=str(spec.get("volumeName") or ""),
        storage_class=cls if isinstance(cls, str) else None,
    )


def project_volume(obj: dict[str, Any]) -> Volume:
    spec = mapping_of(obj, "spec")
    ref = spec.get("claimRef")
    claim_ref = (
        ClaimRef(
            str(ref.get("namespace", "")),
            str(ref.get("name", "")),
            str(ref.get("uid", "")),
            str(ref.get("resourceVersion", "")),
        )
        if isinstance(ref, dict)
        else None
    )
    return Volume(
        meta=meta_of(obj, "v1", "PersistentVolume", ""),
        phase=str(mapping_of(obj, "status").get("phase") or ""),
        reclaim_policy=str(spec.get("persistentVolumeReclaimPolicy") or "Delete"),
        storage_class=str(spec.get("storageClassName") or ""),
        claim_ref=claim_ref,
        capacity=str(mapping_of(spec, "capacity").get("storage") or ""),
        rescue_marked_by=frozenset(m for m, _ in annotation_writers(obj, RESCUED_CLAIM_UID)),
    )


def project_namespace(obj: dict[str, Any]) -> Namespace:
    status = mapping_of(obj, "status")
    return Namespace(
        meta=meta_of(obj, "v1", "Namespace", ""),
        phase=str(status.get("phase") or ""),
        spec_finalizers=tuple(str(f) for f in mapping_of(obj, "spec").get("finalizers") or ()),
        conditions=_conditions(status),
    )


class Ledger:
    """The live objects doctor and heal read, with the indexes their questions need."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Pod] = {}
        self.nodes: dict[str, Node] = {}
        self.claims: dict[tuple[str, str], Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self.namespaces: dict[str, Namespace] = {}
        #: Other guarded objects (StatefulSets, CRDs, VolumeSnapshots, ...), by identity.
        self.others: dict[ObjectRef, Meta] = {}
        self._claim_users: dict[tuple[str, str], list[Pod]] = {}
        self._volume_of_claim: dict[tuple[str, str], Volume] = {}
        #: Kinds whose list was read: "no Node object" means gone only if nodes were listed.
        self.read: set[str] = set()

    def add_pod(self, pod: Pod) -> None:
        key = (pod.meta.ref.namespace, pod.meta.ref.name)
        self.pods[key] = pod
        for claim in (*pod.claims, *pod.ephemeral_claims):
            self._claim_users.setdefault((pod.meta.ref.namespace, claim), []).append(pod)

    def add_claim(self, claim: Claim) -> None:
        self.claims[(claim.meta.ref.namespace, claim.meta.ref.name)] = claim

    def add_volume(self, volume: Volume) -> None:
        self.volumes[volume.meta.ref.name] = volume
        if volume.claim_ref is not None:
            key = (volume.claim_ref.namespace, volume.claim_ref.name)
            self._volume_of_claim[key] = volume

    def add_node(self, node: Node) -> None:
        self.nodes[node.name] = node

    def add_namespace(self, ns: Namespace) -> None:
        self.namespaces[ns.meta.ref.name] = ns

    def add_other(self, meta: Meta) -> None:
        self.others[meta.ref] = meta

    def claim_users(self, claim: Claim) -> list[Pod]:
        """The pods pvc-protection counts as users of the claim (its `podUsesPVC`): scheduled
        (`spec.nodeName` set), in any phase, Terminating ones included; a generic ephemeral
        volume's pod only while it is not shut down and only if the claim is that pod's."""
        ns, name = claim.meta.ref.namespace, claim.meta.ref.name
        owner = claim.meta.controller
        users = [
            pod
            for pod in self._claim_users.get((ns, name), ())
            if pod_uses_claim(
                name,
                pod.node,
                pod.claims,
                pod.ephemeral_claims,
                pod.shut_down,
                owner is not None and owner.kind == "Pod" and owner.uid == pod.meta.uid,
            )
        ]
        return sorted(users, key=lambda p: p.meta.ref.name)

    def volume_of(self, claim: Claim) -> Volume | None:
        """The volume bound to the claim: its `spec.volumeName`, else the one whose claimRef
        names it with its uid."""
        if claim.volume_name:
            return self.volumes.get(claim.volume_name)
        volume = self._volume_of_claim.get((claim.meta.ref.namespace, claim.meta.ref.name))
        if volume and volume.claim_ref and volume.claim_ref.uid == claim.meta.uid:
            return volume
        return None

    def in_namespace(self, namespace: str) -> Iterator[Meta]:
        """Every object of the ledger in a namespace (pods, claims, other guarded objects)."""
        for (ns, _), pod in self.pods.items():
            if ns == namespace:
                yield pod.meta
        for (ns, _), claim in self.claims.items():
            if ns == namespace:
                yield claim.meta
        for ref, meta in self.others.items():
            if ref.namespace == namespace:
                yield meta


def build_ledger(
    pods: Iterable[dict[str, Any]] = (),
    claims: Iterable[dict[str, Any]] = (),
    volumes: Iterable[dict[str, Any]] = (),
    nodes: Iterable[dict[str, Any]] = (),
    namespaces: Iterable[dict[str, Any]] = (),
) -> Ledger:
    """A ledger from raw API objects (tests, and the reader in `gate.kube.ledger`)."""
    ledger = Ledger()
    for p in pods:
        ledger.add_pod(project_pod(p))
    for c in claims:
        ledger.add_claim(project_claim(c))
    for v in volumes:
        ledger.add_volume(project_volume(v))
    for n in nodes:
        ledger.add_node(project_node(n))
    for ns in namespaces:
        ledger.add_namespace(project_namespace(ns))
    ledger.read |= {"Pod", "PersistentVolumeClaim", "PersistentVolume", "Node", "Namespace"}
    return ledger
