"""Prune scopes: parsing `--prune-scope`, ownership marks, and live-owned minus candidate."""

from __future__ import annotations

import pytest

from gate.engine.deployers.argocd import INSTANCE as ARGOCD_INSTANCE
from gate.engine.deployers.argocd import TRACKING as ARGOCD_TRACKING
from gate.engine.deployers.flux import NAME as FLUX_NAME
from gate.engine.deployers.flux import NAMESPACE as FLUX_NAMESPACE
from gate.engine.deployers.helm import RELEASE_NAME as HELM_RELEASE_NAME
from gate.engine.deployers.helm import RELEASE_NAMESPACE as HELM_RELEASE_NAMESPACE
from gate.engine.livestate import LiveState
from gate.engine.plan import Action
from gate.engine.policy import Policy
from gate.engine.scope import (
    PruneScope,
    Requirement,
    owned_objects,
    parse_scope,
    parse_selector,
    prune_changes,
    prune_set,
    scope_parent,
)
from gate.model.errors import InputError
from gate.model.findings import Code
from gate.model.liveview import LiveObject
from gate.model.objects import build_inventory
from gate.model.refs import ObjectRef, Scopes
from gate.sources.manifests import parse_stream
from tests.unit.helpers import TODAY, claim, codes

FLUX = {FLUX_NAME: "apps", FLUX_NAMESPACE: "flux-system"}
HELM = {HELM_RELEASE_NAME: "db", HELM_RELEASE_NAMESPACE: "shop"}


def obj(
    name: str,
    kind: str = "PersistentVolumeClaim",
    group: str = "",
    namespace: str = "app",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> LiveObject:
    return LiveObject(
        ObjectRef(group, kind, namespace, name), dict(annotations or {}), dict(labels or {})
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("flux:flux-system/apps", PruneScope("flux", "flux-system", "apps")),
        ("helm:shop/db", PruneScope("helm", "shop", "db")),
        ("argocd:shop", PruneScope("argocd", name="shop")),
        ("argocd:argocd/shop", PruneScope("argocd", "argocd", "shop")),
        ("FLUX: flux-system/apps", PruneScope("flux", "flux-system", "apps")),
        (
            "label:a=b,c!=d,e,!f,g==h",
            PruneScope(
                "label",
                selector=(
                    Requirement("a", "=", "b"),
                    Requirement("c", "!=", "d"),
                    Requirement("e", "exists"),
                    Requirement("f", "!exists"),
                    Requirement("g", "=", "h"),
                ),
            ),
        ),
    ],
)
def test_parse_scope(text: str, expected: PruneScope) -> None:
    assert parse_scope(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("flux", "is not one of flux:NAMESPACE/NAME"),
        ("kapp:x", "is not one of"),
        ("flux:apps", "flux needs flux:NAMESPACE/NAME"),
        ("helm:shop/", "helm needs helm:NAMESPACE/RELEASE"),
        ("helm:a/b/c", "helm needs"),
        ("argocd:ns/", "argocd needs argocd:NAMESPACE/NAME"),
        ("argocd:a/b/c", "argocd needs"),
        ("label:", "is not one of"),
        ("label:a in (b)", "set-based"),
        ("label:a=b,,c", "empty term"),
        ("label:a=b c", "not a valid label key and value"),
    ],
)
def test_malformed_scope_says_what_is_accepted(text: str, says: str) -> None:
    with pytest.raises(InputError) as err:
        parse_scope(text)
    assert says in str(err.value)


def test_str_round_trips() -> None:
    for text in (
        "flux:flux-system/apps",
        "helm:shop/db",
        "argocd:shop",
        "argocd:argocd/shop",
        "label:a=b,c!=d,e,!f",
    ):
        assert str(parse_scope(text)) == text


def test_flux_needs_both_labels() -> None:
    scope = parse_scope("flux:flux-system/apps")
    assert scope.owns(FLUX, {})
    assert not scope.owns({FLUX_NAME: "apps"}, {})
    assert not scope.owns({**FLUX, FLUX_NAMESPACE: "other"}, {})
    assert not scope.owns({}, FLUX)  # labels, not annotations


def test_helm_reads_annotations() -> None:
    scope = parse_scope("helm:shop/db")
    assert scope.owns({}, HELM)
    assert not scope.owns(HELM, {})
    assert not scope.owns({}, {**HELM, HELM_RELEASE_NAMESPACE: "other"})


def test_argocd_tracking_annotation_wins_over_instance_label() -> None:
    scope = parse_scope("argocd:shop")
    assert scope.owns({}, {ARGOCD_TRACKING: "shop:/PersistentVolumeClaim:app/data"})
    assert not scope.owns({}, {ARGOCD_TRACKING: "shopfront:/PersistentVolumeClaim:app/data"})
    assert scope.owns({ARGOCD_INSTANCE: "shop"}, {})
    # tracked by another app: the instance label (copied from a chart) does not count
    assert not scope.owns({ARGOCD_INSTANCE: "shop"}, {ARGOCD_TRACKING: "other:/x:y/z"})


