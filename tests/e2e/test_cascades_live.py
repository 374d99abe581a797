"""Parents and cascades under `gate check --live`, against a real control plane, through the real
console script: a removed HelmRelease whose release made a claim, a removed owner of a claim, a
removed Namespace holding a claim no manifest declares, a removed Kustomization whose inventory
lists a claim, and a removed Application with the resources finalizer; and the skips that matter
(`helm.sh/resource-policy: keep`, `deletionPolicy: Orphan`).

The Flux and Argo CD CRDs are installed with schemaless bodies (`kube.crd_body`) at the versions
prune-gate lists; no controller runs, so the status a controller would write is written through
the API as the controller writes it (the Kustomization's through its status subresource).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import kube as k
from .kube import Cluster
from .test_live import check_live, configmap_yaml, findings

pytestmark = pytest.mark.e2e

FLUX_KS = ("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations")
FLUX_HR = ("helm.toolkit.fluxcd.io", "v2", "HelmRelease", "helmreleases")
ARGO_APP = ("argoproj.io", "v1alpha1", "Application", "applications")
ARGO_FINALIZER = "resources-finalizer.argocd.argoproj.io"


def _crd(group: str, version: str, kind: str, plural: str, status: bool) -> dict[str, Any]:
    body = k.crd_body(group, kind, plural)
    (served,) = body["spec"]["versions"]
    served["name"] = version
    if status:
        served["subresources"] = {"status": {}}
    return body


@pytest.fixture(scope="module")
def parent_crds(kube: Cluster) -> Iterator[None]:
    """The Flux Kustomization (status subresource, as Flux serves it), HelmRelease and Argo CD
    Application (no status subresource, as Argo CD serves it) CRDs, for this module."""
    ext: Any = client.ApiextensionsV1Api(kube.client)
    made = []
    for (group, version, kind, plural), status in (
        (FLUX_KS, True),
        (FLUX_HR, True),
        (ARGO_APP, False),
    ):
        name = f"{plural}.{group}"
        try:
            ext.create_custom_resource_definition(_crd(group, version, kind, plural, status))
            made.append(name)
        except ApiException as exc:
            if exc.status != 409:  # left by an earlier run on the same cluster: reuse it
                raise
        kube.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")
    try:
        yield
    finally:
        for name in made:
            k.delete_if_present(ext.delete_custom_resource_definition, name)


def custom(kube: Cluster) -> Any:
    return client.CustomObjectsApi(kube.client)


def create(
    kube: Cluster, resource: tuple[str, str, str, str], namespace: str, body: dict[str, Any]
) -> Any:
    group, version, kind, plural = resource
    body = {"apiVersion": f"{group}/{version}", "kind": kind, **body}
    return custom(kube).create_namespaced_custom_object(group, version, namespace, plural, body)


def claim_meta(kube: Cluster, namespace: str, name: str = "data", **ann: str) -> None:
    k.make_claim(kube.client, namespace, name, annotations=ann)


# --- HelmRelease -----------------------------------------------------------------------------


def helmrelease_yaml(namespace: str) -> str:
    return f"""\
    apiVersion: helm.toolkit.fluxcd.io/v2
    kind: HelmRelease
    metadata: {{name: db, namespace: {namespace}}}
    spec:
      interval: 10m
      chart: {{spec: {{chart: postgres, sourceRef: {{kind: HelmRepository, name: charts}}}}}}
    """


def release_annotations(namespace: str) -> dict[str, str]:
    return {"meta.helm.sh/release-name": "db", "meta.helm.sh/release-namespace": namespace}


def test_removed_helmrelease_uninstalls_the_claims_of_its_release(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    hr = helmrelease_yaml(namespace)
    create(kube, FLUX_HR, namespace, {"metadata": {"name": "db"}, "spec": {"interval": "10m"}})
    claim_meta(kube, namespace, "data-db-0", **release_annotations(namespace))

    code, report = check_live(kube, tmp_path, hr, configmap_yaml(namespace))

    assert code == 1
    assert findings(report, "db") == {"RELEASE_UNINSTALL_DELETES"}
    (f,) = report["findings"]
    assert f["object"]["kind"] == "HelmRelease"
    assert f"uninstalls release {namespace}/db" in f["message"]
    assert f"PersistentVolumeClaim {namespace}/data-db-0" in f["message"]


def test_claims_the_release_keeps_pass(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    claim_meta(
        kube,
        namespace,
        "data-db-0",
        **release_annotations(namespace),
        **{"helm.sh/resource-policy": "keep"},
    )

    code, report = check_live(
        kube, tmp_path, helmrelease_yaml(namespace), configmap_yaml(namespace)
    )

    assert (code, report["findings"]) == (0, [])


def test_a_keep_mark_only_kubectl_put_on_the_live_claim_keeps_nothing(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    """Helm's uninstall reads the stored release, which never had the mark: the claim dies."""
    claim_meta(kube, namespace, "data-db-0", **release_annotations(namespace))
    kube.kubectl("annotate", "-n", namespace, "pvc/data-db-0", "helm.sh/resource-policy=keep")

    code, report = check_live(
        kube, tmp_path, helmrelease_yaml(namespace), configmap_yaml(namespace)
    )

    assert code == 1
    (f,) = report["findings"]
    assert f["code"] == "RELEASE_UNINSTALL_DELETES"
    assert "set by kubectl-annotate on the live object, not by the release" in f["evidence"][1]


