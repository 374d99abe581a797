"""Parents and cascades (gate/engine/rules/cascades.py): a removed HelmRelease, Kustomization,
Application or owner takes guarded children with it. The live view is a LiveState built from
raw API objects, as `gate check --live` builds it; each finding and each skip is checked."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.engine.rules.cascades import release_of
from gate.engine.verdict import Verdict
from gate.model.findings import Code, Finding, Severity
from gate.model.objects import Manifest
from gate.model.refs import ObjectRef
from gate.sources.manifests import parse_stream
from tests.unit.helpers import TODAY, claim, codes, doc, run

GUARDED = Policy().guarded_kinds
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: app}
"""
KEEP_FINDINGS = {Code.ORPHANED_BY_KEEP}


def state(*objs: tuple[str, str, dict[str, Any]]) -> LiveState:
    s = LiveState(GUARDED)
    for api_version, kind, obj in objs:
        s.upsert(obj, api_version, kind)
    return s


def live_claim(name: str = "data", namespace: str = "app", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, **meta}, "spec": {}}


def one(result: CheckResult, code: Code) -> Finding:
    (f,) = [f for f in result.decision.findings if f.code is code]
    return f


# --- HelmRelease ---------------------------------------------------------------------------


def helm_release(extra: str = "", annotations: str = "") -> str:
    return f"""\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: db
  namespace: app{annotations}
spec:
  interval: 10m
  chart: {{spec: {{chart: postgres, sourceRef: {{kind: HelmRepository, name: charts}}}}}}{extra}
"""


def release_claim(release: str = "db", namespace: str = "app", **ann: str) -> dict[str, Any]:
    annotations = {
        "meta.helm.sh/release-name": release,
        "meta.helm.sh/release-namespace": namespace,
        **ann,
    }
    return live_claim("data-db-0", namespace, annotations=annotations)


def test_removed_helmrelease_uninstalls_the_claims_its_release_made() -> None:
    live = state(("v1", "PersistentVolumeClaim", release_claim()))
    result = run(helm_release(), CONFIGMAP, live=live)
    f = one(result, Code.RELEASE_UNINSTALL_DELETES)
    assert f.ref == ObjectRef("helm.toolkit.fluxcd.io", "HelmRelease", "app", "db")
    assert "uninstalls release app/db" in f.message
    assert "PersistentVolumeClaim app/data-db-0" in f.message
    assert any("data-db-0 carries meta.helm.sh/release-name: db" in e for e in f.evidence)
    assert "helm get manifest db -n app" in f.commands()
    assert "helm.sh/resource-policy: keep" in f.remediation
    assert result.decision.verdict is Verdict.BLOCK


def test_release_name_and_namespace_follow_helm_controller() -> None:
    def of(spec: dict[str, Any]) -> tuple[str, str]:
        ref = ObjectRef("helm.toolkit.fluxcd.io", "HelmRelease", "flux", "db")
        return release_of(Manifest(ref, "helm.toolkit.fluxcd.io/v2", {"spec": spec}))

    assert of({}) == ("flux", "db")
    assert of({"targetNamespace": "app"}) == ("app", "app-db")
    assert of({"targetNamespace": "app", "releaseName": "pg"}) == ("app", "pg")
    long_ns = "n" * 60
    composed = f"{long_ns}-db"
    short = f"{composed[:40]}-{hashlib.sha256(composed.encode()).hexdigest()[:12]}"
    assert of({"targetNamespace": long_ns}) == (long_ns, short)


def test_target_namespace_release_is_found_live() -> None:
    live = state(("v1", "PersistentVolumeClaim", release_claim("web-db", "web")))
    result = run(helm_release("\n  targetNamespace: web"), CONFIGMAP, live=live)
    assert "uninstalls release web/web-db" in one(result, Code.RELEASE_UNINSTALL_DELETES).message


def test_resource_policy_keep_claims_stay() -> None:
    live = state(
        ("v1", "PersistentVolumeClaim", release_claim(**{"helm.sh/resource-policy": "keep"}))
    )
    result = run(helm_release(), CONFIGMAP, live=live)
    assert result.decision.verdict is Verdict.ALLOW


