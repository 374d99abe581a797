"""`gate heal`'s plans: which actions, in which order, with which preconditions and Events."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gate.engine.doctor import Doctor, State, Thresholds
from gate.engine.heal import (
    ActionKind,
    Healer,
    HealOptions,
    HealPlan,
    Reason,
)
from gate.engine.ledger import HEAL_FIELD_MANAGER, RESCUED_CLAIM_UID, build_ledger
from gate.engine.marks import MarkReader
from gate.engine.policy import DisposableClaims
from tests.unit.stuckworld import T0, claim, node, owner, pod, volume

AGO = dt.timedelta
OLD = T0 - AGO(hours=2)
UNREACHABLE = ("node.kubernetes.io/unreachable",)
TEN_MINUTES, FIVE_MINUTES = AGO(minutes=10), AGO(minutes=5)


World = dict[str, Any]
NO_OPTIONS = HealOptions()
DEFAULT = Thresholds()


def plan(options: HealOptions = NO_OPTIONS, th: Thresholds = DEFAULT, **objects: Any) -> HealPlan:
    doctor = Doctor(build_ledger(**objects), T0, th)
    return Healer(doctor, options).plan(doctor.stuck())


def pinned(annotations: dict[str, str] | None = None, policy: str = "Delete") -> World:
    return {
        "claims": [claim("data", volume="pv-1", deletion=OLD, annotations=annotations)],
        "volumes": [volume("pv-1", "data", policy=policy)],
        "pods": [
            pod("web-0", claims=("data",), owners=(owner("StatefulSet", "web"),)),
            pod("gone-0", claims=("data",), deletion=T0 - AGO(seconds=10), grace=30),
        ],
        "nodes": [node("n1")],
    }


def test_a_disposable_claim_is_released_by_deleting_the_live_pods_that_pin_it() -> None:
    p = plan(**pinned({"prune-gate.io/data": "disposable"}))
    [action] = p.actions  # the Terminating pod is not deleted again
    assert action.kind is ActionKind.DELETE_POD and action.target.name == "web-0"
    assert action.uid == "uid-web-0" and action.requires is None
    assert action.event.reason == Reason.CLAIM_RELEASED and action.event.ref.name == "data"
    assert "StatefulSet web recreates it" in action.event.message


def test_a_claim_whose_data_is_not_disposable_is_left_with_the_way_to_rescue_it() -> None:
    p = plan(**pinned())
    assert p.actions == ()
    skip = next(s for s in p.skipped if s.ref.name == "data")
    assert skip.state is State.WAITING_ON_PODS and "--rescue" in skip.why


def by_name(name: str) -> MarkReader:
    """The policy's `heal.disposableClaims` naming claim shop/NAME."""
    return MarkReader((DisposableClaims("e2e", "shop", name),))


def test_the_policy_can_say_a_claim_is_disposable() -> None:
    p = plan(HealOptions(marks=by_name("data")), **pinned())
    assert [a.kind for a in p.actions] == [ActionKind.DELETE_POD]
    assert "heal.disposableClaims names it by namespace and name" in p.actions[0].event.message


def test_rescue_retains_the_volume_first_and_the_pod_deletion_requires_it() -> None:
    p = plan(HealOptions(rescue=True), **pinned())
    retain, delete = p.actions
    assert retain.kind is ActionKind.RETAIN_VOLUME and retain.target.name == "pv-1"
    ops = [(o["op"], o["path"]) for o in retain.patch]
    assert ops[:3] == [
        ("test", "/metadata/uid"),
        ("test", "/spec/persistentVolumeReclaimPolicy"),
        ("replace", "/spec/persistentVolumeReclaimPolicy"),
    ]
    assert retain.patch[-1]["value"] == {
        RESCUED_CLAIM_UID: "uid-data",
        "prune-gate.io/rescued-reclaim-policy": "Delete",
    }
    assert retain.event.reason == Reason.VOLUME_RESCUED
    assert delete.kind is ActionKind.DELETE_POD and delete.requires == 0


def test_rescue_of_a_retained_volume_only_releases_the_claim() -> None:
    p = plan(HealOptions(rescue=True), **pinned(policy="Retain"))
    assert [a.kind for a in p.actions] == [ActionKind.DELETE_POD]


def _released(
    annotations: dict[str, str] | None,
    claims: tuple[dict[str, Any], ...] = (),
    marked_by: str = HEAL_FIELD_MANAGER,
) -> World:
    """A Released, retained volume; its annotations written by `marked_by` (managedFields)."""
    pv = volume(
        "pv-1",
        "data",
        claim_uid="uid-old",
        phase="Released",
        policy="Retain",
        annotations=annotations,
    )
    pv["metadata"]["managedFields"] = [
        {
            "manager": marked_by,
            "operation": "Update",
            "time": "2026-12-04T10:00:00Z",
            "fieldsV1": {
                "f:metadata": {"f:annotations": {f"f:{k}": {} for k in annotations or {}}}
            },
        }
    ]
    return {"volumes": [pv], "claims": list(claims)}