# --- an owner by ownerReferences -------------------------------------------------------------


def test_removed_custom_owner_of_a_claim_the_garbage_collector_deletes_it(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    group = f"{k.unique('e2e')}.example.com"
    ext: Any = client.ApiextensionsV1Api(kube.client)
    ext.create_custom_resource_definition(k.crd_body(group, "Database", "databases"))
    try:
        kube.kubectl(
            "wait", "--for=condition=Established", f"crd/databases.{group}", "--timeout=30s"
        )
        db = create(
            kube, (group, "v1", "Database", "databases"), namespace, {"metadata": {"name": "db"}}
        )
        owner = client.V1OwnerReference(
            api_version=f"{group}/v1", kind="Database", name="db", uid=db["metadata"]["uid"]
        )
        claim = client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="db-1", owner_references=[owner]),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        )
        k.core(kube.client).create_namespaced_persistent_volume_claim(namespace, claim)
        base = f"""\
        apiVersion: {group}/v1
        kind: Database
        metadata: {{name: db, namespace: {namespace}}}
        """

        code, report = check_live(kube, tmp_path, base, configmap_yaml(namespace))

        assert code == 1
        assert findings(report, "db") == {"OWNER_DELETES_DEPENDENTS"}
        (f,) = report["findings"]
        assert f"PersistentVolumeClaim {namespace}/db-1" in f["message"]
        assert any("ownerReferences" in a["text"] for a in f["actions"])
    finally:
        k.delete_if_present(ext.delete_custom_resource_definition, f"databases.{group}")


# --- a Namespace -----------------------------------------------------------------------------