def keep_set_by(manager: str) -> dict[str, Any]:
    """A release claim whose keep mark `manager` set (its managedFields say so)."""
    obj = release_claim(**{"helm.sh/resource-policy": "keep"})
    fields: dict[str, Any] = {"f:metadata": {"f:annotations": {"f:helm.sh/resource-policy": {}}}}
    entry = {"manager": manager, "operation": "Update", "fieldsV1": fields}
    obj["metadata"]["managedFields"] = [entry]
    return obj


def test_a_keep_mark_kubectl_put_on_the_live_claim_keeps_nothing() -> None:
    """Helm's uninstall reads the stored release: a mark set by hand on the live claim only."""
    for manager in ("kubectl-annotate", "kubectl"):
        live = state(("v1", "PersistentVolumeClaim", keep_set_by(manager)))
        f = one(run(helm_release(), CONFIGMAP, live=live), Code.RELEASE_UNINSTALL_DELETES)
        assert f"was set by {manager} on the live object, not by the release" in f.evidence[1]
    by_helm = state(("v1", "PersistentVolumeClaim", keep_set_by("helm-controller")))
    assert run(helm_release(), CONFIGMAP, live=by_helm).decision.verdict is Verdict.ALLOW


def test_another_release_claims_do_not_count() -> None:
    live = state(("v1", "PersistentVolumeClaim", release_claim("other")))
    assert run(helm_release(), CONFIGMAP, live=live).decision.verdict is Verdict.ALLOW


def test_without_live_view_the_release_content_is_unknown_a_warning() -> None:
    result = run(helm_release(), CONFIGMAP)
    f = one(result, Code.RELEASE_CONTENT_UNKNOWN)
    assert f.severity is Severity.WARN
    assert "HelmRelease app/db is removed" in f.message
    assert "--live" in f.remediation
    assert result.decision.verdict is Verdict.WARN


def test_a_claim_the_deploy_deletes_itself_is_judged_by_its_own_change() -> None:
    live = state(("v1", "PersistentVolumeClaim", release_claim()))
    base_claim = claim().replace("name: data", "name: data-db-0")
    result = run(doc(helm_release(), base_claim), CONFIGMAP, live=live)
    assert Code.RELEASE_UNINSTALL_DELETES not in codes(result)
    assert Code.NOT_RETIRED in codes(result)


def test_a_retired_child_does_not_count() -> None:
    retired = claim(retire="moved").replace("name: data", "name: data-db-0")
    obj = release_claim(**{"prune-gate.io/retire": "moved"})
    result = run(
        doc(helm_release(), retired),
        doc(CONFIGMAP, retired),
        live=state(("v1", "PersistentVolumeClaim", obj)),
    )
    assert result.decision.verdict is Verdict.ALLOW
    # Marked live only (not merged): stage 1 does not hold, the claim counts.
    live_only = run(helm_release(), CONFIGMAP, live=state(("v1", "PersistentVolumeClaim", obj)))
    assert Code.RELEASE_UNINSTALL_DELETES in codes(live_only)


def test_a_helmrelease_the_deployer_orphans_cascades_nothing() -> None:
    kept = helm_release(
        annotations="\n  annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}"
    )
    result = run(kept, CONFIGMAP, live=state(("v1", "PersistentVolumeClaim", release_claim())))
    assert codes(result) == KEEP_FINDINGS


def test_speculative_candidate_also_defers_the_parent() -> None:
    live = state(("v1", "PersistentVolumeClaim", release_claim()))
    result = run(helm_release(), CONFIGMAP, live=live, context=Context.SPECULATIVE)
    assert codes(result) == {Code.RELEASE_UNINSTALL_DELETES, Code.SPECULATIVE_PRUNE}
    assert one(result, Code.SPECULATIVE_PRUNE).ref.kind == "HelmRelease"


# --- Kustomization -------------------------------------------------------------------------

KS_API = "kustomize.toolkit.fluxcd.io/v1"


def kustomization(spec: str = "prune: true") -> str:
    return f"""\
apiVersion: {KS_API}
kind: Kustomization
metadata: {{name: apps, namespace: flux-system}}
spec:
  interval: 10m
  path: ./apps
  sourceRef: {{kind: GitRepository, name: flux-system}}
  {spec}
"""


def live_kustomization(entries: list[str], **spec: Any) -> tuple[str, str, dict[str, Any]]:
    obj = {
        "metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {"prune": True, **spec},
        "status": {"inventory": {"entries": [{"id": e, "v": "v1"} for e in entries]}},
    }
    return (KS_API, "Kustomization", obj)


