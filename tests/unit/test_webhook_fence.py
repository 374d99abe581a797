"""The speculation fence: Lease parsing, held / expired / free at a given instant, and its rule."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from gate.engine.context import Context
from gate.engine.fence import FenceState, fence_status, parse_lease
from gate.engine.plan import Action, Change
from gate.engine.policy import Policy
from gate.engine.rules import World
from gate.engine.rules.guard import check_speculation_fence
from gate.model.findings import Code, Severity
from gate.model.objects import Inventory, Manifest
from gate.model.refs import ObjectRef

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def lease(holder: str | None = "abc123", renew: str | None = "2026-12-02T11:58:00.5Z") -> dict:  # type: ignore[type-arg]
    spec: dict[str, object] = {"leaseDurationSeconds": 300}
    if holder:
        spec["holderIdentity"] = holder
    if renew:
        spec["renewTime"] = renew
    return {"metadata": {"name": "fence", "namespace": "ci"}, "spec": spec}


def test_held_until_renew_plus_duration() -> None:
    status = fence_status(parse_lease(lease()), NOW)
    assert status.state is FenceState.HELD
    assert status.holder == "abc123"
    assert status.expires == dt.datetime(2026, 12, 2, 12, 3, 0, 500000, tzinfo=dt.UTC)
    later = fence_status(parse_lease(lease()), NOW + dt.timedelta(minutes=4))
    assert later.state is FenceState.EXPIRED


def test_released_or_missing_is_free_and_unknown_renewal_is_expired() -> None:
    assert fence_status(None, NOW).state is FenceState.FREE
    assert fence_status(parse_lease(lease(holder=None)), NOW).state is FenceState.FREE
    assert fence_status(parse_lease(lease(renew=None)), NOW).state is FenceState.EXPIRED
    assert fence_status(parse_lease(lease(renew="garbage")), NOW).state is FenceState.EXPIRED


def _change(kind: str = "PersistentVolumeClaim") -> tuple[Change, World]:
    ref = ObjectRef("", kind, "app", "data")
    m = Manifest(ref, "v1", {"metadata": {"name": "data", "namespace": "app"}})
    world = World(Inventory(), Inventory(), Context.ADMISSION, Policy())
    return Change(ref, Action.DELETE, m, None, "DELETE by flux"), world


def fenced(world: World, at: dt.datetime) -> World:
    """The world as the webhook builds it: with the fence it read at `at`."""
    return replace(world, fence=fence_status(parse_lease(lease()), at))


def test_rule_blocks_on_held_warns_on_expired_ignores_unguarded() -> None:
    change, world = _change()
    held = list(check_speculation_fence(change, fenced(world, NOW)))
    assert [f.code for f in held] == [Code.SPECULATION_FENCE]
    assert "abc123" in held[0].message
    assert held[0].suggested is None
    late = NOW + dt.timedelta(hours=1)
    expired = list(check_speculation_fence(change, fenced(world, late)))
    assert expired[0].suggested is Severity.WARN
    assert "expired" in expired[0].message
    other, world = _change("ConfigMap")
    assert not list(check_speculation_fence(other, fenced(world, NOW)))
