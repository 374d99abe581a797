"""The fence Lease's own guard: deployers never, non-holders may not weaken a held fence."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from gate.engine.fence import HOLDER_USER, fence_status, parse_lease
from gate.engine.policy import Policy, WebhookSettings
from webhook.decide import decide_admission
from webhook.guards import GUARD_OVERRIDDEN_EVENT, GUARD_TAMPERED_EVENT, decide_guard
from webhook.review import AdmissionRequest, GroupVersionKind, UserInfo

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
DEPLOYER = "system:serviceaccount:flux-system:kustomize-controller"
CI = "system:serviceaccount:ci:fence"
POLICY = Policy(
    webhook=WebhookSettings(
        frozenset({("", "PersistentVolumeClaim")}),
        deployers=(DEPLOYER,),
        break_glass_groups=("sre-oncall",),
        fence=("ci", "fence"),
    )
)


def lease(
    holder: str | None = "abc123",
    renew: str = "2026-12-02T11:58:00.000000Z",
    duration: int | None = 300,
    user: str | None = CI,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"renewTime": renew, "acquireTime": renew}
    if holder:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    meta: dict[str, Any] = {"name": "fence", "namespace": "ci", "uid": "u1"}
    if user:
        meta["annotations"] = {HOLDER_USER: user}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def request(
    op: str,
    old: dict[str, Any],
    new: dict[str, Any] | None = None,
    user: str = CI,
    groups: tuple[str, ...] = (),
    name: str = "fence",
) -> AdmissionRequest:
    return AdmissionRequest(
        uid="r1",
        kind=GroupVersionKind("coordination.k8s.io", "v1", "Lease"),
        resource="leases",
        operation=op,
        name=name,
        namespace="ci",
        user=UserInfo(user, groups),
        old_object=old,
        new_object=new,
    )


def fence_of(obj: dict[str, Any], now: dt.datetime = NOW) -> Any:
    return fence_status(parse_lease(obj), now)


@pytest.mark.parametrize("op", ["UPDATE", "DELETE"])
def test_a_deployer_may_never_touch_the_fence(op: str) -> None:
    old = lease(holder=None)  # even a free one
    new = lease(holder=None, user=None) if op == "UPDATE" else None
    d = decide_guard(request(op, old, new, user=DEPLOYER), POLICY, fence_of(old))
    assert d is not None and not d.allowed
    assert d.event_reason == GUARD_TAMPERED_EVENT
    assert f"by deployer {DEPLOYER} refused" in d.message


@pytest.mark.parametrize(
    ("new", "said"),
    [
        (lease(holder=None), "clears its holderIdentity"),
        (lease(holder="evil"), "hands it to evil"),
        (lease(renew="2026-12-02T11:00:00.000000Z"), "moves renewTime/acquireTime back"),
        (lease(duration=1), "shortens leaseDurationSeconds from 300 to 1"),
        (lease(duration=None), "shortens leaseDurationSeconds from 300 to nothing"),
        (lease(user="eve"), f"rewrites the recorded holder user {CI} to eve"),
        (None, "deletes it"),
    ],
)
def test_someone_else_may_not_weaken_a_held_fence(new: dict[str, Any] | None, said: str) -> None:
    old = lease()
    op = "DELETE" if new is None else "UPDATE"
    d = decide_guard(request(op, old, new, user="eve"), POLICY, fence_of(old))
    assert d is not None and not d.allowed
    assert said in d.message
    assert "held by candidate abc123 (user system:serviceaccount:ci:fence)" in d.message


def test_the_holder_renews_and_releases_and_anyone_may_extend() -> None:
    old = lease()
    fence = fence_of(old)
    renewal = lease(renew="2026-12-02T11:59:00.000000Z")
    for new, user in ((renewal, CI), (lease(holder=None, user=None), CI), (renewal, "eve")):
        op = "UPDATE"
        d = decide_guard(request(op, old, new, user=user), POLICY, fence)
        assert d is not None and d.allowed and not d.event_reason, (new, user)
    assert decide_guard(request("DELETE", old, None, user=CI), POLICY, fence).allowed  # type: ignore[union-attr]


def test_an_expired_or_free_fence_may_be_taken_by_anyone_but_a_deployer() -> None:
    old = lease()
    late = fence_of(old, NOW + dt.timedelta(hours=1))
    taken = lease(holder="def456", renew="2026-12-02T13:00:00.000000Z", user="other")
    d = decide_guard(request("UPDATE", old, taken, user="other"), POLICY, late)
    assert d is not None and d.allowed
    free = lease(holder=None, user=None)
    d = decide_guard(request("DELETE", free, None, user="eve"), POLICY, fence_of(free))
    assert d is not None and d.allowed


def test_an_unrecorded_holder_is_unknown_but_its_renewal_may_record_itself() -> None:
    old = lease(user=None)
    fence = fence_of(old)
    clear = decide_guard(request("UPDATE", old, lease(holder=None, user=None)), POLICY, fence)
    assert clear is not None and not clear.allowed
    assert "a user that was not recorded" in clear.message
    renew = lease(renew="2026-12-02T11:59:00.000000Z", user=CI)
    assert decide_guard(request("UPDATE", old, renew), POLICY, fence).allowed  # type: ignore[union-attr]


def test_a_holder_the_cache_has_not_seen_is_assumed_held() -> None:
    old = lease(holder="new999")
    d = decide_guard(request("DELETE", old, user="eve"), POLICY, fence_of(lease()))
    assert d is not None and not d.allowed


def test_break_glass_may_remove_a_held_fence_with_an_event() -> None:
    old = lease()
    d = decide_guard(
        request("DELETE", old, user="ops", groups=("sre-oncall",)), POLICY, fence_of(old)
    )
    assert d is not None and d.allowed and d.event_reason == GUARD_OVERRIDDEN_EVENT
    assert d.message.startswith("allowed by break-glass group sre-oncall")


def test_other_leases_and_no_fence_are_none() -> None:
    old = lease()
    assert decide_guard(request("DELETE", old, name="other"), POLICY, fence_of(old)) is None
    assert decide_guard(request("DELETE", old, user=DEPLOYER), Policy(), fence_of(old)) is None


def test_decide_admission_answers_guard_tampered_with_an_event() -> None:
    from gate.engine.livestate import LiveState

    old = lease()
    out = decide_admission(
        request("DELETE", old, user=DEPLOYER),
        POLICY,
        LiveState(POLICY.guarded_kinds),
        fence_of(old),
        NOW.date(),
    )
    assert not out.response.allowed
    assert out.response.status is not None and out.response.status.reason == "GUARD_TAMPERED"
    assert out.response.status.code == 403
    assert [(e.reason, e.ref.kind, e.ref.name, e.uid) for e in out.events] == [
        (GUARD_TAMPERED_EVENT, "Lease", "fence", "u1")
    ]