def test_selector_semantics() -> None:
    (ne,) = parse_selector("tier!=cache")
    assert ne.matches({}) and ne.matches({"tier": "db"}) and not ne.matches({"tier": "cache"})
    scope = parse_scope("label:app=shop,!legacy")
    assert scope.owns({"app": "shop"}, {})
    assert not scope.owns({"app": "shop", "legacy": "1"}, {})


def test_prune_set_is_owned_minus_candidate_minus_controlled() -> None:
    scope = parse_scope("flux:flux-system/apps")
    kept = obj("kept", labels=FLUX)
    gone = obj("gone", labels=FLUX)
    made = obj("data-db-0", labels=FLUX)  # a StatefulSet's claim with template labels
    other = obj("other", labels={FLUX_NAME: "infra", FLUX_NAMESPACE: "flux-system"})
    cm = obj("cfg", kind="ConfigMap", labels=FLUX)  # not a scanned kind
    ns = obj("app", kind="Namespace", namespace="", labels=FLUX)
    objects = [kept, gone, made, other, cm, ns]
    assert owned_objects(scope, objects, controlled={made.ref}) == sorted(
        [kept.ref, gone.ref, ns.ref]
    )
    assert prune_set(scope, objects, {kept.ref, ns.ref}, controlled={made.ref}) == [gone.ref]


def test_prune_changes_carry_base_manifest_and_cause() -> None:
    base = build_inventory(parse_stream(claim(), "base.yaml"), Scopes(), "default")
    scope = parse_scope("helm:shop/db")
    declared = ObjectRef("", "PersistentVolumeClaim", "app", "data")
    never = ObjectRef("", "PersistentVolumeClaim", "app", "orphan")
    changes = prune_changes(scope, [declared, never], base)
    assert [c.action for c in changes] == [Action.DELETE, Action.DELETE]
    assert changes[0].base is not None and changes[0].base.ref == declared
    assert changes[1].base is None and changes[1].head is None
    assert changes[1].cause == "pruned: owned by helm:shop/db and not in the candidate"


def test_pruned_object_base_never_had_is_checked_by_the_rules() -> None:
    from gate.engine.check import check_objects
    from gate.engine.context import Context

    live = LiveState(Policy().guarded_kinds)
    live.upsert(
        {"metadata": {"name": "orphan", "namespace": "app", "labels": FLUX}},
        "v1",
        "PersistentVolumeClaim",
    )
    scope = parse_scope("flux:flux-system/apps")
    refs = prune_set(scope, live.objects.values(), candidate=set())
    extra = prune_changes(scope, refs, build_inventory([], Scopes(), "default"))
    result = check_objects(
        [], [], context=Context.MERGED, policy=Policy(), today=TODAY, live=live, extra_changes=extra
    )
    assert codes(result) == {Code.NOT_RETIRED}
    (finding,) = result.decision.findings
    assert "pruned: owned by flux:flux-system/apps" in " ".join(finding.evidence)
    assert finding.remediation.startswith("no manifest declares it, so the deployer will prune it")
    assert "kubectl get -n app persistentvolumeclaim/orphan -o yaml" in finding.remediation


def _exempting_scratch() -> Policy:
    from gate.sources.policyfile import policy_from_dict

    return policy_from_dict(
        {
            "exemptions": [
                {
                    "kind": "PersistentVolumeClaim",
                    "labels": {"tier": "scratch"},
                    "reason": "CI scratch",
                    "expires": "2099-01-01",
                }
            ]
        }
    )


def test_a_label_exemption_matches_the_live_labels_of_an_object_only_live() -> None:
    """Pruned from the cluster with no base: the live labels are the only labels (the webhook
    matches exemptions against them too); before, it matched against none and was blocked."""
    from gate.engine.check import check_objects
    from gate.engine.context import Context

    live = LiveState(Policy().guarded_kinds)
    live.upsert(
        {"metadata": {"name": "orphan", "namespace": "app", "labels": {**FLUX, "tier": "scratch"}}},
        "v1",
        "PersistentVolumeClaim",
    )
    scope = parse_scope("flux:flux-system/apps")
    extra = prune_changes(
        scope,
        prune_set(scope, live.objects.values(), candidate=set()),
        build_inventory([], Scopes(), "default"),
    )
    result = check_objects(
        [],
        [],
        context=Context.MERGED,
        policy=_exempting_scratch(),
        today=TODAY,
        live=live,
        extra_changes=extra,
    )
    assert result.decision.findings == ()
    assert [e.finding.code for e in result.decision.exempted] == [Code.NOT_RETIRED]