CLAIM_ID = "app_data__PersistentVolumeClaim"
CONFIGMAP_ID = "app_settings__ConfigMap"


def flux_claim(**meta: Any) -> tuple[str, str, dict[str, Any]]:
    return ("v1", "PersistentVolumeClaim", live_claim(**meta))


def test_removed_kustomization_with_prune_deletes_the_claims_in_its_inventory() -> None:
    live = state(live_kustomization([CLAIM_ID, CONFIGMAP_ID]), flux_claim())
    result = run(kustomization(), CONFIGMAP, live=live)
    f = one(result, Code.KUSTOMIZATION_PRUNES_GUARDED)
    assert f.ref == ObjectRef("kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps")
    assert "1 guarded object(s): PersistentVolumeClaim app/data" in f.message
    assert "spec.prune: true, spec.deletionPolicy: MirrorPrune (live)" in f.evidence
    assert any("listed in status.inventory" in e for e in f.evidence)
    assert any("deletionPolicy" in c and "Orphan" in c for c in f.commands())


@pytest.mark.parametrize(
    ("live_spec", "found"),
    [
        ({"deletionPolicy": "Orphan"}, False),
        ({"prune": False}, False),
        ({"prune": False, "deletionPolicy": "Delete"}, True),
        ({"prune": False, "deletionPolicy": "WaitForTermination"}, True),
        ({"suspend": True}, False),
    ],
    ids=["orphan", "prune-off", "delete", "wait", "suspended"],
)
def test_the_live_deletion_policy_decides(live_spec: dict[str, Any], found: bool) -> None:
    live = state(live_kustomization([CLAIM_ID], **live_spec), flux_claim())
    result = run(kustomization(), CONFIGMAP, live=live)
    assert (Code.KUSTOMIZATION_PRUNES_GUARDED in codes(result)) is found


def test_base_manifest_decides_when_the_kustomization_facts_are_not_live() -> None:
    """A LiveView whose Kustomization carries no facts (not listed): base says Orphan."""
    live = state(live_kustomization([CLAIM_ID]), flux_claim())
    ref = ObjectRef("kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps")
    live.objects[ref].facts.clear()
    orphan = run(kustomization("prune: true\n  deletionPolicy: Orphan"), CONFIGMAP, live=live)
    assert orphan.decision.verdict is Verdict.ALLOW
    pruned = run(kustomization(), CONFIGMAP, live=live)
    assert "(base manifest)" in one(pruned, Code.KUSTOMIZATION_PRUNES_GUARDED).evidence[0]


def test_a_claim_the_candidate_still_declares_moved_to_another_root() -> None:
    live = state(live_kustomization([CLAIM_ID]), flux_claim())
    result = run(kustomization(), doc(CONFIGMAP, claim()), live=live)
    assert Code.KUSTOMIZATION_PRUNES_GUARDED not in codes(result)


