"""The incident with the real deployer: Flux's kustomize-controller prunes a mounted claim.

main declares a claim and a pod (scheduled on a test node) that mounts it; a merge-queue
candidate drops the claim. Without prune-gate, Flux applies the candidate, prunes the claim, and
the claim sticks Terminating behind ``kubernetes.io/pvc-protection`` (the dev cluster runs
kube-controller-manager with every controller, pvc-protection among them); serving main again
does not bring it back: the wedge. With the webhook, Flux's DELETE is refused, the claim is
untouched, the Kustomization says why (Ready=False, the refusal's code in its message) and keeps
the claim in its inventory; serving main again makes it Ready by itself. After the wedge,
`gate doctor` names what pins the claim and `gate heal` releases it, and Flux recreates it.

kustomize-controller runs as a process (``flux`` fixture, see ``flux.py``) and fetches each
revision from a tarball served on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import kube as k
from .flux import FLUX_APP, OWNER_NAME, Flux
from .kube import Cluster
from .test_live import run_gate
from .webhookserver import (
    DEPLOYER,
    RETIRE,
    Webhook,
    claim_terminating,
    delete_claim,
    events,
    serve_webhook,
    wait_refused,
)

pytestmark = pytest.mark.e2e

PVC_PROTECTION = "kubernetes.io/pvc-protection"
CLAIM, POD, SOURCE, APP = "data", "app", "repo", FLUX_APP


def claim_yaml(retire: str | None = None) -> str:
    """The claim; with `retire`, marked for retirement (stage 1) with that reason."""
    annotations = f"  annotations:\n    {RETIRE}: {json.dumps(retire)}\n" if retire else ""
    return f"""\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {CLAIM}
{annotations}spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
"""


def pod_yaml(node: str) -> str:
    """The consumer: scheduled on ``node`` (no scheduler runs), so pvc-protection counts it."""
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 30
  containers:
    - name: main
      image: {k.PAUSE_IMAGE}
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: {CLAIM}
"""


def main_files(node: str) -> dict[str, str]:
    return {"claim.yaml": claim_yaml(), "pod.yaml": pod_yaml(node)}


def candidate_files(node: str) -> dict[str, str]:
    """The candidate of the incident: the claim's manifest is gone, its consumer is not."""
    return {"pod.yaml": pod_yaml(node)}


def read_claim(kube: Cluster, ns: str) -> Any:
    return k.core(kube.client).read_namespaced_persistent_volume_claim(CLAIM, ns)


def mark_running(kube: Cluster, ns: str) -> None:
    """Report the pod Running, as its kubelet would (there is none)."""
    stamp = k.now().isoformat()
    k.core(kube.client).patch_namespaced_pod_status(
        POD,
        ns,
        {
            "status": {
                "phase": "Running",
                "startTime": stamp,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
            }
        },
    )


def deploy_main(kube: Cluster, flux: Flux, ns: str, node: str) -> str:
    """Serve main, let Flux apply it, and check what it applied; return main's revision."""
    flux.git_repository(ns, SOURCE)
    main = flux.serve(ns, SOURCE, "main", main_files(node))
    flux.kustomization(ns, APP, SOURCE)
    ready = flux.wait_reconciled(ns, APP, main, ready=True)
    assert ready["reason"] == "ReconciliationSucceeded", ready
    claim = read_claim(kube, ns)
    assert claim.metadata.labels[OWNER_NAME] == APP  # applied by Flux, not by the test
    assert PVC_PROTECTION in (claim.metadata.finalizers or [])
    assert f"{ns}_{CLAIM}__PersistentVolumeClaim" in flux.inventory(ns, APP)
    mark_running(kube, ns)
    return main


@pytest.fixture
def hook(kube: Cluster, tmp_path: Path) -> Iterator[Webhook]:
    """The webhook for one test only (not the module's ``webhook``): the test without it must
    not find it registered, whatever order the tests run in. It is unregistered before the
    namespace is deleted."""
    with serve_webhook(kube, tmp_path) as served:
        yield served


def test_without_prune_gate_flux_prunes_the_mounted_claim_and_main_cannot_bring_it_back(
    kube: Cluster, flux: Flux, app: str, node: str
) -> None:
    ns = app
    main = deploy_main(kube, flux, ns, node)
    uid = read_claim(kube, ns).metadata.uid

    candidate = flux.serve(ns, SOURCE, "gh-readonly-queue/main/pr-7", candidate_files(node))
    ready = flux.wait_reconciled(ns, APP, candidate, ready=True)
    assert ready["reason"] == "ReconciliationSucceeded", ready
    # Flux's DELETE went through; pvc-protection holds the claim while the pod mounts it.
    claim = read_claim(kube, ns)
    assert claim.metadata.deletion_timestamp is not None, "Flux did not prune the claim"
    assert claim.metadata.finalizers == [PVC_PROTECTION]
    assert f"{ns}_{CLAIM}__PersistentVolumeClaim" not in flux.inventory(ns, APP)

    # The candidate is evicted; main is served again, and Flux says it applied it: Ready, the
    # claim "unchanged" and back in its inventory ...
    assert flux.serve(ns, SOURCE, "main", main_files(node)) == main
    flux.wait_reconciled(ns, APP, main, ready=True)
    assert f"{ns}_{CLAIM}__PersistentVolumeClaim" in flux.inventory(ns, APP)
    # ... but a deletion cannot be undone: the same claim, still Terminating (the wedge).
    claim = read_claim(kube, ns)
    assert claim.metadata.uid == uid, "the claim was recreated"
    assert claim.metadata.deletion_timestamp is not None, "the claim came back"


