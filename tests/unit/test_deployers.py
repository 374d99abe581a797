"""The deployer seam (gate.engine.deployers): each tool's marks, what it owns, its parents, and
the registry the rules ask.

Each deployer's facts are pinned as its tool reads them (the module docstrings name the source):
Flux compares `prune: disabled` case-insensitively in labels or annotations, Argo CD trims each
sync option and compares it exactly, Helm and kapp compare their values exactly. A guard at the
end keeps the keys in the deployers: no other module of gate or webhook defines one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gate.engine.deployers import (
    ARGOCD,
    DEPLOYERS,
    FLUX,
    HELM,
    IMPERSONATING,
    KAPP,
    KUBECTL,
    LISTING,
    Event,
    Found,
    Owner,
    argocd,
    finalizer_owner,
    flux,
    force_mark,
    helm,
    kapp,
    keep_mark,
    keys,
    kubectl,
    owners,
    parent_of,
    sync_options,
)
from gate.kube.resources import PARENTS as LISTED_RESOURCES
from gate.model.refs import ObjectRef

ROOT = Path(__file__).resolve().parents[2]
BOTH = (Event.PRUNE, Event.DELETE)

# --- Flux --------------------------------------------------------------------------------------


@pytest.mark.parametrize("event", BOTH)
def test_flux_keeps_prune_disabled_in_annotations_or_labels_any_case(event: Event) -> None:
    assert FLUX.keeps({flux.PRUNE: "disabled"}, {}, event) == Found("flux", flux.PRUNE, "disabled")
    assert FLUX.keeps({}, {flux.PRUNE: "Disabled"}, event) == Found("flux", flux.PRUNE, "Disabled")
    assert FLUX.keeps({flux.PRUNE: "enabled"}, {}, event) is None
    # strings.EqualFold, not trimmed: a padded value is no mark to kustomize-controller.
    assert FLUX.keeps({flux.PRUNE: " disabled"}, {}, event) is None


def test_flux_force_enabled_forces_and_disabled_is_only_said() -> None:
    assert FLUX.forces({flux.FORCE: " Enabled "}) == Found("flux", flux.FORCE, "enabled")
    assert str(FLUX.forces({flux.FORCE: "enabled"})) == f"{flux.FORCE}: enabled"
    assert FLUX.forces({flux.FORCE: "disabled"}) is None
    assert flux.force_disabled({flux.FORCE: "Disabled"})
    assert not flux.force_disabled({flux.FORCE: "enabled"})


def test_flux_owner_labels_name_the_kustomization() -> None:
    labels = {flux.NAME: "apps", flux.NAMESPACE: "flux-system"}
    assert FLUX.owner({}, labels) == Owner("flux", "flux-system", "apps")
    assert FLUX.owns({}, labels, "flux-system", "apps")
    assert not FLUX.owns({}, labels, "other", "apps")
    assert FLUX.owner({}, {flux.NAME: "apps"}) == Owner("flux", "", "apps")
    assert FLUX.owner(labels, {}) is None  # labels, not annotations


def test_flux_kustomization_lists_its_inventory_and_has_the_flux_finalizer() -> None:
    obj = {
        "status": {
            "inventory": {
                "entries": [
                    {"id": "app_data__PersistentVolumeClaim"},
                    {"id": "_shop__Namespace"},
                    {"id": "bad"},
                ]
            }
        }
    }
    assert flux.KUSTOMIZATION.applied(obj) == (
        ObjectRef("", "PersistentVolumeClaim", "app", "data"),
        ObjectRef("", "Namespace", "", "shop"),
    )
    assert flux.KUSTOMIZATION.lists == "status.inventory"
    assert flux.FINALIZER in flux.KUSTOMIZATION.finalizers
    assert parent_of(flux.GROUP, "Kustomization") == (FLUX, flux.KUSTOMIZATION)
    facts = flux.kustomization_facts({"prune": True, "force": "true"})
    assert facts == {
        "prune": "true",
        "suspend": "false",
        "deletionPolicy": "MirrorPrune",
        "force": "false",  # a string is not Flux's boolean
    }


# --- Argo CD -----------------------------------------------------------------------------------


def test_sync_options_are_read_once_trimmed_without_empties() -> None:
    assert sync_options({argocd.SYNC_OPTIONS: " Prune=false ,, Replace=true"}) == (
        "Prune=false",
        "Replace=true",
    )
    assert sync_options({}) == ()


def test_argo_prune_false_keeps_from_a_sync_and_delete_false_from_the_apps_deletion() -> None:
    prune = {argocd.SYNC_OPTIONS: "Prune=false"}
    delete = {argocd.SYNC_OPTIONS: "ServerSideApply=true, Delete=false"}
    assert ARGOCD.keeps(prune, {}, Event.PRUNE) == Found(
        "argocd", argocd.SYNC_OPTIONS, "Prune=false"
    )
    assert ARGOCD.keeps(prune, {}, Event.DELETE) is None
    assert ARGOCD.keeps(delete, {}, Event.DELETE) is not None
    assert ARGOCD.keeps(delete, {}, Event.PRUNE) is None
    # exact: Argo CD compares option strings as written
    assert ARGOCD.keeps({argocd.SYNC_OPTIONS: "prune=false"}, {}, Event.PRUNE) is None
    assert ARGOCD.keeps({argocd.SYNC_OPTIONS: "Prune=confirm"}, {}, Event.PRUNE) is None


def test_argo_replace_true_forces() -> None:
    found = ARGOCD.forces({argocd.SYNC_OPTIONS: "Prune=false,Replace=true"})
    assert str(found) == f"{argocd.SYNC_OPTIONS}: Replace=true"
    assert ARGOCD.forces({argocd.SYNC_OPTIONS: "Replace=false"}) is None


def test_argo_owner_is_the_tracking_ids_app_else_the_instance_label() -> None:
    tracking = {argocd.TRACKING: "shop:/PersistentVolumeClaim:app/data"}
    assert ARGOCD.owner(tracking, {}) == Owner("argocd", "", "shop")
    assert ARGOCD.owns(tracking, {argocd.INSTANCE: "other"}, "", "shop")
    assert not ARGOCD.owns(tracking, {argocd.INSTANCE: "shopfront"}, "", "shopfront")
    assert ARGOCD.owner({}, {argocd.INSTANCE: "shop"}) == Owner("argocd", "", "shop")
    assert ARGOCD.owner({}, {}) is None


def test_argo_application_lists_its_resources_and_cascades_by_its_finalizers() -> None:
    obj = {
        "status": {
            "resources": [
                {"kind": "PersistentVolumeClaim", "namespace": "app", "name": "data"},
                {"group": "", "kind": "Namespace", "namespace": "x", "name": "app"},
                {"kind": "NoName"},
            ]
        }
    }
    assert argocd.APPLICATION.applied(obj) == (
        ObjectRef("", "PersistentVolumeClaim", "app", "data"),
        ObjectRef("", "Namespace", "", "app"),
    )
    assert {
        "resources-finalizer.argocd.argoproj.io",
        "resources-finalizer.argocd.argoproj.io/background",
        "resources-finalizer.argocd.argoproj.io/foreground",
    } == argocd.APPLICATION.finalizers
    assert parent_of(argocd.GROUP, "Application") == (ARGOCD, argocd.APPLICATION)


# --- Helm --------------------------------------------------------------------------------------


@pytest.mark.parametrize("event", BOTH)
def test_helm_keeps_resource_policy_keep_exactly(event: Event) -> None:
    keep = {helm.RESOURCE_POLICY: "keep"}
    assert HELM.keeps(keep, {}, event) == Found("helm", helm.RESOURCE_POLICY, "keep")
    assert HELM.keeps({helm.RESOURCE_POLICY: "Keep"}, {}, event) is None
    assert HELM.keeps({}, {helm.RESOURCE_POLICY: "keep"}, event) is None  # an annotation


def test_helm_owner_is_the_release_both_annotations_name() -> None:
    release = {helm.RELEASE_NAME: "db", helm.RELEASE_NAMESPACE: "shop"}
    assert HELM.owner(release, {}) == Owner("helm", "shop", "db")
    assert HELM.owns(release, {}, "shop", "db")
    assert not HELM.owns(release, {}, "other", "db")
    assert HELM.owner({helm.RELEASE_NAME: "db"}, {}) is None
    assert HELM.owner({helm.RELEASE_NAME: "", helm.RELEASE_NAMESPACE: "shop"}, {}) is None


def test_helm_a_keep_mark_only_kubectl_wrote_keeps_nothing_at_uninstall() -> None:
    assert helm.live_only_keep(["kubectl-annotate"])
    assert helm.live_only_keep(["kubectl", "kubectl-edit"])
    assert not helm.live_only_keep(["helm", "kubectl-annotate"])
    assert not helm.live_only_keep([])  # no writer known: the release may have it
    assert parent_of(helm.GROUP, "HelmRelease") == (HELM, helm.HELM_RELEASE)
    assert helm.HELM_RELEASE.finalizers == {flux.FINALIZER}


# --- kapp and kubectl --------------------------------------------------------------------------


@pytest.mark.parametrize("event", BOTH)
def test_kapp_keeps_delete_strategy_orphan(event: Event) -> None:
    orphan = {kapp.DELETE_STRATEGY: "orphan"}
    assert KAPP.keeps(orphan, {}, event) == Found("kapp", kapp.DELETE_STRATEGY, "orphan")
    assert KAPP.keeps({kapp.DELETE_STRATEGY: "Orphan"}, {}, event) is None
    assert KAPP.forces(orphan) is None


def test_kapp_owner_label_and_app_finalizer() -> None:
    assert KAPP.owner({}, {kapp.APP_LABEL: "1700000000"}) == Owner("kapp", "", "1700000000")
    assert KAPP.owner({}, {}) is None
    assert parent_of(kapp.GROUP, "App") == (KAPP, kapp.APP)
    assert kapp.FINALIZER in kapp.APP.finalizers
    assert "kapp-controller" in (finalizer_owner(kapp.FINALIZER) or "")


def test_kubectl_applyset_owns_by_part_of_and_keeps_nothing() -> None:
    labels = {kubectl.PART_OF: "applyset-abc-v1"}
    assert KUBECTL.owner({}, labels) == Owner("kubectl", "", "applyset-abc-v1")
    assert KUBECTL.owns({}, labels, "", "applyset-abc-v1")
    for event in BOTH:
        assert KUBECTL.keeps({flux.PRUNE: "disabled"}, labels, event) is None
    assert KUBECTL.parents == ()


# --- the registry ------------------------------------------------------------------------------


def test_keep_mark_asks_every_deployer_and_quotes_the_first_as_written() -> None:
    both = {argocd.SYNC_OPTIONS: "Prune=false,Delete=false", helm.RESOURCE_POLICY: "keep"}
    found = keep_mark(both)
    assert found is not None and found.deployer == "argocd"
    assert str(found) == f"{argocd.SYNC_OPTIONS}: Prune=false,Delete=false"
    assert keep_mark({flux.PRUNE: "disabled", helm.RESOURCE_POLICY: "keep"}) == Found(
        "flux", flux.PRUNE, "disabled"
    )
    assert keep_mark({kapp.DELETE_STRATEGY: "orphan"}) == Found(
        "kapp", kapp.DELETE_STRATEGY, "orphan"
    )
    assert keep_mark({}) is None
    # annotations only unless labels are passed: Flux alone reads its mark as a label
    assert keep_mark({}, {flux.PRUNE: "disabled"}) == Found("flux", flux.PRUNE, "disabled")
    assert keep_mark({}) is None
    # the event chooses Argo CD's option
    assert keep_mark({argocd.SYNC_OPTIONS: "Delete=false"}) is None
    assert keep_mark({argocd.SYNC_OPTIONS: "Delete=false"}, event=Event.DELETE) is not None


def test_force_mark_flux_before_argo() -> None:
    both = {flux.FORCE: "enabled", argocd.SYNC_OPTIONS: "Replace=true"}
    assert force_mark(both) == Found("flux", flux.FORCE, "enabled")
    assert force_mark({argocd.SYNC_OPTIONS: "Replace=true"}) == Found(
        "argocd", argocd.SYNC_OPTIONS, "Replace=true"
    )
    assert force_mark({helm.RESOURCE_POLICY: "keep"}) is None


def test_owners_lists_every_deployer_whose_marks_the_object_carries() -> None:
    annotations = {helm.RELEASE_NAME: "db", helm.RELEASE_NAMESPACE: "shop"}
    labels = {flux.NAME: "apps", flux.NAMESPACE: "flux-system"}
    assert owners(annotations, labels) == (
        Owner("flux", "flux-system", "apps"),
        Owner("helm", "shop", "db"),
    )
    assert owners({}, {}) == ()


def test_parents_finalizers_and_impersonation() -> None:
    assert parent_of("", "PersistentVolumeClaim") is None
    assert set(LISTING) == {flux.KUSTOMIZATION.gk, argocd.APPLICATION.gk}
    assert set(IMPERSONATING) == {
        flux.KUSTOMIZATION.gk,
        helm.HELM_RELEASE.gk,
        flux.RESOURCE_SET.gk,
        kapp.APP.gk,
    }
    assert "Argo CD" in (finalizer_owner("resources-finalizer.argocd.argoproj.io/foreground") or "")
    assert "Flux" in (finalizer_owner(flux.FINALIZER) or "")
    assert finalizer_owner("kubernetes.io/pvc-protection") is None


def test_every_listing_parent_is_listed_by_gate_check_live() -> None:
    """`gate check --live` lists the parents whose status says what they applied
    (gate.kube.resources.PARENTS): one per registry parent that lists, no more."""
    assert {(r.group, r.kind) for r in LISTED_RESOURCES} == set(LISTING)


def test_each_deployer_names_itself_and_its_keys() -> None:
    names = [d.name for d in DEPLOYERS]
    assert names == ["flux", "argocd", "helm", "kapp", "kubectl"]
    assert {
        flux.PRUNE,
        flux.FORCE,
        flux.NAME,
        argocd.SYNC_OPTIONS,
        argocd.TRACKING,
        helm.RESOURCE_POLICY,
        helm.RELEASE_NAME,
        kapp.DELETE_STRATEGY,
        kapp.APP_LABEL,
        kubectl.PART_OF,
    } <= keys()


def _defined_keys(path: Path, wanted: frozenset[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted
    ]


def test_no_module_outside_the_deployers_defines_a_deployers_key() -> None:
    """A key (or a finalizer) spelled out as a string of its own anywhere else is a second
    definition the registry cannot see. Messages may quote a key inside a sentence; docstrings
    may name one."""
    wanted = keys() | {f for d in DEPLOYERS for f in d.finalizers} | argocd.FINALIZERS
    found = [
        hit
        for package in ("gate", "webhook")
        for path in sorted((ROOT / package).rglob("*.py"))
        if "deployers" not in path.parts
        for hit in _defined_keys(path, wanted)
    ]
    assert found == []