def test_children_flux_leaves_do_not_count() -> None:
    other = {
        "kustomize.toolkit.fluxcd.io/name": "db",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    for meta in (
        {"annotations": {"kustomize.toolkit.fluxcd.io/prune": "disabled"}},
        {"labels": other},
    ):
        live = state(live_kustomization([CLAIM_ID]), flux_claim(**meta))
        assert run(kustomization(), CONFIGMAP, live=live).decision.verdict is Verdict.ALLOW, meta


def test_kustomization_without_live_view_is_removed_blind() -> None:
    """Path mode: the Kustomization object leaves, what it applied is not read: a block of its
    own (issue 33), with --flux-root named as the way to see what it deletes."""
    result = run(kustomization(), CONFIGMAP)
    assert Code.KUSTOMIZATION_PRUNES_GUARDED not in codes(result)
    f = one(result, Code.KUSTOMIZATION_REMOVED)
    assert f.severity is Severity.BLOCK
    assert "Kustomization flux-system/apps is removed with pruning on" in f.message
    assert "spec.path ./apps" in f.message
    assert "--flux-root" in f.remediation and "spec.prune: false" in f.remediation
    assert "spec.prune: true, spec.deletionPolicy: MirrorPrune (base manifest)" in f.evidence
    assert result.decision.verdict is Verdict.BLOCK


@pytest.mark.parametrize(
    "spec",
    ["prune: false", "prune: true\n  deletionPolicy: Orphan", "prune: true\n  suspend: true"],
    ids=["prune-off", "orphan", "suspended"],
)
def test_a_removed_kustomization_that_deletes_nothing_is_not_blind(spec: str) -> None:
    """kustomize-controller's finalizer deletes nothing when suspended, with prune off
    (MirrorPrune) or with deletionPolicy Orphan (`finalizerShouldDeleteResources`)."""
    assert Code.KUSTOMIZATION_REMOVED not in codes(run(kustomization(spec), CONFIGMAP))


def test_a_removed_kustomization_read_live_is_judged_by_its_inventory_only() -> None:
    live = state(live_kustomization([CONFIGMAP_ID]))
    assert Code.KUSTOMIZATION_REMOVED not in codes(run(kustomization(), CONFIGMAP, live=live))


def test_speculative_candidate_defers_a_blind_kustomization_removal() -> None:
    result = run(kustomization(), CONFIGMAP, context=Context.SPECULATIVE)
    assert {Code.KUSTOMIZATION_REMOVED, Code.SPECULATIVE_PRUNE} <= codes(result)


# --- Application ---------------------------------------------------------------------------

APP_API = "argoproj.io/v1alpha1"
ARGO_FIN = "resources-finalizer.argocd.argoproj.io"


def application(finalizer: str | None = "resources-finalizer.argocd.argoproj.io") -> str:
    fin = f"\n  finalizers: [{finalizer}]" if finalizer else ""
    return f"""\
apiVersion: {APP_API}
kind: Application
metadata:
  name: shop
  namespace: argocd{fin}
spec:
  project: default
"""


def live_application(
    finalizers: list[str] | None = None, namespace_too: bool = False
) -> tuple[str, str, dict[str, Any]]:
    resources = [
        {
            "group": "",
            "version": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": "app",
            "name": "data",
        },
    ]
    if namespace_too:
        resources.append({"group": "", "version": "v1", "kind": "Namespace", "name": "app"})
    meta: dict[str, Any] = {"name": "shop", "namespace": "argocd"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return (APP_API, "Application", {"metadata": meta, "status": {"resources": resources}})


@pytest.mark.parametrize("suffix", ["", "/background", "/foreground"])
def test_removed_application_with_the_finalizer_deletes_what_it_synced(suffix: str) -> None:
    finalizer = f"resources-finalizer.argocd.argoproj.io{suffix}"
    live = state(live_application([finalizer]), flux_claim())
    result = run(application(finalizer), CONFIGMAP, live=live)
    f = one(result, Code.APPLICATION_DELETES_RESOURCES)
    assert f.ref == ObjectRef("argoproj.io", "Application", "argocd", "shop")
    assert f"finalizer {finalizer} (live)" in f.evidence
    assert "PersistentVolumeClaim app/data" in f.message
    assert any("finalizers" in c for c in f.commands())


def test_application_without_the_finalizer_or_with_delete_false() -> None:
    no_fin = state(live_application([]), flux_claim())
    assert run(application(), CONFIGMAP, live=no_fin).decision.verdict is Verdict.ALLOW
    kept = state(
        live_application(["resources-finalizer.argocd.argoproj.io"]),
        flux_claim(annotations={"argocd.argoproj.io/sync-options": "Prune=false, Delete=false"}),
    )
    assert run(application(), CONFIGMAP, live=kept).decision.verdict is Verdict.ALLOW


def test_the_live_finalizers_decide_over_the_base_manifest() -> None:
    """Base declares the finalizer, the live Application has none (removed by hand): nothing."""
    live = state(live_application([]), flux_claim())
    assert run(application(), CONFIGMAP, live=live).decision.verdict is Verdict.ALLOW


def test_a_namespace_the_application_synced_takes_its_claims_despite_their_keep_mark() -> None:
    """Argo CD deletes the Namespace; the namespace controller deletes what is in it, whatever
    Argo CD's own marks on the claims say."""
    kept = flux_claim(annotations={"argocd.argoproj.io/sync-options": "Delete=false"})
    live = state(live_application([ARGO_FIN], namespace_too=True), kept)
    f = one(run(application(), CONFIGMAP, live=live), Code.APPLICATION_DELETES_RESOURCES)
    assert any(
        e.startswith("PersistentVolumeClaim app/data is in Namespace app, which dies with it: ")
        for e in f.evidence
    )


# --- cascades of cascades --------------------------------------------------------------------


def nested(name: str, entries: list[str], **spec: Any) -> tuple[str, str, dict[str, Any]]:
    api, kind, obj = live_kustomization(entries, **spec)
    obj["metadata"]["name"] = name
    return (api, kind, obj)


def test_a_root_kustomization_takes_what_its_child_kustomizations_applied() -> None:
    child_id = "flux-system_db_kustomize.toolkit.fluxcd.io_Kustomization"
    live = state(live_kustomization([child_id]), nested("db", [CLAIM_ID]), flux_claim())
    f = one(run(kustomization(), CONFIGMAP, live=live), Code.KUSTOMIZATION_PRUNES_GUARDED)
    assert "PersistentVolumeClaim app/data" in f.message
    assert any("(Kustomization flux-system/db: " in e for e in f.evidence)
    # A child that orphans what it applied stops the cascade.
    orphan = state(
        live_kustomization([child_id]),
        nested("db", [CLAIM_ID], deletionPolicy="Orphan"),
        flux_claim(),
    )
    assert run(kustomization(), CONFIGMAP, live=orphan).decision.verdict is Verdict.ALLOW


def test_a_statefulset_it_applied_takes_the_claims_it_owns() -> None:
    sts_id = "app_db_apps_StatefulSet"
    owned = (
        "v1",
        "PersistentVolumeClaim",
        live_claim(
            "data-db-0",
            ownerReferences=[
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u"}
            ],
        ),
    )
    sts = {"metadata": {"name": "db", "namespace": "app"}, "spec": {}}
    live = state(live_kustomization([sts_id]), ("apps/v1", "StatefulSet", sts), owned)
    f = one(run(kustomization(), CONFIGMAP, live=live), Code.KUSTOMIZATION_PRUNES_GUARDED)
    assert "PersistentVolumeClaim app/data-db-0 is owned by StatefulSet app/db" in f.evidence[1]


def test_a_kustomization_that_lists_itself_does_not_loop() -> None:
    self_id = "flux-system_apps_kustomize.toolkit.fluxcd.io_Kustomization"
    live = state(live_kustomization([self_id, CLAIM_ID]), flux_claim())
    f = one(run(kustomization(), CONFIGMAP, live=live), Code.KUSTOMIZATION_PRUNES_GUARDED)
    assert "1 guarded object(s)" in f.message


# --- owners --------------------------------------------------------------------------------

DB = """\
apiVersion: db.example.com/v1
kind: Database
metadata: {name: db, namespace: app}
spec: {instances: 1}
"""


def owned_claim(*owners: tuple[str, str, str]) -> tuple[str, str, dict[str, Any]]:
    refs = [{"apiVersion": a, "kind": k, "name": n, "uid": f"u-{n}"} for a, k, n in owners]
    return ("v1", "PersistentVolumeClaim", live_claim("db-1", ownerReferences=refs))


#: An operator's cluster object the catalogue does not know: what makes it stateful is live, the
#: claims whose ownerReferences name it (a catalogued one is guarded itself: test_stateful_kinds).
DB_OWNER = ("db.example.com/v1", "Database", "db")


def test_removed_owner_of_a_claim_the_garbage_collector_deletes_it() -> None:
    result = run(DB, CONFIGMAP, live=state(owned_claim(DB_OWNER)))
    f = one(result, Code.OWNER_DELETES_DEPENDENTS)
    assert f.ref == ObjectRef("db.example.com", "Database", "app", "db")
    assert "PersistentVolumeClaim app/db-1" in f.message
    assert any("ownerReferences" in c for c in f.commands())


def test_a_dependent_with_another_owner_that_stays_survives() -> None:
    other = ("db.example.com/v1", "Database", "db2")
    db2 = DB.replace("name: db,", "name: db2,")
    result = run(doc(DB, db2), db2, live=state(owned_claim(DB_OWNER, other)))
    assert result.decision.verdict is Verdict.ALLOW
    # Both owners removed: nothing keeps it.
    both = run(doc(DB, db2), CONFIGMAP, live=state(owned_claim(DB_OWNER, other)))
    assert Code.OWNER_DELETES_DEPENDENTS in codes(both)


def test_statefulset_and_pod_owners_are_left_to_their_rules() -> None:
    sts = """\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: app}
spec: {serviceName: db, selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}}}
"""
    live = state(owned_claim(("apps/v1", "StatefulSet", "db")))
    assert Code.OWNER_DELETES_DEPENDENTS not in codes(run(sts, CONFIGMAP, live=live))


def test_a_cluster_scoped_custom_owner_finds_its_namespaced_dependents() -> None:
    crd = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: stores.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Store, plural: stores}
  versions: [{name: v1, served: true, storage: true}]
"""
    store = "apiVersion: example.com/v1\nkind: Store\nmetadata: {name: s1}\n"
    live = state(owned_claim(("example.com/v1", "Store", "s1")))
    result = run(doc(crd, store), doc(crd, CONFIGMAP), live=live)
    assert one(result, Code.OWNER_DELETES_DEPENDENTS).ref == ObjectRef(
        "example.com", "Store", "", "s1"
    )


# --- the index -----------------------------------------------------------------------------


def test_forgetting_objects_forgets_their_cascades() -> None:
    live = state(
        owned_claim(DB_OWNER),
        ("v1", "PersistentVolumeClaim", release_claim()),
        live_kustomization([CLAIM_ID]),
    )
    owner = ObjectRef("db.example.com", "Database", "app", "db")
    assert live.dependents(owner) == [ObjectRef("", "PersistentVolumeClaim", "app", "db-1")]
    assert live.owners(ObjectRef("", "PersistentVolumeClaim", "app", "db-1")) == [owner]
    live.delete(ObjectRef("", "PersistentVolumeClaim", "app", "db-1"))
    live.delete(ObjectRef("", "PersistentVolumeClaim", "app", "data-db-0"))
    ks = ObjectRef("kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps")
    assert live.applied_by(ks) == [ObjectRef("", "PersistentVolumeClaim", "app", "data")]
    live.delete(ks)
    assert (live.dependents(owner), live.release_members("app", "db"), live.applied_by(ks)) == (
        [],
        [],
        None,
    )


@pytest.mark.parametrize(
    "spec",
    [
        "prune: true\n  targetNamespace: store",
        "prune: true\n  path: ./apps/v2",
    ],
)
def test_a_kustomization_repointed_with_prune_prunes_its_inventory(spec: str) -> None:
    live = state(live_kustomization([CLAIM_ID, CONFIGMAP_ID]), flux_claim())
    head = kustomization(spec).replace(
        "  path: ./apps\n  sourceRef", "  sourceRef", spec.count("path")
    )
    result = run(kustomization(), head, live=live)
    f = one(result, Code.KUSTOMIZATION_PRUNES_GUARDED)
    assert "is re-pointed" in f.message and "PersistentVolumeClaim app/data" in f.message
    # Prune off: nothing is pruned; and a candidate that still declares the claim keeps it.
    assert Code.KUSTOMIZATION_PRUNES_GUARDED not in codes(
        run(
            kustomization("prune: false"),
            kustomization("prune: false\n  targetNamespace: x"),
            live=live,
        )
    )
    kept = run(doc(kustomization(), claim()), doc(head, claim()), live=live)
    assert Code.KUSTOMIZATION_PRUNES_GUARDED not in codes(kept)


def argo_app(options: str) -> str:
    return f"""\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: shop, namespace: argocd}}