def test_with_the_webhook_flux_prune_is_refused_and_main_heals_it(
    kube: Cluster, flux: Flux, app: str, node: str, hook: Webhook
) -> None:
    ns = app
    main = deploy_main(kube, flux, ns, node)
    deployer = kube.impersonating(DEPLOYER)
    # Let the webhook's cache see the pod before Flux's real DELETE is sent.
    wait_refused(delete_claim(deployer, ns, CLAIM, dry_run=True), "the webhook sees the pod")

    candidate = flux.serve(ns, SOURCE, "gh-readonly-queue/main/pr-7", candidate_files(node))
    refused = flux.wait_reconciled(ns, APP, candidate, ready=False)
    assert refused["reason"] == "PruneFailed", refused
    message = refused["message"]
    assert f"PersistentVolumeClaim/{ns}/{CLAIM} delete failed" in message, message
    assert "prune-gate CLAIM_MOUNTED" in message, message
    assert f"pod {ns}/{POD} on node {node}" in message, message
    assert not claim_terminating(kube, ns, CLAIM), "a deletionTimestamp appeared"
    # kustomize-controller >= 1.9 keeps the refused prune in its inventory (and retries it).
    assert f"{ns}_{CLAIM}__PersistentVolumeClaim" in flux.inventory(ns, APP)
    # The webhook knew whose DELETE it was: Flux's own service account.
    blocked = flux.wait(
        lambda: events(kube, ns, CLAIM, "PruneBlocked"), timeout=120, what="a PruneBlocked event"
    )
    assert f"DELETE by {DEPLOYER} refused" in blocked[0].message, blocked[0].message

    assert flux.serve(ns, SOURCE, "main", main_files(node)) == main
    healed = flux.wait_reconciled(ns, APP, main, ready=True)
    assert healed["reason"] == "ReconciliationSucceeded", healed
    assert healed["message"] == f"Applied revision: {main}"
    assert not claim_terminating(kube, ns, CLAIM)


def test_after_the_wedge_doctor_names_the_pod_and_heal_lets_flux_recreate_the_claim(
    kube: Cluster, flux: Flux, app: str, node: str, tmp_path: Path
) -> None:
    """The incident's aftermath with the real deployer: Flux pruned the mounted claim and main
    cannot bring it back. `gate doctor` names the pod that pins it and that main still declares
    it; `gate heal --apply` releases it once its data is marked disposable; Flux's next
    reconciliation of main recreates it (a new claim, not Terminating)."""
    ns = app
    main = deploy_main(kube, flux, ns, node)
    uid = read_claim(kube, ns).metadata.uid
    candidate = flux.serve(ns, SOURCE, "gh-readonly-queue/main/pr-7", candidate_files(node))
    flux.wait_reconciled(ns, APP, candidate, ready=True)
    assert flux.serve(ns, SOURCE, "main", main_files(node)) == main
    flux.wait_reconciled(ns, APP, main, ready=True)
    assert read_claim(kube, ns).metadata.deletion_timestamp is not None  # the wedge

    manifests = tmp_path / "main"
    for name, text in main_files(node).items():
        (manifests / name).parent.mkdir(parents=True, exist_ok=True)
        (manifests / name).write_text(text)
    done = run_gate(
        tmp_path,
        "doctor",
        "-n",
        ns,
        "--older-than=0s",
        f"--manifests={manifests}",
        f"--kubeconfig={kube.kubeconfig}",
        "-o",
        "json",
    )
    assert done.returncode == 1, done.stderr
    [stuck] = json.loads(done.stdout)["stuck"]
    assert stuck["state"] == "WaitingOnPods" and stuck["pods"][0]["name"] == POD
    assert stuck["pods"][0]["node"] == node
    assert stuck["declaredAt"].endswith("claim.yaml:1")

    # A person marks it by hand (kubectl annotate): `--apply --yes` takes only such a mark.
    kube.kubectl("annotate", "-n", ns, f"pvc/{CLAIM}", "prune-gate.io/data=disposable")
    done = run_gate(
        tmp_path,
        "heal",
        "-n",
        ns,
        f"pvc/{CLAIM}",
        "--apply",
        "--yes",
        f"--kubeconfig={kube.kubeconfig}",
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [a["action"] for a in json.loads(done.stdout)["actions"]] == ["DeletePod"]
    k.wait_for(
        lambda: k.core(kube.client).read_namespaced_pod(POD, ns).metadata.deletion_timestamp,
        what="the pinning pod to be deleted",
    )
    k.force_delete_pod(kube.client, ns, POD)  # the kubelet finishing the shutdown
    k.wait_for(
        lambda: k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, CLAIM, ns),
        what="the released claim to be gone",
    )
    # Flux's next reconciliation of main (asked for, instead of waiting for its interval).
    flux.custom.patch_namespaced_custom_object(
        "kustomize.toolkit.fluxcd.io",
        "v1",
        ns,
        "kustomizations",
        APP,
        {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": k.now().isoformat()}}},
    )
    back = k.wait_for(
        lambda: (
            not k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, CLAIM, ns)
            and read_claim(kube, ns)
        ),
        timeout=120,
        what="Flux to recreate the claim",
    )
    assert back.metadata.uid != uid and back.metadata.deletion_timestamp is None
    assert back.metadata.labels[OWNER_NAME] == APP
