"""An in-memory index of live objects, built from raw API JSON: the `LiveView` both doors share.

`gate check --live` fills it from one paginated list per kind; the webhook's watch cache applies
every watch event to it. Objects are reduced to small projections on the way in (a pod keeps its
node, phase, claim names and deletion state, not its spec), so 10,000 pods cost little memory,
and lookups the rules make are dictionary hits, never scans.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gate.engine.deployers import LISTING, argocd, flux, helm
from gate.model.liveview import LiveObject, PodUse, Volume
from gate.model.refs import CLUSTER_SCOPED, ObjectRef, group_of
from gate.model.workloads import (
    claim_names,
    ephemeral_volume_names,
    pod_spec_of,
    pod_uses_claim,
)

#: Kinds whose templates create pods; a ReplicaSet with zero replicas is a leftover, not a user.
WORKLOAD_KINDS = frozenset(
    {
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("apps", "ReplicaSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("", "ReplicationController"),
    }
)


@dataclass(frozen=True, slots=True)
class CustomKind:
    """Where the custom resources of a CRD are served: its group, kind, plural, storage version."""

    group: str
    kind: str
    plural: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def served_custom_kind(crd: dict[str, Any]) -> CustomKind | None:
    """The kind a CRD serves, at its storage version (else its first served one); None when it
    serves nothing or lacks a group, kind or plural."""
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or () if isinstance(v, dict) and v.get("served")]
    storage = next((v for v in versions if v.get("storage")), versions[0] if versions else None)
    names = spec.get("names") or {}
    group, kind, plural = spec.get("group"), names.get("kind"), names.get("plural")
    if storage is None or not group or not kind or not plural:
        return None
    return CustomKind(str(group), str(kind), str(plural), str(storage["name"]))


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What pvc-protection looks at in a pod."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    created: str
    claims: tuple[str, ...]
    ephemeral_claims: tuple[str, ...]
    shut_down: bool


#: Parents whose live status lists what they applied (`gate.engine.deployers.LISTING`): a Flux
#: Kustomization and an Argo CD Application.
FLUX_KUSTOMIZATION = flux.KUSTOMIZATION.gk
ARGO_APPLICATION = argocd.APPLICATION.gk


#: The fact naming the field managers of a live object's `helm.sh/resource-policy` annotation
#: (comma-separated, from managedFields): Helm uninstall reads the stored release, so a keep
#: mark that kubectl alone set on the live object keeps nothing.
KEEP_MANAGERS = "resourcePolicyManagers"


def keep_managers(meta: dict[str, Any]) -> str:
    """Who set the object's `helm.sh/resource-policy` annotation, as managedFields record it."""
    out = []
    for entry in meta.get("managedFields") or ():
        fields = entry.get("fieldsV1") if isinstance(entry, dict) else None
        annotations = ((fields or {}).get("f:metadata") or {}).get("f:annotations") or {}
        if isinstance(annotations, dict) and helm.KEEP_FIELD in annotations:
            out.append(str(entry.get("manager") or "unknown"))
    return ",".join(sorted(set(out)))


def owner_refs(ref: ObjectRef, obj: dict[str, Any]) -> tuple[ObjectRef, ...]:
    """The owners an object's ownerReferences name. The garbage collector looks a namespaced
    dependent's owners up in the dependent's namespace, and a cluster-scoped one's among
    cluster-scoped objects (an owner reference never crosses namespaces)."""
    out = []
    for o in _meta(obj).get("ownerReferences") or ():
        if not isinstance(o, dict) or not o.get("kind") or not o.get("name"):
            continue
        group, kind = group_of(str(o.get("apiVersion", ""))), str(o["kind"])
        ns = "" if (group, kind) in CLUSTER_SCOPED else ref.namespace
        out.append(ObjectRef(group, kind, ns, str(o["name"])))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """A VolumeSnapshot: which claim it was taken of, and whether it is ready."""

    source_claim: str
    ready: bool


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def ref_of(
    obj: dict[str, Any], api_version: str | None = None, kind: str | None = None
) -> ObjectRef:
    """Identity of a raw API object (list items lack apiVersion/kind: pass them)."""
    meta = _meta(obj)
    group = group_of(api_version or str(obj.get("apiVersion", "")))
    k = kind or str(obj.get("kind", ""))
    ns = "" if (group, k) in CLUSTER_SCOPED else str(meta.get("namespace") or "")
    return ObjectRef(group, k, ns, str(meta.get("name", "")))


