"""Base vs candidate: which objects are deleted, force-replaced, or changed in an immutable field.

Pure: takes two inventories and returns `Change`s. Immutable fields are checked the way the API
server validates updates, for the kinds whose loss or wedge prune-gate guards against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gate.engine.deployers import FLUX, Event, force_mark
from gate.engine.deployers.flux import apply_skipped
from gate.engine.kustomizations import (
    FLUX_FORCE,
    applying_kustomizations,
    force_disabled,
    forcing_kustomization,
    live_forcing_kustomization,
)
from gate.model.liveview import LiveView
from gate.model.objects import Inventory, Manifest
from gate.model.quantity import parse_quantity
from gate.model.refs import ObjectRef


class Action(StrEnum):
    """What the deploy does to an object."""

    DELETE = "delete"
    REPLACE = "replace"  # delete and recreate: a forced replacement
    UPDATE = "update"


@dataclass(frozen=True)
class Change:
    """One object the deploy will delete, replace or update, and why."""

    ref: ObjectRef
    action: Action
    base: Manifest | None
    head: Manifest | None
    cause: str
    #: Immutable fields that differ (dotted paths), for REPLACE and UPDATE.
    immutable: tuple[str, ...] = ()
    #: What turned force on, for REPLACE.
    force: str = ""
    #: For a DELETE the deployer will not carry out (its Flux Kustomization does not prune):
    #: why the object stays, unmanaged.
    orphaned: str = ""
    #: When the deployer deletes it: at a prune, or with its parent (an Application's resources
    #: finalizer), which decides the keep mark that counts (`Prune=false` or `Delete=false`).
    event: Event = Event.PRUNE

    @property
    def deletes(self) -> bool:
        """True when the object is deleted, for good or to be recreated."""
        return self.action in (Action.DELETE, Action.REPLACE)


def compute_plan(
    base: Inventory, head: Inventory, force_all: bool = False, live: LiveView | None = None
) -> list[Change]:
    """Every object removed from base, and every object whose immutable fields change.

    With a live view, a claim's fields that base leaves unset are compared with the live claim,
    where the API server filled them in at creation (the default StorageClass, the bound volume).
    """
    changes: list[Change] = []
    for m in base:
        other = head.get(m.ref)
        if other is None:
            changes.append(Change(m.ref, Action.DELETE, m, None, "removed from the manifests"))
            continue
        if other.body == m.body:
            continue
        check = IMMUTABLE_CHECKS.get((m.ref.group, m.ref.kind))
        if check is None:
            continue  # no immutable field prune-gate guards: nothing to replace
        if flux_skips_apply(m, other, head, live) is not None:
            continue  # Flux does not apply the change: nothing fails, nothing is replaced
        # The controller reads force from the object it applies: the candidate's.
        force = "--force" if force_all else force_reason(other, m, base, head, live)
        live_obj = live.get(m.ref) if live is not None else None
        facts = live_obj.facts if live_obj is not None else (None if live is None else {})
        known = Known(facts, bool(force))
        diffs = tuple(check(m.body, other.body, known))
        if not diffs:
            continue
        if force:
            cause = f"immutable field changed with force on ({force})"
            changes.append(Change(m.ref, Action.REPLACE, m, other, cause, diffs, force))
        else:
            changes.append(Change(m.ref, Action.UPDATE, m, other, "immutable field changed", diffs))
    return changes


def flux_skips_apply(
    before: Manifest, now: Manifest, head: Inventory, live: LiveView | None
) -> str | None:
    """Why kustomize-controller does not apply the candidate's `now` of an object base declares
    (`before`), or None: `reconcile: disabled` or `ssa: Ignore` on `now` or on the live object,
    or `ssa: IfNotPresent` on `now` when the object exists (live, else declared by base and so
    deployed). A mark only in base is not read: Flux never applied it (fluxcd/pkg ssa
    `shouldSkipApply`; `gate.engine.deployers.flux.apply_skipped`).

    Only for an object Flux is known to apply (a Kustomization of the candidate applies it, or
    its live Flux labels say so): another tool applies it whatever these Flux keys say, so an
    object nothing ties to Flux is judged as if they were not there (fail closed)."""
    obj = live.get(before.ref) if live is not None else None
    flux_live = obj is not None and FLUX.owner(obj.annotations, obj.labels) is not None
    if not flux_live and not applying_kustomizations(now, head):
        return None
    desired = (now.annotations, now.labels)
    if live is None:
        return apply_skipped(desired, ({}, {}))
    if obj is None:
        return apply_skipped(desired, None)  # absent: created, IfNotPresent or not
    return apply_skipped(desired, (obj.annotations, obj.labels))


def force_reason(
    m: Manifest, before: Manifest, base: Inventory, head: Inventory, live: LiveView | None
) -> str:
    """Why a controller would force-replace this object (`m`, the candidate's; `before`, base's),
    or "" when it would not: its own annotation, or a Flux Kustomization that may apply it with
    `spec.force: true`, which the object's `force: disabled` does not switch off. One forcing in
    base counts too (the candidate turning force off may reach the cluster after the object's
    apply), and under --live so does the live one the object's labels name."""
    mark = force_mark(m.annotations)  # Flux's `force: enabled`, Argo CD's `Replace=true`
    if mark is not None:
        return str(mark)
    void = f"; its {FLUX_FORCE}: disabled does not switch that off" if force_disabled(m) else ""
    k, where = forcing_kustomization(m, head), ""
    if k is None:
        k, where = forcing_kustomization(before, base), " in base"
    if k is not None:
        return f"{k.ref.display()} has spec.force: true{where}{void}"
    forcing = live_forcing_kustomization(m.ref, live) if live is not None else ""
    return f"{forcing} has spec.force: true (live){void}" if forcing else ""


