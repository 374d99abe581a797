"""The stateful custom kinds (gate/model/stateful.py) guarded at the webhook door out of the box.

A deployer's prune of a CloudNativePG `Cluster` takes its claims with it, so the webhook refuses
it as it refuses a claim's: NOT_RETIRED unless the live object carries the retire annotation.
The rules name the catalogue's plurals without asking the API server, and are inert until a CRD
serves the kind; the watch cache lists nothing of a kind no CRD serves, so a cluster without
these operators sees no new list, warning or metric.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gate.engine.livestate import LiveState
from gate.engine.policy import DEFAULT_WEBHOOK_GUARDED, Policy
from gate.model.refs import parse_group_kind
from gate.model.stateful import CATALOGUE, StatefulKind
from gate.sources.policyfile import policy_from_dict
from tests.unit.test_decide_bypasses import FREE, NOW, RETIRE, refused, request
from tests.unit.test_webhook_cache import FakeApi, _cache
from webhook.decide import decide_admission
from webhook.register import PLURALS, discover_plurals, rules_for
from webhook.review import parse_review

CATALOGUED = {(k.group, k.kind) for k in CATALOGUE}
FLUX = "system:serviceaccount:flux-system:kustomize-controller"
POLICY = policy_from_dict({"webhook": {"deployers": [FLUX]}})


def cnpg_cluster(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {
            "name": "pg",
            "namespace": "app",
            "uid": "uid-pg",
            "annotations": annotations or {},
        },
        "spec": {"instances": 3, "storage": {"size": "10Gi"}},
    }


def decide(doc: dict[str, Any], policy: Policy = POLICY) -> Any:
    req = parse_review(json.dumps(doc).encode())
    return decide_admission(req, policy, LiveState(policy.guarded_kinds), FREE, NOW.date())


# --- the defaults ------------------------------------------------------------------------------


def test_the_webhook_guards_every_catalogued_kind_by_default() -> None:
    """Beside the kinds it always guarded: one list of names, parsed as the policy file is."""
    for policy in (Policy(), policy_from_dict({})):
        assert policy.webhook.guarded_kinds >= CATALOGUED
        assert {
            ("", "PersistentVolumeClaim"),
            ("", "PersistentVolume"),
            ("", "Namespace"),
            ("apps", "StatefulSet"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
        } <= policy.webhook.guarded_kinds
    assert {parse_group_kind(k) for k in DEFAULT_WEBHOOK_GUARDED} == Policy().webhook.guarded_kinds


def test_a_policy_that_lists_its_webhook_kinds_replaces_the_defaults() -> None:
    """A list is the whole list (as before): the catalogue is not added to it behind its back."""
    only = policy_from_dict({"webhook": {"guardedKinds": ["PersistentVolumeClaim"]}})
    assert only.webhook.guarded_kinds == {("", "PersistentVolumeClaim")}


def test_a_lowercase_catalogued_kind_can_be_named_in_a_policy() -> None:
    """Zalando's kind is `postgresql`: a policy that lists its kinds must be able to name it."""
    name = "postgresql.acid.zalan.do"
    policy = policy_from_dict({"guardedKinds": [name], "webhook": {"guardedKinds": [name]}})
    assert policy.webhook.guarded_kinds == {("acid.zalan.do", "postgresql")}
    assert rules_for(policy)[0]["resources"] == ["postgresqls"]


# --- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda k: k.name)
def test_default_rules_name_each_catalogued_kind_by_its_plural(entry: StatefulKind) -> None:
    """Every operation the webhook judges on the resource, and UPDATEs of its /status (a status
    write may change metadata too), in its group's one rule."""
    rules = [r for r in rules_for(Policy()) if r["apiGroups"] == [entry.group]]
    assert [r["operations"] for r in rules] == [["CREATE", "DELETE", "UPDATE"], ["UPDATE"]]
    assert entry.plural in rules[0]["resources"]
    assert f"{entry.plural}/status" in rules[1]["resources"]
    assert all(r["scope"] == "*" and r["apiVersions"] == ["*"] for r in rules)


def test_the_catalogue_shares_no_kind_with_the_listed_table() -> None:
    """PLURALS merges the two tables: a kind in both would have two plurals to choose from."""
    listed = {key for key in PLURALS if key not in CATALOGUED}
    assert len(PLURALS) == len(listed) + len(CATALOGUE)


def test_registration_asks_discovery_about_no_catalogued_kind() -> None:
    """Their plurals are known: `--register` works the same whether their CRDs exist or not."""

    class NoApi:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            raise AssertionError(f"the API server was asked ({name})")

    assert discover_plurals(NoApi(), CATALOGUED) == {}


# --- the decision ------------------------------------------------------------------------------


def test_a_deployers_prune_of_an_unretired_cluster_is_refused() -> None:
    outcome = decide(request("DELETE", cnpg_cluster()))
    assert refused(outcome) == "NOT_RETIRED"
    assert "Cluster" in outcome.response.status.message


def test_a_deployers_prune_of_a_retired_cluster_is_allowed() -> None:
    retired = cnpg_cluster({RETIRE: "moved to the new cluster"})
    assert decide(request("DELETE", retired)).response.allowed


def test_a_persons_delete_of_a_cluster_is_no_prune() -> None:
    """NOT_RETIRED is the deployer door's: a person deleting by hand is not a prune."""
    assert decide(request("DELETE", cnpg_cluster(), user="kubernetes-admin")).response.allowed


def test_a_kind_the_webhook_does_not_guard_is_let_through_untouched() -> None:
    policy = policy_from_dict(
        {"webhook": {"deployers": [FLUX], "guardedKinds": ["PersistentVolumeClaim"]}}
    )
    assert decide(request("DELETE", cnpg_cluster()), policy).response.allowed


# --- the watch cache ---------------------------------------------------------------------------


def test_without_their_crds_the_cache_lists_no_catalogued_kind_and_is_ready() -> None:
    """Guarding a kind at the door adds no list: the cache watches a custom kind only once a CRD
    serves it, so a cluster without these operators sees no 404s, warnings or uncounted kinds."""
    api = FakeApi()
    cache = _cache(api)
    cache.start()
    try:
        assert cache.wait_ready(10), cache.ready()
        groups = {k.group for k in CATALOGUE}
        asked = {path for path, _ in api.calls}
        assert not [p for p in asked if any(f"/apis/{g}/" in p for g in groups)]
        assert cache.uncounted() == []
        assert not cache.rule_kinds and not cache.custom
    finally:
        cache.stop()
