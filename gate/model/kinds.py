"""The built-in Kubernetes kinds, by API group: a kind named in a built-in group must be one.

`guardedKinds: [PersistentVolumeClaims]` (a typo) used to be accepted and switched protection
off: no object is of that kind. In a group Kubernetes owns the kinds are known, so a name that is
not one is a policy error naming the nearest; a custom group's kinds come from CRDs, which only a
check can see. Pure data.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from typing import Any

from gate.model.errors import ConfigError
from gate.model.refs import crd_kind
from gate.model.stateful import CATALOGUE, catalogued

#: Kinds served by a v1.34 API server, by group (subresource kinds and List kinds left out).
BUILTIN_KINDS: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
        }
    ),
    "apps": frozenset(
        {"ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"}
    ),
    "batch": frozenset({"CronJob", "Job"}),
    "autoscaling": frozenset({"HorizontalPodAutoscaler"}),
    "policy": frozenset({"PodDisruptionBudget"}),
    "networking.k8s.io": frozenset(
        {"Ingress", "IngressClass", "IPAddress", "NetworkPolicy", "ServiceCIDR"}
    ),
    "rbac.authorization.k8s.io": frozenset(
        {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    ),
    "storage.k8s.io": frozenset(
        {
            "CSIDriver",
            "CSINode",
            "CSIStorageCapacity",
            "StorageClass",
            "VolumeAttachment",
            "VolumeAttributesClass",
        }
    ),
    "apiextensions.k8s.io": frozenset({"CustomResourceDefinition"}),
    "coordination.k8s.io": frozenset({"Lease"}),
    "discovery.k8s.io": frozenset({"EndpointSlice"}),
    "scheduling.k8s.io": frozenset({"PriorityClass"}),
    "node.k8s.io": frozenset({"RuntimeClass"}),
    "admissionregistration.k8s.io": frozenset(
        {
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        }
    ),
    "certificates.k8s.io": frozenset({"CertificateSigningRequest"}),
    "flowcontrol.apiserver.k8s.io": frozenset({"FlowSchema", "PriorityLevelConfiguration"}),
    "apiregistration.k8s.io": frozenset({"APIService"}),
    "resource.k8s.io": frozenset(
        {"DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"}
    ),
    # Not Kubernetes' own, but as fixed: the external snapshotter's CRDs.
    "snapshot.storage.k8s.io": frozenset(
        {"VolumeSnapshot", "VolumeSnapshotClass", "VolumeSnapshotContent"}
    ),
}


def unknown_kind(group: str, kind: str) -> str | None:
    """Why `kind` in `group` names nothing (with the nearest known kind), or None when it is a
    built-in kind or its group is not a built-in one."""
    known = BUILTIN_KINDS.get(group)
    if known is None or kind in known:
        return None
    where = f"API group {group}" if group else "the core API group"
    near = difflib.get_close_matches(kind, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]}{'.' + group if group else ''}?" if near else ""
    return f"{kind} is no kind of {where}, so nothing would be guarded{hint}"


def declared_custom_kinds(bodies: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, kind) of every CustomResourceDefinition among `bodies` (either side's objects)."""
    return {kind for body in bodies if (kind := crd_kind(body)) is not None}


def unknown_guarded_kind(
    group: str, kind: str, custom: Collection[tuple[str, str]], live: bool
) -> str | None:
    """Why a guarded kind names nothing gate check can see, with the nearest known kind; None
    when it is built in, catalogued (`gate.model.stateful`: known without its CRD), or a custom
    kind a CRD on either side (or, `live`, the API server) declares. A kind nothing declares
    guards nothing: its objects could never be found."""
    if group in BUILTIN_KINDS:
        return unknown_kind(group, kind)
    if (group, kind) in custom or catalogued(group, kind) is not None:
        return None
    name = f"{kind}.{group}" if group else kind
    known = {f"{k}.{g}" if g else k for g, ks in BUILTIN_KINDS.items() for k in ks}
    known.update(f"{k}.{g}" for g, k in custom)
    known.update(k.name for k in CATALOGUE)
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    where = "either side" + (" nor the live API server" if live else "")
    hint = f"; did you mean {near[0]}?" if near else ""
    fix = "" if live else " (with --live, the kinds the cluster serves count too)"
    return (
        f"{name} is no built-in kind, and no CustomResourceDefinition on {where} declares it, "
        f"so nothing would be guarded{hint}{fix}"
    )


def check_guarded_kinds(
    kinds: Iterable[tuple[str, str]], custom: Collection[tuple[str, str]], live: bool
) -> None:
    """Refuse a policy whose `guardedKinds` names a kind nothing declares (a typo switches
    protection off for the kind it meant)."""
    for group, kind in sorted(kinds):
        problem = unknown_guarded_kind(group, kind, custom, live)
        if problem is not None:
            raise ConfigError(f"policy guardedKinds: {problem}")
