"""Object identity: (API group, kind, namespace, name), and which kinds are cluster-scoped.

The version is not part of the identity: moving a HorizontalPodAutoscaler from autoscaling/v2beta2
to autoscaling/v2 is not a removal, and the API server stores one object either way.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Built-in kinds that live outside namespaces, by (group, kind).
CLUSTER_SCOPED: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("storage.k8s.io", "VolumeAttributesClass"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "IPAddress"),
        ("networking.k8s.io", "ServiceCIDR"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("snapshot.storage.k8s.io", "VolumeSnapshotClass"),
        ("snapshot.storage.k8s.io", "VolumeSnapshotContent"),
        ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "ResourceSlice"),
    }
)


@dataclass(frozen=True, order=True, slots=True)
class ObjectRef:
    """The identity of one object. `namespace` is "" for cluster-scoped objects."""

    group: str
    kind: str
    namespace: str
    name: str

    @property
    def group_kind(self) -> str:
        """`kind.group`, as kubectl spells it (`StatefulSet.apps`, `PersistentVolumeClaim`)."""
        return group_kind(self.group, self.kind)

    def display(self) -> str:
        """`Kind namespace/name`, or `Kind name` when cluster-scoped."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"

    def kubectl(self) -> str:
        """Arguments that select this object in kubectl: `-n ns pvc.group/name`."""
        resource = f"{self.kind.lower()}.{self.group}" if self.group else self.kind.lower()
        ns = f"-n {self.namespace} " if self.namespace else ""
        return f"{ns}{resource}/{self.name}"


def group_kind(group: str, kind: str) -> str:
    """`Kind.group`, or `Kind` for the core group: how kubectl and the policy file name kinds."""
    return f"{kind}.{group}" if group else kind


def api_path(api_version: str, plural: str, namespace: str = "") -> str:
    """The REST path of a resource: `/api/v1/pods`, `/apis/apps/v1/namespaces/x/statefulsets`."""
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scope}/{plural}"


@functools.lru_cache(maxsize=1024)  # a check asks once per object, of a few dozen apiVersions
def group_of(api_version: str) -> str:
    """`apps/v1` -> `apps`; `v1` -> `` (the core group)."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def parse_group_kind(text: str) -> tuple[str, str]:
    """`StatefulSet.apps` -> (`apps`, `StatefulSet`); `PersistentVolumeClaim` -> (``, ...)."""
    kind, _, group = text.partition(".")
    return group, kind


def crd_kind(body: dict[str, Any]) -> tuple[str, str] | None:
    """The (group, kind) a CustomResourceDefinition declares; None for any other object."""
    if body.get("kind") != "CustomResourceDefinition":
        return None
    if group_of(str(body.get("apiVersion") or "")) != "apiextensions.k8s.io":
        return None
    spec = body.get("spec")
    names = spec.get("names") if isinstance(spec, dict) else None
    group = spec.get("group") if isinstance(spec, dict) else None
    kind = names.get("kind") if isinstance(names, dict) else None
    return (group, kind) if isinstance(group, str) and isinstance(kind, str) else None


class Scopes:
    """Which kinds are cluster-scoped: the built-ins, plus CRDs seen on either side."""

    def __init__(self, extra_cluster: Iterable[tuple[str, str]] = ()) -> None:
        self._cluster = set(CLUSTER_SCOPED)
        self._cluster.update(extra_cluster)

    def learn_crd(self, crd: dict[str, Any]) -> None:
        """Record the scope a CustomResourceDefinition declares for its kind."""
        declared = crd_kind(crd)
        if declared is not None and (crd.get("spec") or {}).get("scope") == "Cluster":
            self._cluster.add(declared)

    def is_cluster_scoped(self, group: str, kind: str) -> bool:
        """True when objects of this kind have no namespace."""
        return (group, kind) in self._cluster
