"""The live-state view the rules read: one interface, two sources.

`gate check --live` fills it from paginated API lists (`gate.kube.snapshot`); the webhook fills it
from its watch cache. Rules never know which. Every method answers from memory: no network here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gate.model.refs import ObjectRef


@dataclass(frozen=True, slots=True)
class LiveObject:
    """The small projection of a live object the rules need."""

    ref: ObjectRef
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    deletion_timestamp: str | None = None
    finalizers: tuple[str, ...] = ()
    #: Kind-specific facts: a StatefulSet's `whenDeleted`, a PV's `claimRef`, ...
    facts: dict[str, str] = field(default_factory=dict, compare=False)
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class PodUse:
    """A pod that pvc-protection counts as a user of a claim."""

    namespace: str
    name: str
    node: str
    phase: str
    since: str = ""
    ephemeral: bool = False

    def describe(self) -> str:
        how = " (generic ephemeral volume)" if self.ephemeral else ""
        since = f", since {self.since}" if self.since else ""
        return f"pod {self.namespace}/{self.name} on node {self.node} ({self.phase}{since}){how}"


def retain_command(volume: str) -> str:
    """The kubectl command that makes a PersistentVolume keep its data when its claim goes
    (reclaimPolicy Retain): the fix every door gives for a volume that would be deleted."""
    patch = '{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}'
    return f"kubectl patch pv {volume} -p '{patch}'"


@dataclass(frozen=True, slots=True)
class Volume:
    """The PersistentVolume bound to a claim."""

    name: str
    reclaim_policy: str
    #: Its storageClassName ("" for a class-less volume): a claim that re-binds it names the same.
    storage_class: str = ""


class LiveView(Protocol):
    """What the rules may ask about the cluster."""

    def get(self, ref: ObjectRef) -> LiveObject | None:
        """The live object with this identity, if it exists."""

    def claim_users(self, namespace: str, claim: str) -> list[PodUse]:
        """Pods pvc-protection counts as users: scheduled pods naming the claim, any phase, and
        pods whose generic ephemeral volume owns it while they are not shut down."""

    def claim_consumers(self, namespace: str, claim: str) -> list[ObjectRef]:
        """Live workload templates that would create pods using the claim."""

    def guarded_in_namespace(self, namespace: str) -> list[ObjectRef]:
        """Guarded objects (claims, snapshots, ...) that live in the namespace."""

    def custom_resource_count(self, group: str, kind: str) -> int | None:
        """How many custom resources of this kind exist, or None when not known."""

    def bound_volume(self, namespace: str, claim: str) -> Volume | None:
        """The PersistentVolume bound to the claim, if any."""

    def ready_snapshots(self, namespace: str, claim: str) -> list[str]:
        """Names of ready VolumeSnapshots taken of the claim."""

    def dependents(self, owner: ObjectRef) -> list[ObjectRef]:
        """Guarded objects whose ownerReferences name `owner` (same namespace, or any namespace
        for a cluster-scoped owner): the garbage collector deletes them once all their owners
        are gone."""

    def owners(self, ref: ObjectRef) -> list[ObjectRef]:
        """The owners a live object's ownerReferences name (namespace resolved as the garbage
        collector resolves it)."""

    def release_members(self, namespace: str, release: str) -> list[ObjectRef]:
        """Guarded objects Helm installed as release `release` in `namespace` (its
        `meta.helm.sh/release-name` and `-namespace` annotations)."""

    def applied_by(self, parent: ObjectRef) -> list[ObjectRef] | None:
        """What a live Flux Kustomization (`status.inventory`) or Argo CD Application
        (`status.resources`) applied; None when the parent is not in the view."""
