"""`gate check --live` and `gate retire status` against a real control plane, through the real
console script: the whole incident (blocked, then allowed after stage 1), each live rule, prune
sets from Flux labels and Helm annotations, and every way of not seeing the cluster (exit 2).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.unit.helpers import GitRepo

from . import kube as k
from .kube import Cluster

pytestmark = pytest.mark.e2e

RETIRE = "prune-gate.io/retire"
FLUX_NAME_KEY = "kustomize.toolkit.fluxcd.io/name"
FLUX = {
    "kustomize.toolkit.fluxcd.io/name": "apps",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
}


REPO = Path(__file__).resolve().parents[2]


def gate_command() -> list[str]:
    """The console script installed beside this interpreter, else this checkout's `-m gate`."""
    beside = Path(sys.executable).parent / "gate"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "gate"]


def run_gate(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `gate ARGS` in `cwd` (no policy file there), outside any CI environment; `timeout`
    is a hang guard, not a speed target."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KUBECONFIG"))}
    env["CI"] = "false"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [*gate_command(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def check_live(
    kube: Cluster, tmp_path: Path, base: str, head: str, *extra: str
) -> tuple[int, dict[str, Any]]:
    """`gate check --live` on two YAML streams; returns the exit code and the JSON report."""
    (tmp_path / "base.yaml").write_text(textwrap.dedent(base))
    (tmp_path / "head.yaml").write_text(textwrap.dedent(head))
    done = run_gate(
        tmp_path,
        "check",
        "--base-manifests=base.yaml",
        "--head-manifests=head.yaml",
        "--context=merged",
        "--live",
        f"--kubeconfig={kube.kubeconfig}",
        "--format=json",
        *extra,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return done.returncode, json.loads(done.stdout)


def findings(report: dict[str, Any], name: str | None = None) -> set[str]:
    return {f["code"] for f in report["findings"] if name is None or f["object"]["name"] == name}


def claim_yaml(namespace: str, name: str = "data", annotations: str = "") -> str:
    return f"""\
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata:
      name: {name}
      namespace: {namespace}{annotations}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
    """


def configmap_yaml(namespace: str) -> str:
    return f"""\
    apiVersion: v1
    kind: ConfigMap
    metadata: {{name: settings, namespace: {namespace}}}
    data: {{mode: archive}}
    """


def retired_yaml(reason: str) -> str:
    """The annotations block that marks a claim_yaml for retirement."""
    return f'\n      annotations: {{{RETIRE}: "{reason}"}}'


def remove_claim(
    kube: Cluster, tmp_path: Path, namespace: str, retired: str = ""
) -> tuple[int, dict[str, Any]]:
    """`check_live` on a deploy that removes the claim data and keeps a ConfigMap; with
    `retired`, the base (the merged branch) carries stage 1's mark with that reason."""
    base = claim_yaml(namespace, annotations=retired_yaml(retired) if retired else "")
    return check_live(kube, tmp_path, base, configmap_yaml(namespace))


def delete_pod(kube: Cluster, namespace: str, name: str) -> None:
    """Force-delete a pod and wait until the API no longer has it."""
    k.force_delete_pod(kube.client, namespace, name)
    core = k.core(kube.client)
    k.wait_for(lambda: k.gone(core.read_namespaced_pod, name, namespace), what=f"pod {name} gone")


def annotate_claim(kube: Cluster, namespace: str, name: str, annotations: dict[str, str]) -> None:
    k.core(kube.client).patch_namespaced_persistent_volume_claim(
        name, namespace, {"metadata": {"annotations": annotations}}
    )


# ------------------------------------------------------------------------------ the incident


def test_the_incident_is_blocked_then_allowed_after_stage_1(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    k.make_claim(kube.client, namespace, "data")
    k.make_pod(kube.client, namespace, node, claims=["data"], name="web-0")

    code, report = remove_claim(kube, tmp_path, namespace)

    assert code == 1
    assert report["verdict"] == "block"
    assert findings(report, "data") == {"CLAIM_MOUNTED", "NOT_RETIRED"}
    mounted = next(f for f in report["findings"] if f["code"] == "CLAIM_MOUNTED")
    assert f"pod web-0 on node {node}" in mounted["message"]
    assert f"pod {namespace}/web-0 on node {node} (Running" in mounted["evidence"][0]
    assert "retire" in mounted["remediation"]
    not_retired = next(f for f in report["findings"] if f["code"] == "NOT_RETIRED")
    assert (
        f"no `{RETIRE}` annotation on the base revision nor on the live object"
        in not_retired["evidence"]
    )

    # Stage 1 merged and deployed: base and live claim are marked, and its last pod is gone.
    annotate_claim(kube, namespace, "data", {RETIRE: "moved to object storage"})
    delete_pod(kube, namespace, "web-0")

    code, report = remove_claim(kube, tmp_path, namespace, retired="moved to object storage")

    assert code == 0, report
    assert report["verdict"] == "allow"
    assert report["findings"] == []


def test_base_mark_not_yet_live_does_not_count(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Base says retired, but the retiring revision never reached the cluster: not retired."""
    k.make_claim(kube.client, namespace, "data")

    code, report = remove_claim(kube, tmp_path, namespace, retired="x")

    assert code == 1
    assert findings(report, "data") == {"NOT_RETIRED"}
    (f,) = report["findings"]
    assert f"`{RETIRE}` is on the base branch but not on the live object" in f["evidence"][1]


def test_live_mark_not_on_the_base_branch_does_not_count(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Attack 6: a speculative (unmerged) deploy applied the retire mark; the merged branch never
    retired the claim. Before, the live mark counted as stage 1 and the removal passed."""
    k.make_claim(kube.client, namespace, "data", annotations={RETIRE: "speculative"})

    code, report = remove_claim(kube, tmp_path, namespace)

    assert code == 1
    assert findings(report, "data") == {"NOT_RETIRED"}
    (f,) = report["findings"]
    assert (
        f'`{RETIRE}: "speculative"` is marked live but not on the base branch: a speculative '
        "deploy may have applied it"
    ) in f["evidence"]

    code, report = remove_claim(kube, tmp_path, namespace, retired="speculative")

    assert (code, report["findings"]) == (0, [])  # once merged too, stage 1 counts


def test_finished_pod_still_pins_the_claim(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    k.make_claim(kube.client, namespace, "data", annotations={RETIRE: "done"})
    k.make_pod(kube.client, namespace, node, claims=["data"], name="job-1", running=False)
    k.core(kube.client).patch_namespaced_pod_status(
        "job-1", namespace, {"status": {"phase": "Succeeded"}}
    )

    code, report = remove_claim(kube, tmp_path, namespace, retired="done")

    assert code == 1
    assert findings(report) == {"CLAIM_MOUNTED"}
    (f,) = report["findings"]
    assert f"kubectl delete pod -n {namespace} job-1" in f["remediation"]


def test_live_workload_template_is_a_remaining_consumer(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    k.make_claim(kube.client, namespace, "data", annotations={RETIRE: "done"})
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "web", "image": k.PAUSE_IMAGE}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
                },
            },
        },
    }
    k.apps(kube.client).create_namespaced_deployment(namespace, deployment)

    code, report = remove_claim(kube, tmp_path, namespace, retired="done")

    assert code == 1
    assert findings(report) == {"CONSUMER_REMAINS"}
    (f,) = report["findings"]
    assert f"live Deployment {namespace}/web mounts claim data in its pod template" in f["evidence"]


def test_setting_a_class_the_server_filled_in_differently_is_caught_live(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The manifest never named a class; the live claim has one (what the DefaultStorageClass
    admission plugin writes at creation: `standard` here, set directly so no cluster-wide default
    class leaks into other tests). A candidate that sets `fast` with Flux force on would
    delete and recreate the claim: blocked live, with the live value as evidence; setting
    `standard` is no change at all."""
    k.make_claim(kube.client, namespace, name="data", storage_class="standard")
    force = "\n      annotations: {kustomize.toolkit.fluxcd.io/force: enabled}"
    base = claim_yaml(namespace, annotations=force)

    def classed(cls: str) -> str:
        return base.replace("    spec:\n", f"    spec:\n      storageClassName: {cls}\n", 1)

    code, report = check_live(kube, tmp_path, base, classed("fast"))
    assert code == 1
    assert findings(report, "data") == {"FORCED_REPLACEMENT", "NOT_RETIRED"}
    (forced,) = [f for f in report["findings"] if f["code"] == "FORCED_REPLACEMENT"]
    assert (
        "spec.storageClassName (standard live, filled in by the API server -> fast)"
        in (forced["message"])
    )
    code, report = check_live(kube, tmp_path, base, classed("standard"))
    assert (code, report["verdict"]) == (0, "allow")


def test_reclaim_delete_without_snapshot_loses_data(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    pv_name = k.unique("pv")
    core = k.core(kube.client)
    core.create_persistent_volume(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": "",
                "hostPath": {"path": f"/tmp/{pv_name}"},
                "claimRef": {"namespace": namespace, "name": "data"},
            },
        }
    )
    try:
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "annotations": {RETIRE: "done"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        core.create_namespaced_persistent_volume_claim(namespace, claim)

        code, report = remove_claim(kube, tmp_path, namespace, retired="done")

        assert findings(report) == {"RECLAIM_DELETE_LOSES_DATA"}
        (f,) = report["findings"]
        assert f["severity"] == "warn"  # retired: a warning, not a block
        assert code == 0
        assert f"PersistentVolume {pv_name}: persistentVolumeReclaimPolicy: Delete" in f["evidence"]
    finally:
        core.patch_persistent_volume(pv_name, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
        core.delete_persistent_volume(pv_name)


def test_declared_object_already_terminating_wedges_the_deploy(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    k.make_claim(kube.client, namespace, "data")
    k.make_pod(kube.client, namespace, node, claims=["data"], name="web-0")
    core = k.core(kube.client)
    core.delete_namespaced_persistent_volume_claim("data", namespace)  # stuck: pvc-protection
    k.wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim(
                "data", namespace
            ).metadata.deletion_timestamp
        ),
        what="claim data Terminating",
    )

    code, report = check_live(kube, tmp_path, claim_yaml(namespace), claim_yaml(namespace))

    assert code == 1
    assert findings(report) == {"ALREADY_TERMINATING"}
    (f,) = report["findings"]
    assert "finalizers: kubernetes.io/pvc-protection" in f["evidence"]


# ---------------------------------------------------------------------------------- prune sets


def test_flux_prune_set_contains_an_object_base_never_had(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    flux = {**FLUX, FLUX_NAME_KEY: namespace}  # this test's own Kustomization
    k.make_claim(kube.client, namespace, "data", labels=flux)  # declared in base and head
    k.make_claim(kube.client, namespace, "stray", labels=flux)  # created by an older revision
    k.make_claim(kube.client, namespace, "other", labels=FLUX)  # another Kustomization's

    code, report = check_live(
        kube,
        tmp_path,
        claim_yaml(namespace),
        claim_yaml(namespace),
        f"--prune-scope=flux:flux-system/{namespace}",
    )

    assert code == 1
    assert findings(report) == {"NOT_RETIRED"}
    (f,) = report["findings"]
    assert f["object"]["name"] == "stray"
    cause = f"cause: pruned: owned by flux:flux-system/{namespace} and not in the candidate"
    assert cause in f["evidence"]
    assert f["source"] is None  # no manifest in base: the live object is the only evidence


def test_helm_prune_set_takes_a_crd_with_its_custom_resources(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    group = f"{k.unique('e2e')}.example.com"
    crd_name = f"widgets.{group}"
    helm = {"meta.helm.sh/release-name": "shop", "meta.helm.sh/release-namespace": namespace}
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name, "annotations": helm},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    ext: Any = client.ApiextensionsV1Api(kube.client)
    ext.create_custom_resource_definition(crd)
    try:
        kube.kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=30s")
        k.wait_for(
            lambda: kube.kubectl("get", crd_name, "-A", check=False).returncode == 0,
            what=f"{crd_name} served",
        )
        custom: Any = client.CustomObjectsApi(kube.client)
        for i in range(3):
            custom.create_namespaced_custom_object(
                group,
                "v1",
                namespace,
                "widgets",
                {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": f"w{i}"}},
            )
        k.make_claim(kube.client, namespace, "cache", annotations=helm)  # pruned too

        code, report = check_live(
            kube,
            tmp_path,
            configmap_yaml(namespace),
            configmap_yaml(namespace),
            f"--prune-scope=helm:{namespace}/shop",
        )

        assert code == 1
        assert findings(report, crd_name) == {"CRD_HOLDS_RESOURCES"}
        crd_finding = next(f for f in report["findings"] if f["object"]["name"] == crd_name)
        assert "while 3 custom resource(s) of its kind exist" in crd_finding["message"]
        assert findings(report, "cache") == {"NOT_RETIRED"}
    finally:
        ext.delete_custom_resource_definition(crd_name)


# ------------------------------------------------------------------------ cannot see: exit 2


def _kubeconfig(kube: Cluster, tmp_path: Path, **change: Any) -> Path:
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    cluster.update(change.get("cluster", {}))
    if "user" in change:
        doc["users"][0]["user"] = change["user"]
    del user
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _check_with(tmp_path: Path, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "m.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    return run_gate(
        tmp_path,
        "check",
        "--base-manifests=m.yaml",
        "--head-manifests=m.yaml",
        f"--kubeconfig={kubeconfig}",
        "--live",
    )


def test_unreachable_api_is_exit_2_with_the_reason(kube: Cluster, tmp_path: Path) -> None:
    port = _closed_port()
    config = _kubeconfig(kube, tmp_path, cluster={"server": f"https://127.0.0.1:{port}"})

    done = _check_with(tmp_path, config)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"error: list namespaces: cannot reach the API server at https://127.0.0.1:{port}: "
    )
    assert "Connection refused" in done.stderr
    assert "Traceback" not in done.stderr


def test_wrong_certificate_authority_is_exit_2(kube: Cluster, tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    not_the_ca = doc["users"][0]["user"].get("client-certificate-data")
    if not not_the_ca:
        pytest.skip("the kubeconfig has no inline client certificate to stand in for a wrong CA")
    config = _kubeconfig(kube, tmp_path, cluster={"certificate-authority-data": not_the_ca})

    done = _check_with(tmp_path, config)

    assert done.returncode == 2
    assert "error: list namespaces: TLS with the API server at" in done.stderr
    assert "certificate-authority" in done.stderr


def test_forbidden_is_exit_2_naming_the_permissions(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    core = k.core(kube.client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    config = _kubeconfig(kube, tmp_path, user={"token": token})

    done = _check_with(tmp_path, config)

    assert done.returncode == 2
    assert done.stderr.startswith("error: list namespaces: forbidden (403)")
    assert "needs get and list on pods" in done.stderr


def test_bad_token_is_exit_2(kube: Cluster, tmp_path: Path) -> None:
    bogus = base64.urlsafe_b64encode(b"not-a-token").decode()
    config = _kubeconfig(kube, tmp_path, user={"token": bogus})

    done = _check_with(tmp_path, config)

    assert done.returncode == 2
    assert "rejected the credentials (401 Unauthorized)" in done.stderr


# ------------------------------------------------------------------------------ retire status


def test_retire_status_names_what_the_claim_waits_on(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    k.make_claim(kube.client, namespace, "data", annotations={RETIRE: "moved to s3"})
    k.make_claim(kube.client, namespace, "kept")
    k.make_pod(kube.client, namespace, node, claims=["data"], name="web-0")

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        done = run_gate(
            tmp_path, "retire", "status", "-n", namespace, f"--kubeconfig={kube.kubeconfig}", *args
        )
        assert done.returncode == 0, done.stderr
        return done

    text = status().stdout
    assert text.splitlines()[0] == f'claim {namespace}/data  {RETIRE}: "moved to s3"'
    assert "stage 1 deployed; waiting on 1 consumer(s)" in text
    assert f"pod {namespace}/web-0 on node {node} (Running" in text
    assert "safe to remove from the manifests now: no" in text
    assert "kept" not in text

    delete_pod(kube, namespace, "web-0")

    (claim,) = json.loads(status("-o", "json").stdout)["claims"]
    assert claim["stage"] == "ready"
    assert claim["safeToRemove"] is True
    assert claim["pods"] == [] and claim["workloads"] == []

    unmarked = status("kept").stdout
    assert "not marked for retirement" in unmarked

    missing = run_gate(
        tmp_path, "retire", "status", "-n", namespace, "nope", f"--kubeconfig={kube.kubeconfig}"
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: no claim named nope in namespace {namespace}")


def test_retire_status_with_base_does_not_count_a_live_only_mark(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Attack 6, the status door: a mark only a speculative deploy applied is `unmerged`, as
    `gate check --live` judges it; once the merged branch carries it, the claim is ready."""
    k.make_claim(kube.client, namespace, "data", annotations={RETIRE: "speculative"})
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/claim.yaml": textwrap.dedent(claim_yaml(namespace))}, "base")

    def status() -> dict[str, Any]:
        done = run_gate(
            tmp_path,
            "retire",
            "status",
            "-n",
            namespace,
            f"--kubeconfig={kube.kubeconfig}",
            f"--repo={repo.root}",
            "--base=HEAD",
            "-o",
            "json",
        )
        assert done.returncode == 0, done.stderr
        (claim,) = json.loads(done.stdout)["claims"]
        return dict(claim)

    unmerged = status()
    assert (unmerged["stage"], unmerged["safeToRemove"]) == ("unmerged", False)
    assert "stage 1 counts only from the merged branch" in unmerged["next"]

    retired = claim_yaml(namespace, annotations=retired_yaml("speculative"))
    repo.commit({"deploy/claim.yaml": textwrap.dedent(retired)}, "stage 1 merged")
    assert status()["stage"] == "ready"
