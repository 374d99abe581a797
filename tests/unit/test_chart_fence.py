"""The chart creates the speculation fence Lease, unheld (issue 32, item 2).

Rendered by the real helm (tests/unit/test_chart.py); installed, upgraded while CI holds the
fence, and uninstalled against a real API server in tests/e2e/test_chart_fence.py.
"""

from __future__ import annotations

from gate.engine.fence import HOLDER_USER, FenceState, fence_status, parse_lease
from tests.unit.test_chart import RELEASE, one, render
from tests.unit.test_fence_create import create
from tests.unit.test_webhook_guards import NOW

FENCE = {"policy": {"webhook": {"fence": {"namespace": "ci", "name": "speculation-fence"}}}}


def test_no_fence_no_lease() -> None:
    assert not [o for o in render() if o["kind"] == "Lease"]


def test_the_fence_lease_is_rendered_unheld_where_the_policy_says() -> None:
    lease = one(render(FENCE), "Lease")
    assert lease["apiVersion"] == "coordination.k8s.io/v1"
    assert (lease["metadata"]["namespace"], lease["metadata"]["name"]) == (
        "ci",
        "speculation-fence",
    )
    assert lease["spec"] == {}  # nothing for an upgrade to write over CI's hold
    assert fence_status(parse_lease(lease), NOW).state is FenceState.FREE
    assert HOLDER_USER not in (lease["metadata"].get("annotations") or {})
    assert lease["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_its_labels_do_not_change_with_the_chart_version() -> None:
    """A label that changes on every chart version would make each upgrade patch the fence."""
    labels = one(render(FENCE), "Lease")["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/name": "prune-gate",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/component": "speculation-fence",
        "app.kubernetes.io/part-of": "prune-gate",
    }


def test_the_webhook_lets_a_non_deployer_create_the_rendered_lease() -> None:
    """What Helm sends (the rendered Lease, as a person's or CI's install): no holder, no user."""
    lease = one(
        render({"policy": {"webhook": {"fence": {"namespace": "ci", "name": "fence"}}}}), "Lease"
    )
    d = create(lease, "system:serviceaccount:kube-system:helm")
    assert d is not None and d.allowed and not d.event_reason, d.message
