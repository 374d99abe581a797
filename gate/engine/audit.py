"""`gate audit --live`: which guarded claims would lose their data if they were deleted now.

Why: before a platform team trusts a merge queue to prune, it asks which claims a wrong prune
would cost: those bound to a volume whose `persistentVolumeReclaimPolicy` is `Delete` (or the
deprecated `Recycle`, which scrubs it) and that have no ready VolumeSnapshot to restore from. A
`Retain` volume keeps the data (Released) and a ready snapshot can be restored, so those are
safe, and only counted. Pure: the API lists come in as parsed JSON (`gate.kube.audit`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gate.engine.ledger import Volume, mapping_of, project_volume

#: Reclaim policies that destroy the data when the claim goes.
DESTROYING = frozenset({"Delete", "Recycle"})


class Standing(StrEnum):
    """Where a claim's data stands if the claim is deleted."""

    #: Bound to a Delete (or Recycle) volume, no ready snapshot: the data is destroyed.
    AT_RISK = "at-risk"
    #: Bound to a Retain volume: the data stays, Released.
    RETAINED = "retained"
    #: A ready VolumeSnapshot of it exists: the data can be restored.
    SNAPSHOTTED = "snapshotted"
    #: Bound to no volume (Pending), or its volume is gone (Lost): no data to lose here.
    UNBOUND = "unbound"


@dataclass(frozen=True, slots=True)
class SnapshotFacts:
    """What the audit reads of a VolumeSnapshot: the claim it was taken of, and readiness."""

    namespace: str
    name: str
    claim: str
    ready: bool


@dataclass(frozen=True, slots=True)
class ClaimData:
    """One claim, its volume and what a deletion would do to its data."""

    namespace: str
    name: str
    standing: Standing
    volume: str = ""
    reclaim_policy: str = ""
    #: The claim's storageClassName; None when it names none (`<none>` as kubectl shows it).
    storage_class: str | None = None
    capacity: str = ""
    #: Ready snapshots of the claim (SNAPSHOTTED), or the not-ready ones (AT_RISK).
    snapshots: tuple[str, ...] = ()

    def snapshot_text(self, snapshots_served: bool) -> str:
        """The SNAPSHOT column: the ready ones, else why there is none."""
        if self.standing is Standing.SNAPSHOTTED:
            return ",".join(self.snapshots)
        if not snapshots_served:
            return "<no API>"
        if self.snapshots:
            return "not ready: " + ",".join(self.snapshots)
        return "<none>"


@dataclass(frozen=True)
class Audit:
    """Every guarded claim read, by standing, and what could not be read."""

    claims: tuple[ClaimData, ...]
    #: The VolumeSnapshot API (snapshot.storage.k8s.io) answered: without it, no claim counts
    #: as snapshotted.
    snapshots_served: bool
    #: The namespace read, or None for every namespace.
    namespace: str | None
    #: Claims are not a guarded kind of the policy: nothing was audited.
    claims_guarded: bool = True
    counts: dict[Standing, int] = field(init=False)

    def __post_init__(self) -> None:
        counts = dict.fromkeys(Standing, 0)
        for c in self.claims:
            counts[c.standing] += 1
        object.__setattr__(self, "counts", counts)

    @property
    def at_risk(self) -> list[ClaimData]:
        return [c for c in self.claims if c.standing is Standing.AT_RISK]

    def summary(self) -> str:
        """One line a person can read out: how many lose data, how many are safe and why."""
        c = self.counts
        safe = c[Standing.RETAINED] + c[Standing.SNAPSHOTTED]
        where = f"in namespace {self.namespace}" if self.namespace else "in all namespaces"
        return (
            f"{c[Standing.AT_RISK]} guarded claim(s) {where} whose data a deletion would destroy; "
            f"{safe} safe ({c[Standing.RETAINED]} on a Retain volume, {c[Standing.SNAPSHOTTED]} "
            f"with a ready VolumeSnapshot); {c[Standing.UNBOUND]} bound to no volume"
        )


