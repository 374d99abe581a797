"""Two-stage retirement through the merge queue, with the real deployer (issue 11, item 3).

main v0 declares a claim and a pod that mounts it; stage 1, merged and deployed by Flux, marks the
claim ``prune-gate.io/retire`` and drops the pod. Stage 2 drops the claim, and reaches the cluster
twice: first as a merge-queue candidate, which may be evicted, then merged. The doors it passes
are the ones ``examples/github/merge-queue.yml`` wires up:

- speculative: ``gate check --context speculative --defer-to DIR --live`` defers the deletion
  (exit 0, verdict defer) and writes DIR, the candidate with the claim kept as base declares it;
  CI holds the webhook's speculation fence for the candidate and Flux applies DIR: the claim
  stays. Were the raw candidate applied instead, the fence makes the cluster refuse Flux's prune
  (the claim untouched, the Kustomization Ready=False with the refusal's code).
- evicted: main (stage 1) is served again and the fence released: the same claim, nothing lost.
- merged: ``gate check --context merged --live`` allows the candidate; Flux applies it and prunes
  the claim, and only then does the claim go.

The deployer is kustomize-controller itself (``flux`` fixture, ``flux.py``), fed tarballs from
loopback; the webhook is the real server with the speculation fence configured; ``gate`` is the
console script. No kubelet runs: the test finishes a pruned pod's graceful deletion as the
kubelet would once its containers stopped.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from . import kube as k
from .flux import FLUX_APP, OWNER_NAME, Flux
from .kube import Cluster
from .test_flux_prune import claim_yaml, mark_running, pod_yaml, read_claim
from .test_live import run_gate
from .webhookserver import (
    DEPLOYER,
    RETIRE,
    Webhook,
    delete_claim,
    deny,
    refusal_reason,
    serve_webhook,
    wait_refused,
)

pytestmark = pytest.mark.e2e

CLAIM, POD, SETTINGS, SOURCE, APP = "data", "app", "settings", "repo", FLUX_APP
REASON = "moved to data-v2"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
#: The queue's branch for the candidate, as GitHub names a merge group's ref.
QUEUE_BRANCH = "gh-readonly-queue/main/pr-11"


def settings_yaml(storage: str) -> str:
    """Something every revision declares; its value tells which revision Flux applied."""
    return f"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {SETTINGS}
data:
  storage: {storage}
"""


def v0_files(node: str) -> dict[str, str]:
    return {
        "claim.yaml": claim_yaml(),
        "pod.yaml": pod_yaml(node),
        "settings.yaml": settings_yaml("data"),
    }


def stage1_files() -> dict[str, str]:
    """Stage 1: the claim marked for retirement, its consumer gone."""
    return {"claim.yaml": claim_yaml(REASON), "settings.yaml": settings_yaml("data")}


def candidate_files() -> dict[str, str]:
    """Stage 2: the claim's manifest removed (and the settings pointed at its successor)."""
    return {"settings.yaml": settings_yaml("data-v2")}


