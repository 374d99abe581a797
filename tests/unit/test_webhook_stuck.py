"""The webhook's stuck-deletion detector: counts per state, one DeletionStuck Event per object,
and a failed pass counted, not fatal. The lister answers from memory as the API server would."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gate.engine.doctor import Thresholds
from gate.engine.policy import Policy
from gate.model.errors import ClusterError
from tests.unit.stuckworld import T0, claim, node, pod
from webhook.events import RecordingSink
from webhook.metrics import _StuckCollector
from webhook.stuck import StuckDetector

AGO = dt.timedelta


class Lister:
    """`get_json` over lists held in memory, by path; `fail` makes every call fail."""

    def __init__(self, lists: dict[str, list[dict[str, Any]]]) -> None:
        self.lists = lists
        self.fail = False

    def get_json(self, path: str, query: list[tuple[str, str]], what: str) -> dict[str, Any]:
        if self.fail:
            raise ClusterError(f"{what}: cannot reach the API server")
        return {"kind": "List", "metadata": {}, "items": self.lists.get(path, [])}


def world() -> Lister:
    return Lister(
        {
            "/api/v1/persistentvolumeclaims": [claim("data", deletion=T0 - AGO(hours=1))],
            "/api/v1/pods": [
                pod("web-0", claims=("data",)),
                pod("stopping", deletion=T0 + AGO(seconds=20), grace=30),
            ],
            "/api/v1/nodes": [node("n1")],
        }
    )


def detector(lister: Lister, sink: RecordingSink) -> StuckDetector:
    return StuckDetector(lister, sink, Policy(), 60, Thresholds(older_than=0), now=lambda: T0)


def test_counts_per_state_and_one_event_per_object_however_many_passes() -> None:
    sink = RecordingSink()
    lister = world()
    d = detector(lister, sink)
    assert d.counts() == {}  # before the first pass: unknown, not "nothing stuck"
    for _ in range(3):
        d.run_once()
    counts = d.counts()
    assert counts[("PersistentVolumeClaim", "WaitingOnPods")] == 1
    assert counts[("Namespace", "WaitingOnNamespaceContent")] == 0  # published as 0
    [event] = sink.events  # the pod still in its grace period gets no Event
    assert event.reason == "DeletionStuck" and event.ref.name == "data" and event.uid == "uid-data"
    assert "WaitingOnPods" in event.message and "web-0 on node n1" in event.message
    assert d.passes == 3

    lister.lists["/api/v1/persistentvolumeclaims"] = []  # the claim is gone
    d.run_once()
    assert d.counts()[("PersistentVolumeClaim", "WaitingOnPods")] == 0


def test_a_failed_pass_is_counted_and_published_and_the_next_one_recovers() -> None:
    lister = world()
    lister.fail = True
    d = detector(lister, RecordingSink())
    assert d.guarded_pass() is False
    lister.fail = False
    assert d.guarded_pass() is True
    families = {m.name: m for m in _StuckCollector(d).collect()}
    [errors] = families["prune_gate_stuck_detector_errors"].samples
    [passes] = families["prune_gate_stuck_detector_passes"].samples
    assert (errors.value, passes.value) == (1, 1)
    stuck = {
        (s.labels["kind"], s.labels["state"]): s.value
        for s in families["prune_gate_stuck_objects"].samples
    }
    assert stuck[("PersistentVolumeClaim", "WaitingOnPods")] == 1