def project_snapshot(obj: dict[str, Any]) -> SnapshotFacts | None:
    """None for a snapshot not taken of a claim (a pre-provisioned VolumeSnapshotContent)."""
    meta = mapping_of(obj, "metadata")
    claim = mapping_of(mapping_of(obj, "spec"), "source").get("persistentVolumeClaimName")
    if not isinstance(claim, str) or not claim:
        return None
    return SnapshotFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name", "")),
        claim=claim,
        ready=mapping_of(obj, "status").get("readyToUse") is True,
    )


def _bound_volume(claim: dict[str, Any], volumes: dict[str, Volume]) -> Volume | None:
    """The claim's volume: its spec.volumeName, if that volume exists and its claimRef names
    the claim (a volume re-bound elsewhere is not this claim's data)."""
    meta, spec = mapping_of(claim, "metadata"), mapping_of(claim, "spec")
    volume = volumes.get(str(spec.get("volumeName") or ""))
    ref = volume.claim_ref if volume is not None else None
    if ref is None or (ref.namespace, ref.name) != (meta.get("namespace"), meta.get("name")):
        return None
    return None if ref.uid and meta.get("uid") and ref.uid != meta.get("uid") else volume


def judge_claim(
    claim: dict[str, Any], volumes: dict[str, Volume], snapshots: Iterable[SnapshotFacts]
) -> ClaimData:
    """Where one claim's data stands; `snapshots` are those taken of it."""
    meta, spec = mapping_of(claim, "metadata"), mapping_of(claim, "spec")
    cls = spec.get("storageClassName")
    mine = sorted(snapshots, key=lambda s: s.name)
    ready = tuple(s.name for s in mine if s.ready)
    volume = _bound_volume(claim, volumes)
    base = ClaimData(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name", "")),
        standing=Standing.UNBOUND,
        storage_class=cls if isinstance(cls, str) else None,
    )
    if volume is None:
        return base
    capacity = str(
        mapping_of(mapping_of(claim, "status"), "capacity").get("storage") or volume.capacity
    )
    if volume.reclaim_policy not in DESTROYING:
        standing, shown = Standing.RETAINED, ready
    elif ready:
        standing, shown = Standing.SNAPSHOTTED, ready
    else:
        standing, shown = Standing.AT_RISK, tuple(s.name for s in mine)
    return ClaimData(
        base.namespace,
        base.name,
        standing,
        volume.meta.ref.name,
        volume.reclaim_policy,
        base.storage_class,
        capacity,
        shown,
    )


def audit_claims(
    claims: Iterable[dict[str, Any]],
    volumes: Iterable[dict[str, Any]],
    snapshots: Iterable[dict[str, Any]] | None,
    namespace: str | None,
    claims_guarded: bool = True,
) -> Audit:
    """The audit of these claims (raw API objects); `snapshots` None: the VolumeSnapshot API is
    not served, so none counts. Claims not guarded by the policy: nothing is audited."""
    by_name = {v.meta.ref.name: v for v in map(project_volume, volumes)}
    taken: dict[tuple[str, str], list[SnapshotFacts]] = {}
    for snap in filter(None, map(project_snapshot, snapshots or ())):
        taken.setdefault((snap.namespace, snap.claim), []).append(snap)
    judged = (
        [judge_claim(c, by_name, taken.get(_key(c), ())) for c in claims if isinstance(c, dict)]
        if claims_guarded
        else []
    )
    judged.sort(key=lambda c: (c.namespace, c.name))
    return Audit(tuple(judged), snapshots is not None, namespace, claims_guarded)


def _key(claim: dict[str, Any]) -> tuple[str, str]:
    meta = mapping_of(claim, "metadata")
    return str(meta.get("namespace") or ""), str(meta.get("name", ""))
