"""The fence Lease's own webhook entry: the chart and `--register` ask the same thing."""

from __future__ import annotations

from typing import Any

from gate.model.webhooks import FENCE_WEBHOOK_NAME
from gate.sources.policyfile import policy_from_dict
from tests.unit.test_chart import NAMESPACE, one, render
from webhook.register import build_configuration, fence_webhook, with_fence

FENCE = {"webhook": {"fence": {"namespace": NAMESPACE, "name": "speculation-fence"}}}


def test_no_fence_no_entry() -> None:
    policy = policy_from_dict({})
    assert fence_webhook(policy, {}) is None
    config = build_configuration("pg", "https://x/validate", b"ca", policy)
    assert with_fence(config, policy) == config
    hooks = one(render(), "ValidatingWebhookConfiguration")["webhooks"]
    assert [h["name"] for h in hooks] == ["prune-gate.prune-gate.io"]


def test_fence_entry_is_narrowed_to_the_lease_and_reaches_its_namespace() -> None:
    policy = policy_from_dict(FENCE)
    built = build_configuration("pg", "https://x/validate", b"ca", policy, own_namespace=NAMESPACE)
    config = with_fence(built, policy)
    main, fence = config["webhooks"]
    assert fence["clientConfig"] == main["clientConfig"]
    assert fence["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["leases"],
            "scope": "Namespaced",
        }
    ]
    # The main entry leaves the release namespace alone; this one selects exactly it.
    assert NAMESPACE in main["namespaceSelector"]["matchExpressions"][0]["values"]
    assert fence["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    assert fence["matchConditions"] == [
        {
            "name": "fence-lease",
            "expression": "request.name == 'speculation-fence' || "
            "(object != null && object.metadata.name == 'speculation-fence') || "
            "(oldObject != null && oldObject.metadata.name == 'speculation-fence')",
        }
    ]


def test_chart_renders_the_same_fence_entry_as_register() -> None:
    hooks: list[dict[str, Any]] = one(render({"policy": FENCE}), "ValidatingWebhookConfiguration")[
        "webhooks"
    ]
    assert [h["name"] for h in hooks] == ["prune-gate.prune-gate.io", FENCE_WEBHOOK_NAME]
    # Rendered disarmed, like every entry of the chart: the webhook arms it (webhook.arm).
    expected = fence_webhook(policy_from_dict(FENCE), hooks[1]["clientConfig"], "Ignore")
    assert hooks[1] == expected