def test_removed_namespace_holding_a_claim_no_manifest_declares(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    k.make_claim(kube.client, namespace, "undeclared")
    base = f"""\
    apiVersion: v1
    kind: Namespace
    metadata: {{name: {namespace}}}
    """

    code, report = check_live(kube, tmp_path, base, configmap_yaml("default"))

    assert code == 1
    assert findings(report, namespace) == {"NAMESPACE_HOLDS_CLAIMS"}
    (f,) = report["findings"]
    assert f"PersistentVolumeClaim {namespace}/undeclared is in the namespace" in f["evidence"]


# --- Kustomization ---------------------------------------------------------------------------


def kustomization_yaml(namespace: str, policy: str = "") -> str:
    return f"""\
    apiVersion: kustomize.toolkit.fluxcd.io/v1
    kind: Kustomization
    metadata: {{name: apps, namespace: {namespace}}}
    spec:
      interval: 10m
      path: ./apps
      prune: true{policy}
      sourceRef: {{kind: GitRepository, name: flux-system}}
    """


def live_kustomization(kube: Cluster, namespace: str, spec: dict[str, Any]) -> None:
    """A Kustomization whose inventory lists claim `data`, written through the status subresource
    as kustomize-controller writes it."""
    group, version, _kind, plural = FLUX_KS
    body = {"metadata": {"name": "apps"}, "spec": {"interval": "10m", "path": "./apps", **spec}}
    create(kube, FLUX_KS, namespace, body)
    entries = [{"id": f"{namespace}_data__PersistentVolumeClaim", "v": "v1"}]
    status = {"status": {"inventory": {"entries": entries}}}
    custom(kube).patch_namespaced_custom_object_status(
        group, version, namespace, plural, "apps", status
    )
    live = custom(kube).get_namespaced_custom_object(group, version, namespace, plural, "apps")
    assert live["status"]["inventory"]["entries"] == entries


def test_removed_kustomization_with_prune_deletes_the_claim_in_its_inventory(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    k.make_claim(kube.client, namespace, "data")
    live_kustomization(kube, namespace, {"prune": True})

    code, report = check_live(
        kube, tmp_path, kustomization_yaml(namespace), configmap_yaml(namespace)
    )

    assert code == 1
    assert findings(report, "apps") == {"KUSTOMIZATION_PRUNES_GUARDED"}
    (f,) = report["findings"]
    assert "spec.prune: true, spec.deletionPolicy: MirrorPrune (live)" in f["evidence"]
    assert f"PersistentVolumeClaim {namespace}/data" in f["message"]


def test_removed_kustomization_with_deletion_policy_orphan_passes(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    k.make_claim(kube.client, namespace, "data")
    live_kustomization(kube, namespace, {"prune": True, "deletionPolicy": "Orphan"})
    base = kustomization_yaml(namespace, "\n      deletionPolicy: Orphan")

    code, report = check_live(kube, tmp_path, base, configmap_yaml(namespace))

    assert (code, report["findings"]) == (0, [])


def test_a_flux_prune_scope_is_the_kustomizations_inventory_not_its_labels(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    """`--prune-scope flux:NS/NAME` reads what kustomize-controller itself prunes from: claim
    `data` is in the inventory with no Flux labels (pruned, so blocked); claim `copied` carries
    the labels but is in no inventory (Flux never prunes it: not a finding)."""
    k.make_claim(kube.client, namespace, "data")
    flux_labels = {
        "kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": namespace,
    }
    k.make_claim(kube.client, namespace, "copied", labels=flux_labels)
    live_kustomization(kube, namespace, {"prune": True})
    kept = kustomization_yaml(namespace)

    code, report = check_live(kube, tmp_path, kept, kept, f"--prune-scope=flux:{namespace}/apps")

    assert code == 1
    assert findings(report) == {"NOT_RETIRED"}
    (f,) = report["findings"]
    assert f["object"]["name"] == "data"
    cause = f"pruned: in the status.inventory of Kustomization {namespace}/apps"
    assert any(cause in e for e in f["evidence"]), f["evidence"]


# --- Application -----------------------------------------------------------------------------


def test_removed_application_with_the_resources_finalizer_deletes_what_it_synced(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    k.make_claim(kube.client, namespace, "data")
    group, version, _kind, plural = ARGO_APP
    resources = [
        {"version": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": "data"}
    ]
    body = {
        "metadata": {"name": "shop", "finalizers": [ARGO_FINALIZER]},
        # what Argo CD's own CRD requires too (the Argo CD e2e module installs that one)
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example.com/shop.git", "path": "shop"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
        },
        "status": {"resources": resources},  # no status subresource on Argo CD's CRD
    }
    create(kube, ARGO_APP, namespace, body)
    base = f"""\
    apiVersion: argoproj.io/v1alpha1
    kind: Application
    metadata:
      name: shop
      namespace: {namespace}
      finalizers: [{ARGO_FINALIZER}]
    spec: {{project: default}}
    """
    try:
        code, report = check_live(kube, tmp_path, base, configmap_yaml(namespace))

        assert code == 1
        assert findings(report, "shop") == {"APPLICATION_DELETES_RESOURCES"}
        (f,) = report["findings"]
        assert f"finalizer {ARGO_FINALIZER} (live)" in f["evidence"]
    finally:
        # No Argo CD runs to remove its finalizer: let the namespace go.
        with contextlib.suppress(ApiException):
            patch = {"metadata": {"finalizers": None}}
            custom(kube).patch_namespaced_custom_object(
                group, version, namespace, plural, "shop", patch
            )


def test_an_argocd_prune_scope_is_the_applications_status_resources_not_its_labels(
    kube: Cluster, namespace: str, tmp_path: Path, parent_crds: None
) -> None:
    """`--prune-scope argocd:NS/NAME` reads what the application controller itself prunes from:
    claim `data` is in the Application's status.resources with no tracking marks (pruned, so
    blocked); claim `copied` carries the instance label but is not listed (not a finding)."""
    k.make_claim(kube.client, namespace, "data")
    k.make_claim(kube.client, namespace, "copied", labels={"app.kubernetes.io/instance": "shop"})
    resources = [
        {"version": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": "data"}
    ]
    body = {
        "metadata": {"name": "shop"},  # no finalizer: nothing to clean up after
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example.com/shop.git", "path": "shop"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
        },
        "status": {"resources": resources},
    }
    create(kube, ARGO_APP, namespace, body)
    kept = configmap_yaml(namespace)

    scope = f"--prune-scope=argocd:{namespace}/shop"
    code, report = check_live(kube, tmp_path, kept, kept, scope)

    assert code == 1
    assert findings(report) == {"NOT_RETIRED"}
    (f,) = report["findings"]
    assert f["object"]["name"] == "data"
    cause = f"pruned: in the status.resources of Application {namespace}/shop"
    assert any(cause in e for e in f["evidence"]), f["evidence"]
