"""`gate doctor`'s diagnoses, over raw API objects and a clock the test sets."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from gate.engine.doctor import Doctor, State, Thresholds, finalizer_owner, force_delete_missing
from gate.engine.ledger import build_ledger
from gate.model.refs import ObjectRef
from tests.unit.stuckworld import T0, claim, namespace, node, owner, pod, volume

NOW = T0
AGO = dt.timedelta


DEFAULT = Thresholds()
World = list[dict[str, Any]]


def doctor(
    *,
    now: dt.datetime = NOW,
    th: Thresholds = DEFAULT,
    declared: Callable[[ObjectRef], str | None] | None = None,
    **objects: World,
) -> Doctor:
    ledger = build_ledger(**objects)
    return Doctor(ledger, now, th, declared or (lambda ref: None))


def claim_ref(name: str, ns: str = "shop") -> ObjectRef:
    return ObjectRef("", "PersistentVolumeClaim", ns, name)


def test_the_incident_claim_names_its_pod_node_age_volume_and_that_git_still_declares_it() -> None:
    d = doctor(
        claims=[claim("data", volume="pv-1", deletion=NOW - AGO(hours=3))],
        volumes=[volume("pv-1", "data")],
        pods=[pod("web-0", claims=("data",), owners=(owner("StatefulSet", "web"),))],
        nodes=[node("n1")],
        declared=lambda ref: "apps/shop/data.yaml:1" if ref == claim_ref("data") else None,
    )
    [diag] = d.stuck("shop")
    assert diag.state is State.WAITING_ON_PODS
    assert "web-0 on node n1" in diag.reason
    [p] = diag.pods
    assert (p.name, p.node, p.phase, p.owner, p.node_ready) == (
        "web-0",
        "n1",
        "Running",
        "StatefulSet web",
        "True",
    )
    assert "since 2026-12-04T10:00:00Z (2h)" in p.describe(NOW)
    text = "\n".join(diag.evidence)
    assert "PersistentVolume pv-1" in text and "reclaimPolicy Delete" in text
    assert "git still declares it (apps/shop/data.yaml:1)" in text and "empty volume" in text
    assert any("gate heal --rescue --apply -n shop pvc/data" in f for f in diag.fixes)
    assert diag.declared == "apps/shop/data.yaml:1"
    assert diag.requested == NOW - AGO(hours=3)


@pytest.mark.parametrize("phase", ["Running", "Succeeded", "Failed", "Pending"])
def test_a_scheduled_pod_pins_its_claim_in_any_phase(phase: str) -> None:
    d = doctor(
        claims=[claim("data", deletion=NOW - AGO(hours=1))],
        pods=[pod("job-1", claims=("data",), phase=phase)],
        nodes=[node("n1")],
    )
    [diag] = d.stuck("shop")
    assert diag.state is State.WAITING_ON_PODS and diag.pods[0].phase == phase


def test_an_unscheduled_pod_does_not_pin_and_pvc_protection_left_on_is_controller_gone() -> None:
    d = doctor(
        claims=[claim("data", deletion=NOW - AGO(hours=1))],
        pods=[pod("web-0", node="", claims=("data",), phase="Pending")],
        nodes=[node("n1")],
    )
    [diag] = d.stuck("shop")
    assert diag.state is State.CONTROLLER_GONE
    assert "no pod uses it" in diag.reason and "kube-controller-manager" in diag.fixes[0]


def test_a_terminating_pinning_pod_pins_and_gets_its_own_diagnosis_under_the_claim() -> None:
    d = doctor(
        claims=[claim("data", deletion=NOW - AGO(hours=1))],
        pods=[pod("web-0", claims=("data",), deletion=NOW - AGO(minutes=50), grace=30)],
        nodes=[
            node(
                "n1",
                ready="Unknown",
                since=NOW - AGO(hours=1),
                taints=("node.kubernetes.io/unreachable",),
            )
        ],
    )
    [diag] = d.stuck("shop")  # the pod is shown under the claim, not again on its own
    assert diag.state is State.WAITING_ON_PODS and diag.pods[0].terminating
    [child] = diag.children
    assert child.state is State.NODE_UNREACHABLE and child.ref.name == "web-0"
    assert any("safe to force-delete" in e for e in child.evidence)


def test_generic_ephemeral_claim_pins_only_its_own_pod_until_the_pod_is_shut_down() -> None:
    owned = claim(
        "web-0-scratch", deletion=NOW - AGO(hours=1), owners=(owner("Pod", "web-0", "v1"),)
    )
    running = pod("web-0", ephemeral=("scratch",))
    assert (
        doctor(claims=[owned], pods=[running], nodes=[node()]).stuck()[0].state
        is State.WAITING_ON_PODS
    )
    shut = pod("web-0", ephemeral=("scratch",), deletion=NOW - AGO(minutes=5), grace=0)
    states = {
        d.ref.kind: d.state for d in doctor(claims=[owned], pods=[shut], nodes=[node()]).stuck()
    }
    assert states["PersistentVolumeClaim"] is State.CONTROLLER_GONE
    stranger = claim("web-0-scratch", deletion=NOW - AGO(hours=1))  # same name, not the pod's
    [diag] = doctor(claims=[stranger], pods=[running], nodes=[node()]).stuck()
    assert diag.state is State.CONTROLLER_GONE


def test_another_finalizer_is_waited_on_with_its_owner_and_no_finalizer_is_unknown() -> None:
    other = claim("data", deletion=NOW - AGO(hours=1), finalizers=("example.com/backup",))
    [diag] = doctor(claims=[other]).stuck()
    assert diag.state is State.WAITING_ON_FINALIZER
    assert any("example.com" in e for e in diag.evidence)
    assert any("never strips" in f for f in diag.fixes)
    bare = claim("data", deletion=NOW - AGO(hours=1), finalizers=())
    [diag] = doctor(claims=[bare]).stuck()
    assert diag.state is State.UNKNOWN and "cannot tell" in diag.reason


def test_finalizer_owners_are_named() -> None:
    assert "pvc-protection" in finalizer_owner("kubernetes.io/pvc-protection")
    assert "Argo CD" in finalizer_owner("resources-finalizer.argocd.argoproj.io/background")
    assert "'example.com'" in finalizer_owner("example.com/thing")


def test_a_bound_volume_waits_on_its_claim_and_an_unbound_protected_one_is_controller_gone() -> (
    None
):
    bound = volume("pv-1", "data", deletion=NOW - AGO(hours=1))
    d = doctor(volumes=[bound], claims=[claim("data", volume="pv-1", deletion=NOW - AGO(hours=1))])
    [diag] = d.stuck()
    assert diag.state is State.WAITING_ON_CLAIM and "shop/data" in diag.reason
    assert diag.children[0].ref == claim_ref("data")
    released = volume("pv-2", "gone", phase="Released", deletion=NOW - AGO(hours=1))
    [diag] = doctor(volumes=[released]).stuck()
    assert diag.state is State.CONTROLLER_GONE


def _pod_state(node_obj: dict[str, Any] | None, deadline_ago: dt.timedelta, **kw: Any) -> State:
    d = doctor(
        pods=[pod("web-0", deletion=NOW - deadline_ago, grace=30, **kw)],
        nodes=[node_obj] if node_obj else [],
        th=Thresholds(older_than=0),
    )
    [diag] = d.stuck()
    state: State = diag.state
    return state


def test_pod_states_by_node_and_deadline() -> None:
    dead = node(
        "n1", ready="Unknown", since=NOW - AGO(hours=1), taints=("node.kubernetes.io/unreachable",)
    )
    assert _pod_state(node("n1"), AGO(seconds=10)) is State.SHUTTING_DOWN
    assert _pod_state(node("n1"), AGO(minutes=10)) is State.WAITING_ON_KUBELET
    assert _pod_state(dead, AGO(minutes=10)) is State.NODE_UNREACHABLE
    assert _pod_state(None, AGO(minutes=10)) is State.NODE_GONE
    assert _pod_state(node("n1"), AGO(minutes=10), node="") is State.UNKNOWN


def test_a_shut_down_pod_held_by_a_finalizer_waits_on_it() -> None:
    d = doctor(
        pods=[
            pod("web-0", deletion=NOW - AGO(minutes=10), grace=0, finalizers=("example.com/drain",))
        ],
        nodes=[node("n1")],
    )
    [diag] = d.stuck()
    assert diag.state is State.WAITING_ON_FINALIZER


def test_a_namespace_stuck_on_a_claim_names_the_claim_and_its_pinning_pod_in_one_answer() -> None:
    d = doctor(
        namespaces=[
            namespace(
                "shop",
                deletion=NOW - AGO(hours=1),
                conditions=(
                    (
                        "NamespaceContentRemaining",
                        "Some resources are remaining: persistentvolumeclaims. has 1 resource "
                        "instances",
                    ),
                ),
            )
        ],
        claims=[claim("data", deletion=NOW - AGO(hours=1))],
        pods=[pod("web-0", claims=("data",))],
        nodes=[node("n1")],
    )
    [diag] = d.stuck()  # the claim is under the namespace, not again on its own
    assert diag.state is State.WAITING_ON_NAMESPACE_CONTENT
    assert "PersistentVolumeClaim data" in diag.reason and "web-0 on node n1" in diag.reason
    assert diag.children[0].state is State.WAITING_ON_PODS
    assert any("persistentvolumeclaims" in e for e in diag.evidence)


def test_an_empty_namespace_still_terminating_is_controller_gone() -> None:
    [diag] = doctor(namespaces=[namespace("shop", deletion=NOW - AGO(hours=1))]).stuck()
    assert diag.state is State.CONTROLLER_GONE


def test_only_deletions_older_than_the_threshold_are_reported() -> None:
    objects: dict[str, Any] = {
        "claims": [claim("data", deletion=NOW - AGO(seconds=90))],
        "pods": [pod("w", claims=("data",))],
        "nodes": [node()],
    }
    assert doctor(th=Thresholds(older_than=120), **objects).stuck() == []
    assert len(doctor(th=Thresholds(older_than=90), **objects).stuck()) == 1


def test_every_state_of_the_vocabulary_is_reached() -> None:
    dead = node(
        "dead",
        ready="Unknown",
        since=NOW - AGO(hours=1),
        taints=("node.kubernetes.io/unreachable",),
    )
    old = NOW - AGO(hours=1)
    d = doctor(
        namespaces=[namespace("gone", deletion=old), namespace("shop", deletion=old)],
        claims=[
            claim("pinned", deletion=old),
            claim("free", namespace="a", deletion=old),
            claim("held", namespace="a", deletion=old, finalizers=("example.com/x",)),
            claim("bare", namespace="a", deletion=old, finalizers=()),
        ],
        volumes=[volume("pv-1", "held", namespace="a", deletion=old)],
        pods=[
            pod("p", claims=("pinned",)),
            pod("stopping", namespace="b", deletion=NOW - AGO(seconds=5), grace=30),
            pod("late", namespace="b", deletion=NOW - AGO(minutes=30), grace=30),
            pod("cut-off", namespace="b", node="dead", deletion=NOW - AGO(minutes=30), grace=30),
            pod("orphan", namespace="b", node="vanished", deletion=NOW - AGO(minutes=30), grace=30),
        ],
        nodes=[node("n1"), dead],
        th=Thresholds(older_than=0),
    )
    reached = {diag.state for root in d.stuck() for diag in root.walk()}
    assert reached == set(State)


@pytest.mark.parametrize(
    ("deadline_ago", "down_for", "taints", "finalizers", "ready", "safe"),
    [
        (
            AGO(seconds=60),
            AGO(seconds=300),
            ("node.kubernetes.io/unreachable",),
            (),
            "Unknown",
            True,
        ),
        (
            AGO(seconds=59),
            AGO(seconds=300),
            ("node.kubernetes.io/unreachable",),
            (),
            "Unknown",
            False,
        ),
        (
            AGO(seconds=60),
            AGO(seconds=299),
            ("node.kubernetes.io/unreachable",),
            (),
            "Unknown",
            False,
        ),
        (AGO(seconds=60), AGO(seconds=300), ("node.kubernetes.io/not-ready",), (), "False", False),
        (
            AGO(seconds=60),
            AGO(seconds=300),
            ("node.kubernetes.io/unreachable",),
            ("x/y",),
            "Unknown",
            False,
        ),
        (AGO(hours=9), AGO(hours=9), ("node.kubernetes.io/unreachable",), (), "True", False),
    ],
)
def test_force_delete_needs_every_piece_of_evidence_and_not_a_second_less(
    deadline_ago: dt.timedelta,
    down_for: dt.timedelta,
    taints: tuple[str, ...],
    finalizers: tuple[str, ...],
    ready: str,
    safe: bool,
) -> None:
    th = Thresholds(deadline_slack=60, node_dead_after=300)
    ledger = build_ledger(
        pods=[pod("web-0", deletion=NOW - deadline_ago, grace=30, finalizers=finalizers)],
        nodes=[node("n1", ready=ready, since=NOW - down_for, taints=taints)],
    )
    p = ledger.pods[("shop", "web-0")]
    missing = force_delete_missing(p, ledger.nodes["n1"], NOW, th)
    assert (missing == []) is safe, missing


def test_advancing_the_clock_through_the_thresholds_makes_a_pod_safe_only_at_the_last_one() -> None:
    """Node goes Unknown at T0, pod deadline at T0 + 100s; slack 60s, dead after 300s."""
    th = Thresholds(deadline_slack=60, node_dead_after=300)
    ledger = build_ledger(
        pods=[pod("web-0", deletion=T0 + AGO(seconds=100), grace=30)],
        nodes=[node("n1", ready="Unknown", since=T0, taints=("node.kubernetes.io/unreachable",))],
    )
    p, n = ledger.pods[("shop", "web-0")], ledger.nodes["n1"]
    for second in range(0, 400, 1):
        safe = not force_delete_missing(p, n, T0 + AGO(seconds=second), th)
        assert safe is (second >= 300), second


def test_every_state_has_a_meaning_and_the_json_report_carries_it() -> None:
    from gate.engine.doctor import MEANING
    from gate.report.doctor import doctor_json

    assert set(MEANING) == set(State)
    bare = claim("data", deletion=NOW - AGO(hours=1), finalizers=())
    [entry] = json.loads(doctor_json(doctor(claims=[bare]).stuck(), NOW))["stuck"]
    assert entry["meaning"] == MEANING[State.UNKNOWN]
