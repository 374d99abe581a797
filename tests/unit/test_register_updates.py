"""Registration of the UPDATE rules: the chart and `gate webhook serve --register` agree, and the
matchConditions let through exactly the UPDATEs the webhook judges (checked by the real API
server in tests/e2e/test_bypasses.py, which registers them)."""

from __future__ import annotations

from gate.policy import policy_from_dict
from webhook.register import match_conditions, rules_for

from .test_chart import render, webhook_of


def test_update_rules_cover_guarded_kinds_and_statefulsets() -> None:
    rules = rules_for(policy_from_dict({"webhook": {"guardedKinds": ["PersistentVolumeClaim"]}}))
    assert rules[0]["operations"] == ["CREATE", "DELETE", "UPDATE"]
    assert rules[-1] == {
        "apiGroups": ["apps"],
        "apiVersions": ["*"],
        "operations": ["UPDATE"],
        "resources": ["statefulsets"],
        "scope": "*",
    }


def test_chart_match_conditions_are_the_registered_ones() -> None:
    policy = {
        "annotations": {"retire": "example.com/retire", "allowDelete": "example.com/allow"},
        "webhook": {"guardedKinds": ["PersistentVolumeClaim"]},
    }
    hook = webhook_of(render({"policy": policy}))
    assert hook["matchConditions"] == match_conditions(policy_from_dict(policy))
    assert hook["rules"] == rules_for(policy_from_dict(policy))
    assert "'example.com/retire'" in hook["matchConditions"][0]["expression"]
    assert webhook_of(render())["matchConditions"] == match_conditions(policy_from_dict({}))