def project_object(ref: ObjectRef, obj: dict[str, Any], api_version: str = "") -> LiveObject:
    """The small projection of any object: annotations, labels, deletion state, kind facts."""
    meta = _meta(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    facts: dict[str, str] = {}
    if (ref.group, ref.kind) == ("apps", "StatefulSet"):
        policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        facts["whenDeleted"] = str(policy.get("whenDeleted", "Retain"))
    elif (ref.group, ref.kind) == ("", "PersistentVolume"):
        claim_ref = spec.get("claimRef") or {}
        if claim_ref.get("name"):
            facts["claimNamespace"] = str(claim_ref.get("namespace", ""))
            facts["claimName"] = str(claim_ref["name"])
        facts["reclaimPolicy"] = str(spec.get("persistentVolumeReclaimPolicy", "Delete"))
        facts["storageClassName"] = str(spec.get("storageClassName") or "")
    elif (ref.group, ref.kind) == ("", "PersistentVolumeClaim"):
        # Immutable fields the API server may have filled in at creation (a default class, the
        # bound volume, the default mode): the candidate is compared with these under --live.
        for key in ("volumeName", "storageClassName", "volumeMode"):
            if isinstance(spec.get(key), str) and spec[key]:
                facts[key] = spec[key]
        owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
        if owner and owner.get("kind") == "Pod":
            facts["ownerPodUid"] = str(owner.get("uid", ""))
    elif (ref.group, ref.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        facts["group"] = str(spec.get("group", ""))
        facts["kind"] = str((spec.get("names") or {}).get("kind", ""))
    elif (ref.group, ref.kind) == FLUX_KUSTOMIZATION:
        # What kustomize-controller's finalizer reads, and whether it force-replaces.
        facts.update(flux.kustomization_facts(spec))
    if helm.RESOURCE_POLICY in (meta.get("annotations") or {}):
        managers = keep_managers(meta)
        if managers:
            facts[KEEP_MANAGERS] = managers
    return LiveObject(
        ref=ref,
        annotations=dict(meta.get("annotations") or {}),
        labels=dict(meta.get("labels") or {}),
        deletion_timestamp=meta.get("deletionTimestamp"),
        finalizers=tuple(meta.get("finalizers") or ()),
        facts=facts,
        api_version=api_version,
    )


def project_pod(obj: dict[str, Any]) -> PodRecord:
    """Reduce a pod to what pvc-protection needs."""
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    name = str(meta.get("name", ""))
    grace = meta.get("deletionGracePeriodSeconds")
    return PodRecord(
        namespace=str(meta.get("namespace", "")),
        name=name,
        uid=str(meta.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        phase=str((obj.get("status") or {}).get("phase", "Unknown")),
        created=str(meta.get("creationTimestamp", "")),
        claims=tuple(claim_names(spec)),
        ephemeral_claims=tuple(f"{name}-{v}" for v in ephemeral_volume_names(spec)),
        shut_down=meta.get("deletionTimestamp") is not None and grace == 0,
    )


def template_claims(ref: ObjectRef, obj: dict[str, Any]) -> tuple[str, ...]:
    """Claims a workload's pod template mounts (nothing for a ReplicaSet scaled to zero)."""
    if (ref.group, ref.kind) in {("apps", "ReplicaSet"), ("", "ReplicationController")}:
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        if replicas == 0:
            return ()
    spec = pod_spec_of(ref.group, ref.kind, obj)
    return tuple(claim_names(spec)) if spec else ()


_release_of = helm.release_of


class LiveState:
    """The index. Not thread-safe by itself: the webhook guards it with a lock."""

    def __init__(self, guarded_kinds: Iterable[tuple[str, str]] = ()) -> None:
        self.guarded_kinds = frozenset(guarded_kinds)
        self.objects: dict[ObjectRef, LiveObject] = {}
        self.pods: dict[tuple[str, str], PodRecord] = {}
        self._users: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
        self._workload_claims: dict[ObjectRef, tuple[str, ...]] = {}
        self._consumers: dict[tuple[str, str], set[ObjectRef]] = defaultdict(set)
        self._in_namespace: dict[str, set[ObjectRef]] = defaultdict(set)
        self._snapshots: dict[ObjectRef, SnapshotRecord] = {}
        self._cr_counts: dict[tuple[str, str], int] = {}
        self._owners: dict[ObjectRef, tuple[ObjectRef, ...]] = {}
        self._dependents: dict[ObjectRef, set[ObjectRef]] = defaultdict(set)
        #: The same by (group, kind, name): an owner of a custom cluster-scoped kind is resolved
        #: into the dependent's namespace by `owner_refs`, which cannot know its scope.
        self._dependents_by_name: dict[tuple[str, str, str], set[ObjectRef]] = defaultdict(set)
        self._releases: dict[tuple[str, str], set[ObjectRef]] = defaultdict(set)
        self._applied: dict[ObjectRef, tuple[ObjectRef, ...]] = {}

    # --- applying API objects --------------------------------------------------------------

    def upsert(
        self, obj: dict[str, Any], api_version: str | None = None, kind: str | None = None
    ) -> None:
        """Add or replace one object, as listed or watched."""
        ref = ref_of(obj, api_version, kind)
        if (ref.group, ref.kind) == ("", "Pod"):
            self._put_pod(project_pod(obj))
            return
        self.delete(ref)
        self.objects[ref] = project_object(ref, obj, api_version or str(obj.get("apiVersion", "")))
        if (ref.group, ref.kind) in self.guarded_kinds:
            self._index_guarded(ref, obj)
        listing = LISTING.get((ref.group, ref.kind))
        if listing is not None:  # a deployer's parent: what it applied
            self._applied[ref] = listing.applied(obj)
        if (ref.group, ref.kind) in WORKLOAD_KINDS:
            claims = template_claims(ref, obj)
            self._workload_claims[ref] = claims
            for c in claims:
                self._consumers[(ref.namespace, c)].add(ref)
        if (ref.group, ref.kind) == ("snapshot.storage.k8s.io", "VolumeSnapshot"):
            source = ((obj.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName")
            ready = bool((obj.get("status") or {}).get("readyToUse"))
            if source:
                self._snapshots[ref] = SnapshotRecord(str(source), ready)

    def delete(self, ref: ObjectRef) -> None:
        """Forget one object (a watch DELETED event)."""
        if (ref.group, ref.kind) == ("", "Pod"):
            self._drop_pod((ref.namespace, ref.name))
            return
        live = self.objects.pop(ref, None)
        self._in_namespace.get(ref.namespace, set()).discard(ref)
        for owner in self._owners.pop(ref, ()):
            self._dependents[owner].discard(ref)
            self._dependents_by_name[(owner.group, owner.kind, owner.name)].discard(ref)
        if live is not None:
            release = _release_of(live.annotations)
            if release is not None:
                self._releases[release].discard(ref)
        self._applied.pop(ref, None)
        for c in self._workload_claims.pop(ref, ()):
            self._consumers[(ref.namespace, c)].discard(ref)
        self._snapshots.pop(ref, None)

    def _index_guarded(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        if ref.namespace:
            self._in_namespace[ref.namespace].add(ref)
        owners = owner_refs(ref, obj)
        if owners:
            self._owners[ref] = owners
            for owner in owners:
                self._dependents[owner].add(ref)
                self._dependents_by_name[(owner.group, owner.kind, owner.name)].add(ref)
        release = _release_of(self.objects[ref].annotations)
        if release is not None:
            self._releases[release].add(ref)

    def set_custom_resource_count(self, group: str, kind: str, count: int) -> None:
        """Record how many custom resources of a kind exist."""
        self._cr_counts[(group, kind)] = count

    def _put_pod(self, pod: PodRecord) -> None:
        key = (pod.namespace, pod.name)
        self._drop_pod(key)
        self.pods[key] = pod
        for c in {*pod.claims, *pod.ephemeral_claims}:
            self._users[(pod.namespace, c)].add(key)

    def _drop_pod(self, key: tuple[str, str]) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            for c in {*pod.claims, *pod.ephemeral_claims}:
                self._users[(pod.namespace, c)].discard(key)

    # --- LiveView --------------------------------------------------------------------------

    def get(self, ref: ObjectRef) -> LiveObject | None:
        return self.objects.get(ref)

    def claim_users(self, namespace: str, claim: str) -> list[PodUse]:
        claim_obj = self.objects.get(ObjectRef("", "PersistentVolumeClaim", namespace, claim))
        owner_uid = claim_obj.facts.get("ownerPodUid") if claim_obj else None
        users = []
        for key in sorted(self._users.get((namespace, claim), ())):
            pod = self.pods[key]
            owned = None if owner_uid is None else owner_uid == pod.uid
            if pod_uses_claim(
                claim, pod.node, pod.claims, pod.ephemeral_claims, pod.shut_down, owned
            ):
                users.append(
                    PodUse(
                        pod.namespace,
                        pod.name,
                        pod.node,
                        pod.phase,
                        pod.created,
                        ephemeral=claim not in pod.claims,
                    )
                )
        return users

    def claim_consumers(self, namespace: str, claim: str) -> list[ObjectRef]:
        return sorted(self._consumers.get((namespace, claim), ()))

    def guarded_in_namespace(self, namespace: str) -> list[ObjectRef]:
        return sorted(self._in_namespace.get(namespace, ()))

    def custom_resource_count(self, group: str, kind: str) -> int | None:
        return self._cr_counts.get((group, kind))

    def bound_volume(self, namespace: str, claim: str) -> Volume | None:
        obj = self.objects.get(ObjectRef("", "PersistentVolumeClaim", namespace, claim))
        name = obj.facts.get("volumeName") if obj else None
        pv = self.objects.get(ObjectRef("", "PersistentVolume", "", name)) if name else None
        if pv is None or name is None:
            return None
        return Volume(
            name, pv.facts.get("reclaimPolicy", "Delete"), pv.facts.get("storageClassName", "")
        )

    def ready_snapshots(self, namespace: str, claim: str) -> list[str]:
        return sorted(
            ref.name
            for ref, snap in self._snapshots.items()
            if ref.namespace == namespace and snap.source_claim == claim and snap.ready
        )

    def dependents(self, owner: ObjectRef) -> list[ObjectRef]:
        if owner.namespace:
            return sorted(self._dependents.get(owner, ()))
        # A cluster-scoped owner owns namespaced dependents in any namespace.
        return sorted(self._dependents_by_name.get((owner.group, owner.kind, owner.name), ()))

    def owners(self, ref: ObjectRef) -> list[ObjectRef]:
        return list(self._owners.get(ref, ()))

    def release_members(self, namespace: str, release: str) -> list[ObjectRef]:
        return sorted(self._releases.get((namespace, release), ()))

    def applied_by(self, parent: ObjectRef) -> list[ObjectRef] | None:
        applied = self._applied.get(parent)
        return None if applied is None else list(applied)

    def __len__(self) -> int:
        return len(self.objects) + len(self.pods)
