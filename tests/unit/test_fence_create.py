"""Taking the fence first (issue 32, item 2): who may create the fence Lease, and what it records.

The attack: the fence entry covered UPDATE and DELETE only, so a deployer with Lease create rights
created the fence held for a year in its own name; every deployer prune and CI's `gate fence hold`
then waited on it until a break-glass member found it. Now a deployer may not create it, nobody
records another user as its holder, whoever takes it records themselves, and no fence is written
to hold longer than a day. The real API server calling the webhook: tests/e2e/test_fence.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from gate.engine.fence import MAX_HOLD_SECONDS
from gate.engine.livestate import LiveState
from tests.unit.test_webhook_guards import CI, DEPLOYER, NOW, POLICY, fence_of, lease, request
from webhook.decide import decide_admission
from webhook.guards import GUARD_OVERRIDDEN_EVENT, GUARD_TAMPERED_EVENT, decide_guard
from webhook.review import AdmissionRequest, GroupVersionKind, UserInfo

FREE = fence_of(lease(holder=None, user=None))
A_YEAR = 365 * 24 * 3600
NOW_TEXT = "2026-12-02T12:00:00.000000Z"


def create(
    new: dict[str, Any], user: str, groups: tuple[str, ...] = (), name: str = "fence"
) -> Any:
    """A CREATE of `new` as the API server sends it (no oldObject), decided with no fence yet."""
    req = AdmissionRequest(
        uid="r1",
        kind=GroupVersionKind("coordination.k8s.io", "v1", "Lease"),
        resource="leases",
        operation="CREATE",
        name=name,
        namespace="ci",
        user=UserInfo(user, groups),
        old_object=None,
        new_object=new,
    )
    return decide_guard(req, POLICY, fence_of({}))


def refused(d: Any, said: str) -> None:
    assert d is not None, "not decided: the fence entry does not cover it"
    assert not d.allowed, d.message
    assert d.event_reason == GUARD_TAMPERED_EVENT
    assert said in d.message, d.message


def test_a_deployer_may_not_create_the_fence_held_for_a_year_nor_free() -> None:
    wedge = lease(holder="mine", renew=NOW_TEXT, duration=A_YEAR, user=DEPLOYER)
    refused(create(wedge, DEPLOYER), "CREATE of the speculation fence Lease ci/fence by deployer")
    refused(create(lease(holder=None, user=None), DEPLOYER), "by deployer")


def test_a_create_from_generate_name_is_the_fence_too() -> None:
    wedge = lease(holder="mine", renew=NOW_TEXT, duration=A_YEAR, user=DEPLOYER)
    refused(create(wedge, DEPLOYER, name=""), "by deployer")


def test_nobody_records_another_user_as_the_holder() -> None:
    named_ci = lease(holder="abc", renew=NOW_TEXT, duration=1800, user=CI)
    refused(create(named_ci, "eve"), f"records {CI} as the fence's holder user")
    # Break-glass may clear a fence, not speak for someone else.
    refused(create(named_ci, "ops", ("sre-oncall",)), "nobody records another user")
    free_named = lease(holder=None, user=CI)
    refused(create(free_named, "eve"), "nobody records another user")


def test_whoever_takes_the_fence_records_themselves() -> None:
    unrecorded = lease(holder="abc", renew=NOW_TEXT, duration=1800, user=None)
    refused(create(unrecorded, "eve"), "without recording its own user eve")
    expired = lease(renew="2026-12-02T10:00:00.000000Z")  # held by CI's user, expired at 10:05
    late = fence_of(expired)
    taken_as_ci = lease(holder="def", renew=NOW_TEXT, duration=1800, user=CI)
    d = decide_guard(request("UPDATE", expired, taken_as_ci, user="eve"), POLICY, late)
    refused(d, "without recording its own user eve")
    taken = lease(holder="def", renew=NOW_TEXT, duration=1800, user="eve")
    d = decide_guard(request("UPDATE", expired, taken, user="eve"), POLICY, late)
    assert d is not None and d.allowed, d


def test_no_fence_is_written_to_hold_more_than_a_day() -> None:
    mine = lease(holder="abc", renew=NOW_TEXT, duration=A_YEAR, user="eve")
    refused(create(mine, "eve"), "more than 24h from now")
    future = lease(holder="abc", renew="2099-01-01T00:00:00.000000Z", duration=300, user="eve")
    refused(create(future, "eve"), "a renewTime in the future")
    held = lease()  # CI's, held until 12:03
    extended = lease(duration=A_YEAR)  # "anyone may extend it", but not for a year
    d = decide_guard(request("UPDATE", held, extended, user="eve"), POLICY, fence_of(held))
    refused(d, "more than 24h from now")
    # The longest hold passes, written by a clock a few minutes ahead of the webhook's too.
    for renew in (NOW_TEXT, "2026-12-02T12:04:00.000000Z"):
        longest = lease(holder="abc", renew=renew, duration=MAX_HOLD_SECONDS, user="eve")
        d = create(longest, "eve")
        assert d is not None and d.allowed, d.message
    ahead = lease("abc", "2026-12-02T12:06:00.000000Z", MAX_HOLD_SECONDS, user="eve")
    refused(create(ahead, "eve"), "more than 24h from now")


@pytest.mark.parametrize(
    ("new", "user"),
    [
        (lease(holder="abc", renew=NOW_TEXT, duration=1800, user=CI), CI),  # gate fence hold
        (lease(holder=None, user=None), "system:serviceaccount:prune-gate:helm"),  # the chart
    ],
)
def test_ci_holding_it_and_the_chart_creating_it_free_pass(new: dict[str, Any], user: str) -> None:
    d = create(new, user)
    assert d is not None and d.allowed and not d.event_reason, d.message


def test_break_glass_clears_a_held_fence_leaving_the_holders_name() -> None:
    held = lease()
    cleared = lease(holder=None)  # the recorded user left as it was
    d = decide_guard(
        request("UPDATE", held, cleared, user="ops", groups=("sre-oncall",)), POLICY, fence_of(held)
    )
    assert d is not None and d.allowed and d.event_reason == GUARD_OVERRIDDEN_EVENT


def test_the_webhook_answers_a_deployer_create_with_403() -> None:
    wedge = lease(holder="mine", renew=NOW_TEXT, duration=A_YEAR, user=DEPLOYER)
    req = AdmissionRequest(
        uid="r1",
        kind=GroupVersionKind("coordination.k8s.io", "v1", "Lease"),
        resource="leases",
        operation="CREATE",
        name="fence",
        namespace="ci",
        user=UserInfo(DEPLOYER, ()),
        old_object=None,
        new_object=wedge,
    )
    out = decide_admission(req, POLICY, LiveState(POLICY.guarded_kinds), FREE, NOW.date())
    status = out.response.status
    assert not out.response.allowed and status is not None
    assert (status.code, status.reason) == (403, "GUARD_TAMPERED")
    assert [e.reason for e in out.events] == [GUARD_TAMPERED_EVENT]


def test_gate_fence_hold_will_not_ask_for_more_than_a_day(tmp_path: Any) -> None:
    from tests.unit.test_cli import gate

    result = gate("fence", "hold", "--holder", "x", "--duration", "25h", "--lease", "a/b",
                  cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert "a fence holds at most 24h without renewal" in result.stderr
