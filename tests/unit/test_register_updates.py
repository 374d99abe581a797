"""Registration of the UPDATE rules: the chart and `gate webhook serve --register` agree, and the
matchConditions let through exactly the UPDATEs the webhook judges (checked by the real API
server in tests/e2e/test_bypasses.py, which registers them)."""

from __future__ import annotations

import pytest
import yaml

from gate.kube.resources import RESOURCES
from gate.model.errors import ConfigError
from gate.model.stateful import CATALOGUE, StatefulKind
from gate.sources.policyfile import policy_from_dict
from webhook.register import PLURALS, match_conditions, rules_for

from .test_chart import render, render_error, webhook_of


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


def test_status_updates_of_the_guarded_kinds_are_registered() -> None:
    """A /status write may change labels and annotations (a claim's disposable mark, the
    allow-delete override): UPDATEs of each guarded resource's `status` reach the webhook
    (matchConditions keep the ordinary ones off), in the chart as in `--register`."""
    rules = rules_for(policy_from_dict({}))
    status = {
        (g, r)
        for rule in rules
        if rule["operations"] == ["UPDATE"] and rule["resources"] != ["statefulsets"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert status == {
        ("", "namespaces/finalize"),  # keeps metadata changes too: an owner deletes the namespace
        ("", "namespaces/status"),
        ("", "persistentvolumeclaims/status"),
        ("", "persistentvolumes/status"),
        ("snapshot.storage.k8s.io", "volumesnapshots/status"),
        ("apps", "statefulsets/status"),
        ("apiextensions.k8s.io", "customresourcedefinitions/status"),
        *((k.group, f"{k.plural}/status") for k in CATALOGUE),
    }
    assert webhook_of(render())["rules"] == rules
    only_volumes = {"webhook": {"guardedKinds": ["PersistentVolume"]}}
    named = [r["resources"] for r in rules_for(policy_from_dict(only_volumes))]
    assert named == [["persistentvolumes"], ["persistentvolumes/status"], ["statefulsets"]]
    assert webhook_of(render({"policy": only_volumes}))["rules"] == rules_for(
        policy_from_dict(only_volumes)
    )


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


def test_chart_protects_the_labels_its_object_selector_reads() -> None:
    """The objectSelector's keys reach the webhook's policy and its matchCondition, so a deployer's
    relabel of a guarded object is decided (`gate.engine.updates.protected_label_changes`), not
    waved through."""
    selector = {
        "matchLabels": {"tier": "db"},
        "matchExpressions": [{"key": "prune-gate.io/guard", "operator": "Exists"}],
    }
    values = {
        "webhook": {"objectSelector": selector},
        "policy": {"webhook": {"protectedLabels": ["team"]}},
    }
    objs = render(values)
    config = next(o for o in objs if o["kind"] == "ConfigMap")
    policy = yaml.safe_load(config["data"]["prune-gate.yaml"])
    assert policy["webhook"]["protectedLabels"] == ["team", "tier", "prune-gate.io/guard"]
    hook = webhook_of(objs)
    assert hook["objectSelector"] == selector
    assert hook["matchConditions"] == match_conditions(policy_from_dict(policy))
    assert (
        "object.metadata.labels['prune-gate.io/guard']" in hook["matchConditions"][0]["expression"]
    )
    # Without a selector nothing is added: the policy is the user's, untouched.
    plain = next(o for o in render({"policy": None}) if o["kind"] == "ConfigMap")
    assert yaml.safe_load(plain["data"]["prune-gate.yaml"]) == {"apiVersion": "prune-gate.io/v1"}


def test_a_namespace_label_selector_is_refused() -> None:
    """A deployer could relabel a namespace out of a namespace label selector unseen."""
    error = render_error(
        {"webhook": {"namespaceSelectorExpressions": [{"key": "a", "operator": "Exists"}]}}
    )
    assert "namespaceSelectorExpressions" in error


def test_a_guarded_kind_without_a_known_resource_is_refused_not_guessed() -> None:
    """`Ingress` -> `ingresss` matched nothing: the webhook was never called for the kind."""
    policy = policy_from_dict({"webhook": {"guardedKinds": ["Ingress.networking.k8s.io"]}})
    with pytest.raises(ConfigError, match=r"Ingress\.networking\.k8s\.io has no known resource"):
        rules_for(policy)
    error = render_error({"policy": {"webhook": {"guardedKinds": ["Ingress.networking.k8s.io"]}}})
    assert "Ingress.networking.k8s.io has no known resource name" in error
    assert "webhook.rules" in error
    explicit = {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"]}
    values = {
        "policy": {"webhook": {"guardedKinds": ["Ingress.networking.k8s.io"]}},
        "webhook": {"rules": [explicit]},
    }
    assert webhook_of(render(values))["rules"][0]["resources"] == ["ingresses"]


def test_chart_and_registration_name_the_same_resource_for_every_table_kind() -> None:
    """One table (gate/kube/resources.py and the stateful catalogue, gate/model/stateful.py): the
    chart's copy of it must name each kind's resource as registration does, or a kind guarded
    through the chart would go unguarded."""
    kinds = [f"{r.kind}.{r.group}" if r.group else r.kind for r in RESOURCES]
    kinds += [k.name for k in CATALOGUE]
    policy = {"webhook": {"guardedKinds": kinds}}
    assert webhook_of(render({"policy": policy}))["rules"] == rules_for(policy_from_dict(policy))
    named = {
        (g, res)
        for rule in rules_for(policy_from_dict(policy))
        for g in rule["apiGroups"]
        for res in rule["resources"]
    }
    assert {(r.group, r.plural) for r in RESOURCES} <= named
    assert {(k.group, k.plural) for k in CATALOGUE} <= named


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda k: k.name)
def test_the_charts_known_table_holds_each_catalogued_kind_with_its_group_and_plural(
    entry: StatefulKind,
) -> None:
    """Kind by kind, so a missing or misspelt entry in the chart's `prune-gate.statefulKinds`
    fails by name (the chart refuses a kind it does not know) instead of hiding in a big diff."""
    policy = {"webhook": {"guardedKinds": [entry.name]}}
    main = webhook_of(render({"policy": policy}))["rules"][0]
    assert (main["apiGroups"], main["resources"]) == ([entry.group], [entry.plural])
    assert PLURALS[(entry.group, entry.kind)] == entry.plural


def test_the_charts_default_kinds_are_the_webhooks_default_kinds() -> None:
    """The chart's default `$kinds` is DEFAULT_WEBHOOK_GUARDED: an entry of the chart's stateful
    table that the catalogue lacks would add a rule here that registration never makes."""
    defaults = policy_from_dict({})
    assert webhook_of(render())["rules"] == rules_for(defaults)
    assert {(k.group, k.kind) for k in CATALOGUE} <= defaults.webhook.guarded_kinds


def test_chart_and_registration_send_a_claims_disposable_marks_alike() -> None:
    """The labels `heal.disposableClaims` reads and the disposable annotation reach the webhook
    on a claim: their values, and who managedFields say wrote them (what a forged manifest or a
    borrowed manager name changes). The chart's copy is the registered one, key for key."""
    policy = {
        "heal": {
            "disposableClaims": [
                {"namespace": "ci-*", "labels": {"tier": "cache"}, "reason": "rebuilt"},
                {"labels": {"example.com/scratch": "yes", "tier": "tmp"}, "reason": "scratch"},
            ]
        }
    }
    hook = webhook_of(render({"policy": policy}))
    assert hook["matchConditions"] == match_conditions(policy_from_dict(policy))
    expression = hook["matchConditions"][0]["expression"]
    for key in ("'tier'", "'example.com/scratch'"):
        assert f"oldObject.metadata.labels[{key}]" in expression
    assert "oldObject.metadata.annotations['prune-gate.io/data']" in expression
    assert "'f:tier' in e.fieldsV1['f:metadata']['f:labels']" in expression
    assert "'f:prune-gate.io/data' in e.fieldsV1['f:metadata']['f:annotations']" in expression
    assert expression.count("'f:tier'") == 2  # one key, read once in object and oldObject
    # Every field of an owning entry that `is_hand` reads: dropping `subresource: status` from
    # an entry (a person's manager name, written through /status) must reach the webhook.
    assert (
        "[has(e.manager) ? e.manager : '', has(e.operation) ? e.operation : '', "
        "has(e.subresource) ? e.subresource : '']" in expression
    )
    # Without heal.disposableClaims only the annotation is a mark.
    assert "'f:labels'" not in webhook_of(render())["matchConditions"][0]["expression"]
