"""What happens to a deleted claim's data: its volume's reclaim policy, live or declared.

Why a module of its own: "never prune" is not what most owners of a claim want, "keep the data"
is, and whether a deletion keeps the data depends on the volume, not on the claim: a volume with
`persistentVolumeReclaimPolicy: Retain` is left `Released`, data intact, when its claim goes; one
with `Delete` (what most provisioners give, from their StorageClass) is deleted with its
storage. Every finding on a deleted claim says which (`gate.engine.rules.common.finding`), and
VOLUME_RETAINS_DATA turns on it, so the question is answered once, here, the same way at every
door.

Pure. Where it is known from, in order: the live view (the volume the claim is bound to: what
the PV controller acts on); else a PersistentVolume base declares for the claim (its claimRef,
or the claim's `spec.volumeName`: a static volume, whose policy defaults to Retain at the API
server); else the StorageClass base declares for the claim (what a volume it provisions gets,
Delete by default); else not known.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gate.engine.plan import Change
from gate.engine.rules.world import CLAIM, VOLUME, World, kind_of
from gate.model.objects import Manifest, Source
from gate.model.refs import ObjectRef

STORAGE_CLASS = ("storage.k8s.io", "StorageClass")
#: The API server's default of a PersistentVolume's `persistentVolumeReclaimPolicy`.
VOLUME_DEFAULT = "Retain"
#: A StorageClass's default `reclaimPolicy`: what a dynamically provisioned volume gets.
CLASS_DEFAULT = "Delete"
RETAIN = "Retain"


class Known(StrEnum):
    """Where a claim's data fate was read."""

    LIVE = "live"
    #: A PersistentVolume manifest of base names the claim (a static volume).
    VOLUME = "declared volume"
    #: Only the claim's StorageClass manifest: what a volume it provisions gets.
    CLASS = "declared class"
    #: The live claim is bound to no volume: it holds no data.
    UNBOUND = "unbound"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class DataFate:
    """What happens to a claim's data when the claim is deleted, and how that is known."""

    known: Known
    #: `Retain`, `Delete`, `Recycle`; "" when not known.
    policy: str = ""
    #: The PersistentVolume (or, for CLASS, the StorageClass) it is read from.
    name: str = ""
    #: The volume's storageClassName ("" for a class-less volume): a claim that re-binds it must
    #: name the same.
    storage_class: str = ""
    #: Where the volume or class is declared, when it is.
    source: Source | None = None
    #: The policy is the API server's default (the manifest sets none).
    defaulted: bool = False
    #: This deploy deletes the PersistentVolume object too.
    volume_deleted: bool = False
    #: Read without a live view (`gate check` without --live): --live would tell.
    offline: bool = False

    @property
    def kept(self) -> bool:
        """The data stays in a volume that outlives the claim: a Retain volume known live or
        declared static, which this deploy does not delete. A class's Retain is not enough: the
        volume may have been patched since it was provisioned."""
        return (
            self.policy == RETAIN
            and self.known in (Known.LIVE, Known.VOLUME)
            and not self.volume_deleted
        )

    def evidence(self) -> str:
        """One evidence line, `data: ...`: the volume (or class), its policy, where that was
        read, and what the policy does to the data. Short: the webhook's answer is capped."""
        where = f" at {self.source}" if self.source else ""
        policy = f"reclaimPolicy {self.policy}" + (" (the default)" if self.defaulted else "")
        if self.known is Known.LIVE:
            return f"data: PersistentVolume {self.name} (live), {policy}: {self._outcome()}"
        if self.known is Known.VOLUME:
            return (
                f"data: PersistentVolume {self.name} (declared{where}), {policy}: {self._outcome()}"
            )
        if self.known is Known.CLASS:
            kept = "kept, Released," if self.policy == RETAIN else "deleted, data and all,"
            return (
                f"data: no bound volume known; StorageClass {self.name} (declared{where}) has "
                f"{policy}: a volume it provisioned is {kept} with the claim (unless patched since)"
            )
        if self.known is Known.UNBOUND:
            return "data: none: the live claim is bound to no volume"
        offline = "; --live reads the bound volume's" if self.offline else ""
        return (
            "data: not known (no bound volume seen, no PersistentVolume or StorageClass "
            "declared for it); a dynamically provisioned volume takes its StorageClass's "
            f"reclaimPolicy, Delete by default: deleted with the claim{offline}"
        )

    def _outcome(self) -> str:
        """What the volume's policy does to the data when the claim goes."""
        if self.policy == RETAIN and self.volume_deleted:
            return "the data stays on the storage, but this deploy deletes the PersistentVolume too"
        if self.policy == RETAIN:
            return "the data stays in the volume, Released"
        if self.policy == "Recycle":
            return "the volume is scrubbed: its data is lost with the claim"
        return "the volume and its data are deleted with the claim"