def test_rescue_reserves_a_volume_it_retained_once_the_claim_is_gone() -> None:
    p = plan(HealOptions(rescue=True), **_released({RESCUED_CLAIM_UID: "uid-old"}))
    [reserve] = p.actions
    assert reserve.kind is ActionKind.RESERVE_VOLUME
    assert [(o["op"], o["path"]) for o in reserve.patch] == [
        ("test", "/metadata/uid"),
        ("test", "/spec/claimRef/uid"),
        ("remove", "/spec/claimRef/uid"),
        ("remove", "/spec/claimRef/resourceVersion"),
    ]
    assert reserve.patch[1]["value"] == "uid-old"
    assert "volumeName: pv-1, storageClassName: standard" in reserve.event.message
    # a recreated claim (another uid) does not stop the reservation
    recreated = claim("data", uid="uid-new")
    assert (
        len(
            plan(
                HealOptions(rescue=True), **_released({RESCUED_CLAIM_UID: "uid-old"}, (recreated,))
            ).actions
        )
        == 1
    )


def test_rescue_never_reserves_a_volume_whose_mark_a_deployer_wrote() -> None:
    """A manifest (a candidate commit) can carry the rescue mark; only heal's own write counts."""
    forged = _released({RESCUED_CLAIM_UID: "uid-old"}, marked_by="kustomize-controller")
    assert plan(HealOptions(rescue=True), **forged).actions == ()


def test_rescue_never_touches_a_volume_it_did_not_retain() -> None:
    assert plan(HealOptions(rescue=True), **_released(None)).actions == ()
    assert (
        plan(HealOptions(rescue=True), **_released({RESCUED_CLAIM_UID: "uid-other"})).actions == ()
    )
    assert plan(HealOptions(), **_released({RESCUED_CLAIM_UID: "uid-old"})).actions == ()


def _stranded(
    ready: str = "Unknown",
    down: dt.timedelta = TEN_MINUTES,
    past: dt.timedelta = FIVE_MINUTES,
    finalizers: tuple[str, ...] = (),
    taints: tuple[str, ...] = UNREACHABLE,
) -> World:
    return {
        "pods": [pod("web-0", deletion=T0 - past, grace=30, finalizers=finalizers)],
        "nodes": [node("n1", ready=ready, since=T0 - down, taints=taints)],
    }


def test_a_pod_on_a_dead_node_is_force_deleted_with_the_evidence_in_its_event() -> None:
    th = Thresholds(older_than=0)
    [force] = plan(th=th, **_stranded()).actions
    assert force.kind is ActionKind.FORCE_DELETE_POD and force.uid == "uid-web-0"
    assert force.resource_version == "7"
    assert force.event.reason == Reason.POD_FORCE_DELETED
    msg = force.event.message
    assert (
        "Ready=Unknown" in msg
        and "node.kubernetes.io/unreachable" in msg
        and "no finalizers" in msg
    )


def test_a_pod_is_not_force_deleted_when_any_evidence_is_missing() -> None:
    th = Thresholds(older_than=0)
    for objects in (
        _stranded(down=AGO(minutes=4)),
        _stranded(past=AGO(seconds=30)),
        _stranded(finalizers=("example.com/x",)),
        _stranded(taints=("node.kubernetes.io/not-ready",), ready="False"),
        _stranded(ready="True", down=AGO(hours=5)),
    ):
        p = plan(th=th, **objects)
        assert p.actions == (), objects
        assert len(p.skipped) == 1


def test_watch_mode_does_only_what_the_policy_enables() -> None:
    off = HealOptions(release=False, force=False, off_because="heal.watch")
    p = plan(off, **pinned({"prune-gate.io/data": "disposable"}))
    assert p.actions == ()
    assert any("heal.watch.releaseDisposableClaims" in s.why for s in p.skipped)
    p = plan(off, th=Thresholds(older_than=0), **_stranded())
    assert p.actions == ()
    assert "heal.watch.forceDeletePodsOnDeadNodes" in p.skipped[0].why


def test_unattended_heal_takes_the_policys_word_not_the_claims_own_mark() -> None:
    """Whoever deploys a claim writes its annotations, a speculative deploy included: `--watch`
    releases only what `heal.disposableClaims` names."""
    watch = HealOptions(unattended=True)
    p = plan(watch, **pinned({"prune-gate.io/data": "disposable"}))
    assert p.actions == ()
    assert any("heal.disposableClaims" in s.why and "speculative" in s.why for s in p.skipped)
    listed = HealOptions(unattended=True, marks=by_name("data"))
    assert [a.kind for a in plan(listed, **pinned()).actions] == [ActionKind.DELETE_POD]
    # A person running heal decides for themselves.
    assert len(plan(HealOptions(), **pinned({"prune-gate.io/data": "disposable"})).actions) == 1