def test_with_a_live_view_the_live_labels_win_over_the_base() -> None:
    """The base says scratch, the cluster says prod: what is deleted is the live object."""
    from gate.engine.check import check_objects
    from gate.engine.context import Context

    scratch = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n"
    scratch += "  namespace: app\n  labels: {tier: scratch}\n"
    base = parse_stream(scratch, "base.yaml")
    live = LiveState(Policy().guarded_kinds)
    live.upsert(
        {"metadata": {"name": "data", "namespace": "app", "labels": {"tier": "prod"}}},
        "v1",
        "PersistentVolumeClaim",
    )
    policy = _exempting_scratch()
    offline = check_objects([*base], [], context=Context.MERGED, policy=policy, today=TODAY)
    assert offline.decision.exempted and not offline.decision.findings
    online = check_objects(
        [*base], [], context=Context.MERGED, policy=policy, today=TODAY, live=live
    )
    assert codes(online) == {Code.NOT_RETIRED}
    assert not online.decision.exempted


def test_a_flux_inventory_is_the_prune_set_where_there_is_one() -> None:
    """The Kustomization's status.inventory is exact: an entry without labels is pruned, a labelled
    object in no inventory is not, an entry already gone from the cluster is nothing, and an
    entry of a kind prune-gate does not scan is left out."""
    live = LiveState(Policy().guarded_kinds)
    for name, labels in (("listed", {}), ("copied", FLUX)):
        live.upsert(
            {"metadata": {"name": name, "namespace": "app", "labels": labels}},
            "v1",
            "PersistentVolumeClaim",
        )
    scope = parse_scope("flux:flux-system/apps")
    listed = ObjectRef("", "PersistentVolumeClaim", "app", "listed")
    gone = ObjectRef("", "PersistentVolumeClaim", "app", "gone")
    config = ObjectRef("", "ConfigMap", "app", "settings")
    inventory = [listed, gone, config]
    objects = list(live.objects.values())
    assert prune_set(scope, objects, candidate=set(), inventory=inventory) == [listed]
    assert prune_set(scope, objects, candidate={listed}, inventory=inventory) == []
    by_labels = prune_set(scope, objects, candidate=set())
    assert by_labels == [ObjectRef("", "PersistentVolumeClaim", "app", "copied")]
    (change,) = prune_changes(scope, [listed], build_inventory([], Scopes(), "default"), True)
    assert change.cause == (
        "pruned: in the status.inventory of Kustomization flux-system/apps and not in the candidate"
    )


def test_flux_and_namespaced_argocd_scopes_name_the_parent_that_lists_the_prune_set() -> None:
    assert scope_parent(parse_scope("flux:flux-system/apps")) == ObjectRef(
        "kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps"
    )
    assert scope_parent(parse_scope("argocd:team/shop")) == ObjectRef(
        "argoproj.io", "Application", "team", "shop"
    )
    assert scope_parent(parse_scope("argocd:shop")) is None  # the tracking marks only
    assert scope_parent(parse_scope("helm:shop/db")) is None
    assert scope_parent(parse_scope("label:a=b")) is None


def test_an_argocd_application_scope_prunes_its_status_resources() -> None:
    scope = parse_scope("argocd:team/shop")
    listed = ObjectRef("", "PersistentVolumeClaim", "app", "listed")
    live = LiveState(Policy().guarded_kinds)
    # With no status.resources, what Argo CD marks as the app's (outside Argo CD's own namespace
    # its instance name is NS_NAME), or, ambiguously, its bare name; never another app's.
    for name, labels, marks in (
        ("listed", {}, {}),
        ("marked", {}, {ARGOCD_TRACKING: "team_shop:/PersistentVolumeClaim:app/marked"}),
        ("bare", {ARGOCD_INSTANCE: "shop"}, {}),
        ("other", {ARGOCD_INSTANCE: "team_shopfront"}, {}),
    ):
        meta = {"name": name, "namespace": "app", "labels": labels, "annotations": marks}
        live.upsert({"metadata": meta}, "v1", "PersistentVolumeClaim")
    objects = list(live.objects.values())
    assert prune_set(scope, objects, candidate=set(), inventory=[listed]) == [listed]
    by_marks = [r.name for r in prune_set(scope, objects, candidate=set())]
    assert by_marks == ["bare", "marked"]
    (change,) = prune_changes(scope, [listed], build_inventory([], Scopes(), "default"), True)
    assert change.cause == (
        "pruned: in the status.resources of Application team/shop and not in the candidate"
    )
    (by_label,) = prune_changes(scope, [listed], build_inventory([], Scopes(), "default"))
    assert by_label.cause == "pruned: owned by argocd:team/shop and not in the candidate"