def write_dir(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def read_dir(root: Path) -> dict[str, str]:
    """Every file of ``root`` as Flux would get it in the tarball."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(root.iterdir()) if p.is_file()}


def assert_intact(kube: Cluster, flux: Flux, ns: str, uid: str) -> None:
    """The claim is the one v0 made (same uid), marked by stage 1 and not being deleted; the
    failure says what the Kustomization and its controller say."""
    claim = read_claim(kube, ns)
    found = (claim.metadata.uid, claim.metadata.deletion_timestamp, claim.metadata.annotations)
    if found[:2] != (uid, None) or (found[2] or {}).get(RETIRE) != REASON:
        status = json.dumps(flux.read_kustomization(ns, APP).get("status"), indent=1)
        raise AssertionError(
            f"claim {ns}/{CLAIM}: uid {found[0]} (v0 made {uid}), deletionTimestamp {found[1]}, "
            f"annotations {found[2]}\nKustomization status: {status}\n"
            f"--- kustomize-controller log ({flux.log}), last lines ---\n{flux.log_tail()}"
        )


def settings_storage(kube: Cluster, ns: str) -> str:
    return str(k.core(kube.client).read_namespaced_config_map(SETTINGS, ns).data["storage"])


def finish_pod_deletion(kube: Cluster, flux: Flux, ns: str) -> None:
    """Wait for Flux's prune of the pod (a deletionTimestamp), then end it as the kubelet would
    once the containers stopped: a delete with grace period 0."""
    core = k.core(kube.client)

    def pruned() -> bool:
        try:
            pod = core.read_namespaced_pod(POD, ns)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return pod.metadata.deletion_timestamp is not None

    flux.wait(pruned, timeout=120, what=f"Flux to prune pod {ns}/{POD}")
    k.force_delete_pod(kube.client, ns, POD)
    flux.wait(
        lambda: k.gone(core.read_namespaced_pod, POD, ns), timeout=120, what=f"pod {ns}/{POD} gone"
    )


def check(
    kube: Cluster, cwd: Path, base: Path, head: Path, ns: str, context: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`gate check --live` of two rendered directories; the run and its JSON report."""
    done = run_gate(
        cwd,
        "check",
        f"--base-manifests={base}",
        f"--head-manifests={head}",
        f"--context={context}",
        f"--namespace={ns}",
        "--live",
        f"--kubeconfig={kube.kubeconfig}",
        "--format=json",
        *extra,
    )
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"gate check gave no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        ) from None
    return done, report


@pytest.fixture
def hook(kube: Cluster, tmp_path: Path) -> Iterator[Webhook]:
    """The webhook, with the speculation fence of the tests' policy, for this test only."""
    served_from = tmp_path / "webhook"
    served_from.mkdir()
    with serve_webhook(kube, served_from) as served:
        yield served


def test_stage_two_is_deferred_under_the_fence_survives_eviction_and_prunes_on_merge(
    kube: Cluster, flux: Flux, app: str, node: str, hook: Webhook, tmp_path: Path
) -> None:
    ns = app
    deployer = kube.impersonating(DEPLOYER)
    lease = f"{hook.fence_namespace}/{hook.fence_name}"

    def fence(*args: str) -> subprocess.CompletedProcess[str]:
        return run_gate(
            tmp_path, "fence", *args, "--lease", lease, f"--kubeconfig={kube.kubeconfig}"
        )

    # main v0: the claim and its consumer, applied by Flux.
    flux.git_repository(ns, SOURCE)
    v0 = flux.serve(ns, SOURCE, "main", v0_files(node))
    flux.kustomization(ns, APP, SOURCE)
    assert flux.wait_reconciled(ns, APP, v0, ready=True)["reason"] == "ReconciliationSucceeded"
    claim = read_claim(kube, ns)
    assert claim.metadata.labels[OWNER_NAME] == APP  # applied by Flux, not by the test
    assert PVC_PROTECTION in (claim.metadata.finalizers or [])
    uid = claim.metadata.uid
    mark_running(kube, ns)

    # Stage 1 merged: the claim marked, the pod dropped. Flux applies it and prunes the pod.
    stage1 = flux.serve(ns, SOURCE, "main", stage1_files())
    assert (
        flux.wait_reconciled(ns, APP, stage1, ready=True)["message"]
        == f"Applied revision: {stage1}"
    )
    finish_pod_deletion(kube, flux, ns)
    assert_intact(kube, flux, ns, uid)

    # Stage 2 in the queue: the speculative check defers the deletion into DIR.
    stage1_dir = write_dir(tmp_path / "stage1", stage1_files())
    candidate_dir = write_dir(tmp_path / "candidate", candidate_files())
    deferred_dir = tmp_path / "speculative"
    candidate_id = flux.server.publish(QUEUE_BRANCH, candidate_files()).revision.rpartition(":")[2]
    done, report = check(
        kube, tmp_path, stage1_dir, candidate_dir, ns, "speculative", f"--defer-to={deferred_dir}"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["verdict"] == "defer", report
    codes = {(f["code"], f["severity"], f["object"]["name"]) for f in report["findings"]}
    assert ("SPECULATIVE_PRUNE", "defer", CLAIM) in codes, report["findings"]
    deferred = read_dir(deferred_dir)
    record = json.loads(Path(f"{deferred_dir}.deferred.json").read_text(encoding="utf-8"))
    assert [(e["object"]["kind"], e["object"]["name"]) for e in record["kept"]] == [
        ("PersistentVolumeClaim", CLAIM)
    ], record
    # One file per input file, the claim in base's: exactly as stage 1 declares it (no keep
    # annotation, no namespace added: Flux's targetNamespace places it, as it placed base's).
    assert sorted(deferred) == ["claim.yaml", "settings.yaml"], record
    assert record["kept"][0]["file"] == "claim.yaml", record
    assert yaml.safe_load(deferred["claim.yaml"]) == yaml.safe_load(claim_yaml(REASON))
    assert yaml.safe_load(deferred["settings.yaml"]) == yaml.safe_load(settings_yaml("data-v2"))

    held = fence("hold", "--holder", candidate_id)
    assert held.returncode == 0, held.stderr
    try:
        refused = wait_refused(
            delete_claim(deployer, ns, CLAIM, dry_run=True), "the webhook to obey the fence"
        )
        assert refusal_reason(refused)[0] == "SPECULATION_FENCE", refusal_reason(refused)

        # The speculative deploy applies DIR: the candidate's change, the claim kept.
        speculative = flux.serve(ns, SOURCE, QUEUE_BRANCH, deferred)
        ready = flux.wait_reconciled(ns, APP, speculative, ready=True)
        assert ready["message"] == f"Applied revision: {speculative}", ready
        assert settings_storage(kube, ns) == "data-v2"
        assert_intact(kube, flux, ns, uid)

        # What the fence is for: the raw candidate, applied while it is held, prunes nothing.
        raw = flux.serve(ns, SOURCE, QUEUE_BRANCH, read_dir(candidate_dir))
        assert raw.endswith(candidate_id)
        refused_prune = flux.wait_reconciled(ns, APP, raw, ready=False)
        assert refused_prune["reason"] == "PruneFailed", refused_prune
        message = refused_prune["message"]
        assert f"PersistentVolumeClaim/{ns}/{CLAIM} delete failed" in message, message
        assert "prune-gate SPECULATION_FENCE" in message, message
        assert candidate_id in message, message
        assert_intact(kube, flux, ns, uid)
        assert f"{ns}_{CLAIM}__PersistentVolumeClaim" in flux.inventory(ns, APP)
        assert flux.serve(ns, SOURCE, QUEUE_BRANCH, deferred) == speculative
        assert (
            flux.wait_reconciled(ns, APP, speculative, ready=True)["message"]
            == f"Applied revision: {speculative}"
        )

        # Evicted: main (stage 1) again, the fence released. Nothing was lost.
        assert flux.serve(ns, SOURCE, "main", stage1_files()) == stage1
        assert (
            flux.wait_reconciled(ns, APP, stage1, ready=True)["message"]
            == f"Applied revision: {stage1}"
        )
        assert settings_storage(kube, ns) == "data"
    finally:
        released = fence("release", "--holder", candidate_id)
    assert released.returncode == 0, released.stderr
    status = fence("status")
    assert status.stdout.startswith("free"), status.stdout + status.stderr
    assert_intact(kube, flux, ns, uid)

    # Merged: checked again live, allowed; Flux prunes the claim, and only now.
    done, report = check(kube, tmp_path, stage1_dir, candidate_dir, ns, "merged")
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["verdict"] == "allow", report
    flux.wait(
        lambda: deny(delete_claim(deployer, ns, CLAIM, dry_run=True)) is None,
        timeout=120,
        what="the webhook to see the fence released",
    )
    merged = flux.serve(ns, SOURCE, "main", candidate_files())
    assert (
        flux.wait_reconciled(ns, APP, merged, ready=True)["message"]
        == f"Applied revision: {merged}"
    )
    flux.wait(
        lambda: k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, CLAIM, ns),
        timeout=120,
        what=f"claim {ns}/{CLAIM} gone",
    )
    assert f"{ns}_{CLAIM}__PersistentVolumeClaim" not in flux.inventory(ns, APP)
