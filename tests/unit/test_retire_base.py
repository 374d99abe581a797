"""`gate retire status` with the base branch agrees with `gate check --live` on stage 1 (attack 6):
a retire mark on the live claim that the merged branch does not carry does not count."""

from __future__ import annotations

import textwrap
from typing import Any

from gate.engine.check import build_sides
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.engine.retire import Stage, render_json, render_text, retire_statuses
from gate.model.objects import Inventory
from gate.sources.manifests import parse_stream
from tests.unit.helpers import claim

ANN = "prune-gate.io/retire"


def live(**annotations: str) -> LiveState:
    state = LiveState(Policy().guarded_kinds)
    meta: dict[str, Any] = {"name": "data", "namespace": "app", "annotations": annotations}
    state.upsert({"metadata": meta, "spec": {}}, "v1", "PersistentVolumeClaim")
    return state


def base_of(text: str) -> Inventory:
    base, _ = build_sides(parse_stream(textwrap.dedent(text), "base.yaml"), [], "default")
    return base


def status(state: LiveState, base: Inventory | None) -> Any:
    (only,) = retire_statuses(state.objects.values(), state, ANN, name="data", base=base)
    return only


def test_live_mark_without_base_mark_is_unmerged() -> None:
    s = status(live(**{ANN: "speculative"}), base_of(claim()))
    assert s.stage is Stage.UNMERGED and not s.safe_to_remove
    assert "marked live but not on the base branch" in render_text([s], ANN)
    assert "kubectl annotate pvc -n app data prune-gate.io/retire-" in s.next_step(ANN)
    assert '"stage": "unmerged"' in render_json([s], ANN)
    assert status(live(**{ANN: "x"}), Inventory()).stage is Stage.UNMERGED  # not declared at all


def test_mark_on_base_and_live_counts() -> None:
    assert status(live(**{ANN: "moved"}), base_of(claim(retire="moved"))).stage is Stage.READY
    assert status(live(**{ANN: "moved"}), None).stage is Stage.READY  # no base given: live only


def test_base_mark_not_yet_live_is_not_marked() -> None:
    assert status(live(), base_of(claim(retire="moved"))).stage is Stage.NOT_MARKED