def data_fate(change: Change, world: World) -> DataFate | None:
    """What deleting the change's claim does to its data; None for anything but a claim."""
    if kind_of(change.ref) != CLAIM:
        return None
    live = _live_fate(change, world)
    if live is not None:
        return live
    claim = change.base or change.head
    spec = claim.spec if claim is not None else {}
    volume = declared_volume(change.ref, spec, world)
    if volume is not None:
        return _volume_fate(volume, world)
    klass = spec.get("storageClassName")
    found = _declared(world, STORAGE_CLASS, klass) if isinstance(klass, str) and klass else None
    if found is not None:
        policy = found.body.get("reclaimPolicy")
        set_here = isinstance(policy, str) and bool(policy)
        return DataFate(
            Known.CLASS,
            str(policy) if set_here else CLASS_DEFAULT,
            found.ref.name,
            source=found.source,
            defaulted=not set_here,
        )
    return DataFate(Known.UNKNOWN, offline=world.live is None)


def _live_fate(change: Change, world: World) -> DataFate | None:
    """From the live view: the bound volume, or a live claim bound to none; None when the live
    view does not have the claim (or there is none)."""
    if world.live is None:
        return None
    ref = change.ref
    volume = world.live.bound_volume(ref.namespace, ref.name)
    if volume is not None:
        return DataFate(
            Known.LIVE,
            volume.reclaim_policy,
            volume.name,
            storage_class=volume.storage_class,
            volume_deleted=ObjectRef("", "PersistentVolume", "", volume.name) in world.deleting,
        )
    claim = world.live.get(ref)
    if claim is not None and not claim.facts.get("volumeName"):
        return DataFate(Known.UNBOUND)
    return None


def _volume_fate(volume: Manifest, world: World) -> DataFate:
    """From a PersistentVolume manifest: the candidate's when it keeps it (what the deploy
    applies), else base's."""
    applied = world.head.get(volume.ref) or volume
    policy = applied.spec.get("persistentVolumeReclaimPolicy")
    set_here = isinstance(policy, str) and bool(policy)
    klass = applied.spec.get("storageClassName")
    return DataFate(
        Known.VOLUME,
        str(policy) if set_here else VOLUME_DEFAULT,
        volume.ref.name,
        storage_class=klass if isinstance(klass, str) else "",
        source=applied.source,
        defaulted=not set_here,
        volume_deleted=volume.ref in world.deleting,
    )


def declared_volume(claim: ObjectRef, spec: dict[str, Any], world: World) -> Manifest | None:
    """The PersistentVolume base declares for the claim: the one its `spec.volumeName` names,
    else one whose `spec.claimRef` names it (namespace `default` when the claimRef has none)."""
    name = spec.get("volumeName")
    if isinstance(name, str) and name:
        named = _declared(world, VOLUME, name)
        if named is not None:
            return named
    return world.volumes_by_claim.get((claim.namespace, claim.name))


def _declared(world: World, kind: tuple[str, str], name: object) -> Manifest | None:
    """A cluster-scoped object of base by kind and name."""
    if not isinstance(name, str) or not name:
        return None
    return world.base.get(ObjectRef(kind[0], kind[1], "", name))


def rebind_claim_json(ref: ObjectRef, fate: DataFate, world: World) -> str | None:
    """The claim to create so that it binds the Released volume again, as one line of JSON:
    `spec.volumeName` the volume, `storageClassName` the volume's (`""` for a class-less one),
    access modes, size and volume mode as base declared the claim (else as the declared volume
    has them). None when they are not known (nothing declares claim or volume), or a value
    would not survive single quotes in a shell."""
    claim = world.base.get(ref)
    spec = dict(claim.spec) if claim is not None else {}
    volume = world.base.get(ObjectRef("", "PersistentVolume", "", fate.name))
    if volume is not None:
        if "accessModes" not in spec and "accessModes" in volume.spec:
            spec["accessModes"] = volume.spec["accessModes"]
        if "resources" not in spec and isinstance(volume.spec.get("capacity"), dict):
            spec["resources"] = {"requests": dict(volume.spec["capacity"])}
    if "accessModes" not in spec or "resources" not in spec:
        return None
    kept: dict[str, Any] = {
        k: spec[k] for k in ("accessModes", "resources", "volumeMode") if k in spec
    }
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": ref.name, "namespace": ref.namespace},
        "spec": {**kept, "storageClassName": fate.storage_class, "volumeName": fate.name},
    }
    text = json.dumps(body, separators=(",", ":"))
    return None if "'" in text else text