@dataclass(frozen=True, slots=True)
class Known:
    """What the plan knows of an object besides its two manifests."""

    #: The live object's facts (`LiveObject.facts`); None without a live view, `{}` when the
    #: live view has no such object.
    live: Mapping[str, str] | None
    #: Whether the deployer applies it with force (a changed immutable field replaces it).
    forced: bool


def _spec(body: dict[str, Any]) -> dict[str, Any]:
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def _claim_diffs(old: dict[str, Any], new: dict[str, Any], known: Known) -> list[str]:
    """A claim's spec is immutable except storage growth, volumeAttributesClassName, and
    volumeName / storageClassName going from unset to set while the live claim has none."""
    a, b = _spec(old), _spec(new)
    out: list[str] = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if va == vb or key == "volumeAttributesClassName":
            continue
        if key in FILLED_IN and _unset(key, va):
            out.extend(_filled_in(key, vb, known))
            continue
        if key == "volumeMode" and (va or "Filesystem") == (vb or "Filesystem"):
            continue  # unset is the default, Filesystem
        if key == "resources":
            out.extend(_resources_diffs(va, vb))
            continue
        out.append(f"spec.{key}")
    return out


#: Claim fields the API server may fill in when a manifest leaves them unset; setting one later
#: is allowed only while the live claim has none (a class assigned retroactively to an unclassed
#: claim), and otherwise is an immutable change.
FILLED_IN = ("storageClassName", "volumeName")


def _unset(key: str, value: Any) -> bool:
    """Whether a claim field counts as unset: `storageClassName: ""` is set, to "no class" (the
    API server neither defaults it nor lets it change); an empty `volumeName` is unbound."""
    return value is None if key == "storageClassName" else not value


def _filled_in(key: str, value: Any, known: Known) -> list[str]:
    """Base leaves a FILLED_IN field unset and the candidate sets it to `value`: an immutable
    change when the live claim holds another value. Without a live view it cannot be told;
    under force (where a wrong guess deletes the claim) it is reported, saying how to decide it."""
    if not value:
        return []
    if known.live is not None:
        held = known.live.get(key, "")
        if held and held != value:
            return [f"spec.{key} ({held} live, filled in by the API server -> {value})"]
        return []
    if known.forced:
        return [
            f"spec.{key} (unset in base -> {value}: the API server may have filled in "
            "another at creation; gate check --live compares with the live claim)"
        ]
    return []


def _resources_diffs(a: Any, b: Any) -> list[str]:
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    out: list[str] = []
    if a.get("limits") != b.get("limits"):
        out.append("spec.resources.limits")
    ra, rb = a.get("requests") or {}, b.get("requests") or {}
    for key in sorted(set(ra) | set(rb)):
        if ra.get(key) == rb.get(key):
            continue
        if key == "storage" and key in ra and key in rb:
            try:
                if parse_quantity(rb[key]) >= parse_quantity(ra[key]):
                    continue  # growing a claim is allowed
            except ValueError:
                out.append(
                    f"spec.resources.requests.storage ({ra[key]} -> {rb[key]}: not a quantity)"
                )
                continue
            out.append(f"spec.resources.requests.storage ({ra[key]} -> {rb[key]}: shrink)")
            continue
        out.append(f"spec.resources.requests.{key}")
    return out


_STS_MUTABLE = frozenset(
    {
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
        "revisionHistoryLimit",
    }
)

_PV_NOT_SOURCE = frozenset(
    {
        "capacity",
        "accessModes",
        "claimRef",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "mountOptions",
        "volumeMode",
        "nodeAffinity",
        "volumeAttributesClassName",
    }
)


def _statefulset_diffs(old: dict[str, Any], new: dict[str, Any], _: Known) -> list[str]:
    a, b = _spec(old), _spec(new)
    return [
        f"spec.{k}"
        for k in sorted(set(a) | set(b))
        if k not in _STS_MUTABLE and a.get(k) != b.get(k)
    ]


def _volume_diffs(old: dict[str, Any], new: dict[str, Any], _: Known) -> list[str]:
    """A PersistentVolume's source (csi, nfs, hostPath, ...) is immutable."""
    a, b = _spec(old), _spec(new)
    return [
        f"spec.{k}"
        for k in sorted(set(a) | set(b))
        if k not in _PV_NOT_SOURCE and a.get(k) != b.get(k)
    ]


ImmutableCheck = Callable[[dict[str, Any], dict[str, Any], Known], list[str]]
IMMUTABLE_CHECKS: dict[tuple[str, str], ImmutableCheck] = {
    ("", "PersistentVolumeClaim"): _claim_diffs,
    ("apps", "StatefulSet"): _statefulset_diffs,
    ("", "PersistentVolume"): _volume_diffs,
}