spec:
  destination: {{namespace: app}}
  syncPolicy: {{automated: {{prune: true}}, syncOptions: [{options}]}}
"""


def run_argo(base_options: str, head_options: str) -> CheckResult:
    """The Application prunes Database app/db (which it deployed in base) in the candidate."""
    base = [
        *parse_stream(argo_app(base_options), "root.yaml"),
        *(replace(r, root="argocd:argocd/shop") for r in parse_stream(DB, "db.yaml")),
    ]
    head = parse_stream(argo_app(head_options), "root.yaml")
    return check_objects(
        base,
        head,
        context=Context.PREVIEW,
        policy=Policy(),
        today=TODAY,
        live=state(owned_claim(DB_OWNER)),
    )


def test_an_argo_cd_prune_with_orphan_propagation_leaves_the_dependents() -> None:
    orphan, default = "PrunePropagationPolicy=orphan", "PrunePropagationPolicy=foreground"
    assert Code.OWNER_DELETES_DEPENDENTS not in codes(run_argo(orphan, orphan))
    # under either spec it may prune the default way first: the dependents go
    assert Code.OWNER_DELETES_DEPENDENTS in codes(run_argo(default, orphan))
    assert Code.OWNER_DELETES_DEPENDENTS in codes(run_argo(orphan, default))
