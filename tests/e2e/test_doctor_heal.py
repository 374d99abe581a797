"""`gate doctor` and `gate heal` against the real control plane: the incident's aftermath
diagnosed, a disposable claim released and recreated, a claim's volume rescued and bound again
by the claim git recreates, a pod on a node that stopped heartbeating force-deleted only once the
evidence holds, and a namespace stuck on a claim explained in one answer.

No kubelet runs here: where a kubelet would finish a graceful pod deletion, the test does it
(``force_delete_pod``), and says so. The node that dies is a Node whose heartbeat Lease is never
renewed: the real node-lifecycle controller marks it Unknown and taints it unreachable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .test_live import REPO, gate_command, run_gate
from .webhookserver import Webhook, serve_webhook

pytestmark = pytest.mark.e2e

UNREACHABLE = "node.kubernetes.io/unreachable"


def gate(kube: Cluster, cwd: Path, *args: str) -> tuple[int, Any, str]:
    """Run `gate ARGS --kubeconfig ... -o json`; the exit code, the parsed JSON and stderr."""
    done = run_gate(cwd, *args, f"--kubeconfig={kube.kubeconfig}", "-o", "json")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), (done.returncode, done.stdout, done.stderr)
    return done.returncode, json.loads(done.stdout), done.stderr


def claim_yaml(namespace: str, name: str = "data", extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata:
          name: {name}
          namespace: {namespace}
        spec:
          accessModes: [ReadWriteOnce]
          storageClassName: ""
          resources:
            requests:
              storage: 1Gi
        {extra}"""
    )


def make_volume(kube: Cluster, namespace: str, claim: str, marker: str) -> str:
    """A hostPath PersistentVolume pre-bound to `namespace/claim`, reclaimPolicy Delete, with
    `marker` in an annotation: what proves later that a claim got this very volume back."""
    name = k.unique("pv")
    k.core(kube.client).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name, annotations={"e2e/marker": marker}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteOnce"],
                persistent_volume_reclaim_policy="Delete",
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/{name}"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            ),
        )
    )
    return name


@pytest.fixture
def volumes(kube: Cluster) -> Iterator[list[str]]:
    """Names of the volumes a test made: deleted after it."""
    made: list[str] = []
    yield made
    for name in made:
        k.delete_if_present(k.core(kube.client).delete_persistent_volume, name)


@pytest.fixture(scope="module")
def dying_node(kube: Cluster) -> Iterator[str]:
    """A node that never heartbeats after it is made: node lifecycle marks it Unknown and taints
    it unreachable after its grace period. Asked for by the first test of the module, so that
    grace runs while the others do."""
    name = k.make_node(kube.client, k.unique("dying")).metadata.name
    try:
        yield name
    finally:
        k.delete_node(kube.client, name)


def pin(kube: Cluster, namespace: str, node: str, manifests: Path) -> tuple[str, str]:
    """The incident: claim `data` (as the manifests declare it) mounted by a Running pod on
    `node`, then deleted: it sits Terminating behind pvc-protection. Returns (pod, claim uid)."""
    kube.kubectl("apply", "-f", str(manifests))
    pod = k.make_pod(kube.client, namespace, node, ["data"], name=k.unique("web")).metadata.name
    core = k.core(kube.client)
    uid = core.read_namespaced_persistent_volume_claim("data", namespace).metadata.uid
    core.delete_namespaced_persistent_volume_claim("data", namespace)
    k.wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim(
                "data", namespace
            ).metadata.deletion_timestamp
        ),
        what="the claim to be Terminating",
    )
    return pod, uid


def kubelet_finishes(kube: Cluster, namespace: str, pod: str) -> None:
    """Once the pod has a deletionTimestamp, do what its kubelet would: finish the deletion."""
    core = k.core(kube.client)
    k.wait_for(
        lambda: (
            k.gone(core.read_namespaced_pod, pod, namespace)
            or core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp
        ),
        what=f"pod {pod} to be deleted",
    )
    k.force_delete_pod(kube.client, namespace, pod)


def events(kube: Cluster, namespace: str, name: str) -> list[Any]:
    return [
        e
        for e in k.core(kube.client).list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.source.component == "prune-gate"
    ]


def test_the_incident_aftermath_is_diagnosed_and_a_disposable_claim_is_released_and_recreated(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, dying_node: str
) -> None:
    manifests = tmp_path / "claim.yaml"
    manifests.write_text(claim_yaml(namespace))
    pod, old_uid = pin(kube, namespace, node, manifests)

    code, report, _ = gate(
        kube, tmp_path, "doctor", "-n", namespace, "--older-than", "0s", f"--manifests={manifests}"
    )
    assert code == 1
    [stuck] = report["stuck"]
    assert stuck["object"]["name"] == "data" and stuck["state"] == "WaitingOnPods"
    [p] = stuck["pods"]
    assert (p["name"], p["node"], p["phase"], p["nodeReady"]) == (pod, node, "Running", "True")
    assert p["since"] is not None and stuck["waitingSeconds"] >= 0
    assert stuck["declaredAt"].endswith("claim.yaml:1")
    assert any("empty volume" in e for e in stuck["evidence"])
    assert any("gate heal" in f for f in stuck["fixes"])

    # Not disposable: heal leaves it, and says how to go on.
    code, report, _ = gate(kube, tmp_path, "heal", "-n", namespace, "pvc/data", "--apply", "--yes")
    assert code == 1 and report["actions"] == []
    assert "--rescue" in report["skipped"][0]["why"]
    assert not k.core(kube.client).read_namespaced_pod(pod, namespace).metadata.deletion_timestamp

    # A person marks it by hand (kubectl annotate): `--yes` takes only such a mark.
    kube.kubectl("annotate", "-n", namespace, "pvc/data", "prune-gate.io/data=disposable")
    code, report, _ = gate(kube, tmp_path, "heal", "-n", namespace, "pvc/data")  # dry run
    assert code == 0 and [a["result"] for a in report["actions"]] == ["would do"]
    assert not k.core(kube.client).read_namespaced_pod(pod, namespace).metadata.deletion_timestamp

    code, report, _ = gate(kube, tmp_path, "heal", "-n", namespace, "pvc/data", "--apply", "--yes")
    assert code == 0, report
    [action] = report["actions"]
    assert (action["action"], action["object"]["name"], action["result"]) == (
        "DeletePod",
        pod,
        "done",
    )
    assert [e.reason for e in events(kube, namespace, "data")] == ["ClaimReleased"]

    kubelet_finishes(kube, namespace, pod)
    core = k.core(kube.client)
    k.wait_for(
        lambda: k.gone(core.read_namespaced_persistent_volume_claim, "data", namespace),
        what="the released claim to be gone",
    )
    kube.kubectl("apply", "-f", str(manifests))  # the deployer's next apply
    again = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert again.metadata.uid != old_uid and again.metadata.deletion_timestamp is None


def test_rescue_keeps_the_volume_and_the_recreated_claim_binds_to_the_same_one(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, volumes: list[str]
) -> None:
    marker = k.unique("marker")
    pv = make_volume(kube, namespace, "data", marker)
    volumes.append(pv)
    manifests = tmp_path / "claim.yaml"
    manifests.write_text(claim_yaml(namespace))
    core = k.core(kube.client)
    kube.kubectl("apply", "-f", str(manifests))
    k.wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound"
        ),
        what="the claim to bind",
    )
    pod = k.make_pod(kube.client, namespace, node, ["data"], name=k.unique("web")).metadata.name
    core.delete_namespaced_persistent_volume_claim("data", namespace)

    code, report, _ = gate(
        kube, tmp_path, "heal", "-n", namespace, "pvc/data", "--rescue", "--apply", "--yes"
    )
    assert code == 0, report
    assert [(a["action"], a["result"]) for a in report["actions"]] == [
        ("RetainVolume", "done"),
        ("DeletePod", "done"),
    ]
    assert core.read_persistent_volume(pv).spec.persistent_volume_reclaim_policy == "Retain"

    kubelet_finishes(kube, namespace, pod)
    k.wait_for(
        lambda: core.read_persistent_volume(pv).status.phase == "Released",
        what=f"volume {pv} to be Released",
    )
    code, report, _ = gate(
        kube, tmp_path, "heal", "-n", namespace, "pvc/data", "--rescue", "--apply", "--yes"
    )
    assert code == 0, report
    assert [(a["action"], a["result"]) for a in report["actions"]] == [("ReserveVolume", "done")]
    assert [e.reason for e in events(kube, "default", pv)] == ["VolumeRescued", "VolumeRescued"]

    kube.kubectl("apply", "-f", str(manifests))  # git recreates the claim, as it declares it
    bound = k.wait_for(
        lambda: (
            (c := core.read_namespaced_persistent_volume_claim("data", namespace)).status.phase
            == "Bound"
            and c
        ),
        what="the recreated claim to bind",
    )
    assert bound.spec.volume_name == pv
    assert core.read_persistent_volume(pv).metadata.annotations["e2e/marker"] == marker


def test_a_pod_on_a_node_that_stops_heartbeating_is_force_deleted_only_once_the_evidence_holds(
    kube: Cluster, namespace: str, tmp_path: Path, dying_node: str
) -> None:
    core = k.core(kube.client)
    stranded = k.make_pod(kube.client, namespace, dying_node, name="stranded").metadata.name
    held = k.make_pod(kube.client, namespace, dying_node, name="held").metadata.name
    core.patch_namespaced_pod(held, namespace, {"metadata": {"finalizers": ["e2e.example/hold"]}})
    for pod in (stranded, held):
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=1)
    node = k.wait_for(
        lambda: (
            (n := core.read_node(dying_node)).spec.taints
            and any(t.key == UNREACHABLE for t in n.spec.taints)
            and n
        ),
        timeout=180,
        what=f"node lifecycle to taint {dying_node} unreachable",
    )
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "Unknown"

    def heal(*thresholds: str) -> tuple[int, Any]:
        code, report, _ = gate(
            kube,
            tmp_path,
            "heal",
            "-n",
            namespace,
            "--older-than",
            "0s",
            "--apply",
            "--yes",
            *thresholds,
        )
        return code, report

    # Each threshold not met keeps the pod: the node has not been dead long enough; then the
    # pod is not far enough past its deadline.
    for thresholds in (
        ("--deadline-slack", "0s", "--node-dead-after", "1h"),
        ("--deadline-slack", "1h", "--node-dead-after", "0s"),
    ):
        code, report = heal(*thresholds)
        assert code == 1 and report["actions"] == [], report
        assert not k.gone(core.read_namespaced_pod, stranded, namespace)

    k.wait_for(
        lambda: (
            gate(kube, tmp_path, "doctor", "-n", namespace, "pod/stranded")[1]["stuck"][0]["state"]
            == "NodeUnreachable"
        ),
        what="the doctor to see the pod past its deadline on an unreachable node",
    )
    code, report = heal("--deadline-slack", "0s", "--node-dead-after", "0s")
    assert [(a["action"], a["object"]["name"], a["result"]) for a in report["actions"]] == [
        ("ForceDeletePod", stranded, "done")
    ]
    assert k.gone(core.read_namespaced_pod, stranded, namespace)
    [event] = events(kube, namespace, stranded)
    assert event.reason == "PodForceDeleted" and UNREACHABLE in event.message
    # The pod with a finalizer is reported, never force-deleted.
    assert code == 1
    [skip] = [s for s in report["skipped"] if s["object"]["name"] == held]
    assert "finalizers" in skip["why"]
    assert not k.gone(core.read_namespaced_pod, held, namespace)
    core.patch_namespaced_pod(held, namespace, {"metadata": {"finalizers": None}})


def test_a_ready_node_is_never_dead_whatever_its_taints(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    core = k.core(kube.client)
    pod = k.make_pod(kube.client, namespace, node, name="on-ready").metadata.name
    core.patch_node(node, {"spec": {"taints": [{"key": UNREACHABLE, "effect": "NoSchedule"}]}})
    core.delete_namespaced_pod(pod, namespace, grace_period_seconds=1)
    k.wait_for(
        lambda: (
            gate(
                kube, tmp_path, "doctor", "-n", namespace, "pod/on-ready", "--deadline-slack", "0s"
            )[1]["stuck"][0]["state"]
            == "WaitingOnKubelet"
        ),
        what="the pod to be past its deadline on a Ready node",
    )
    code, report, _ = gate(
        kube,
        tmp_path,
        "heal",
        "-n",
        namespace,
        "--older-than",
        "0s",
        "--deadline-slack",
        "0s",
        "--node-dead-after",
        "0s",
        "--apply",
        "--yes",
    )
    assert code == 1 and report["actions"] == []
    assert "Ready" in report["skipped"][0]["why"]
    assert not k.gone(core.read_namespaced_pod, pod, namespace)


def test_a_namespace_stuck_on_a_claim_names_the_claim_and_its_pinning_pod_in_one_answer(
    kube: Cluster, node: str, tmp_path: Path
) -> None:
    core = k.core(kube.client)
    ns = k.unique("e2e-stuck-ns")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        k.wait_for(
            lambda: not k.gone(core.read_namespaced_service_account, "default", ns),
            what=f"service account default in {ns}",
        )
        k.make_claim(kube.client, ns, "data")
        pod = k.make_pod(kube.client, ns, node, ["data"], name="web-0").metadata.name
        # The claim was pruned first, then someone deletes the namespace to clean up: the
        # namespace controller deletes pods before the rest, and no kubelet finishes them.
        core.delete_namespaced_persistent_volume_claim("data", ns)
        core.delete_namespace(ns)
        report = k.wait_for(
            lambda: (
                (r := gate(kube, tmp_path, "doctor", f"ns/{ns}")[1])["stuck"]
                and any(
                    c["object"]["kind"] == "PersistentVolumeClaim" for c in r["stuck"][0]["waitsOn"]
                )
                and r
            ),
            what="the namespace controller to delete the namespace's claim",
        )
        [stuck] = report["stuck"]
        assert stuck["state"] == "WaitingOnNamespaceContent"
        assert "PersistentVolumeClaim data" in stuck["reason"] and pod in stuck["reason"]
        claim = next(c for c in stuck["waitsOn"] if c["object"]["kind"] == "PersistentVolumeClaim")
        assert claim["state"] == "WaitingOnPods" and claim["pods"][0]["name"] == pod
    finally:
        k.force_delete_pods(kube.client, ns)
        k.delete_if_present(core.delete_namespace, ns)


def test_doctor_that_cannot_reach_the_cluster_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: Config
            clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
            users: [{name: u, user: {token: t}}]
            contexts: [{name: x, context: {cluster: c, user: u}}]
            current-context: x
            """
        )
    )
    done = run_gate(tmp_path, "doctor", "-A", f"--kubeconfig={config}")
    assert done.returncode == 2, done
    assert "cannot reach the API server" in done.stderr and "Traceback" not in done.stderr


def test_heal_watch_acts_only_where_the_policy_enables_it_and_stops_on_sigterm(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    core = k.core(kube.client)
    (tmp_path / "prune-gate.yaml").write_text(
        json.dumps(
            {
                "heal": {
                    "watch": {"releaseDisposableClaims": True},
                    "disposableClaims": [
                        {"namespace": namespace, "name": "scratch", "reason": "e2e scratch"}
                    ],
                }
            }
        )
    )
    pods = {}
    for claim in ("scratch", "precious"):
        k.make_claim(kube.client, namespace, claim)
        pods[claim] = k.make_pod(kube.client, namespace, node, [claim]).metadata.name
        core.delete_namespaced_persistent_volume_claim(claim, namespace)
    # What a deployer (a candidate commit) can do to any claim, Terminating or not: mark it
    # disposable. Unattended, heal does not take that mark.
    core.patch_namespaced_persistent_volume_claim(
        "precious", namespace, {"metadata": {"annotations": {"prune-gate.io/data": "disposable"}}}
    )
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith(("GITHUB_", "KUBECONFIG"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log = tmp_path / "heal-watch.log"
    with log.open("w") as log_file:
        watcher = start_heal_watch(namespace, kube, tmp_path, env, log_file)
    try:
        k.wait_for(
            lambda: (
                core.read_namespaced_pod(pods["scratch"], namespace).metadata.deletion_timestamp
            ),
            timeout=60,
            what="heal --watch to delete the pod that pins the disposable claim",
        )
        k.wait_for(lambda: events(kube, namespace, "scratch"), what="its ClaimReleased Event")
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=60)
    err = log.read_text()
    assert watcher.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert {"heal watch started", "heal action", "heal watch stopped"} <= {e["msg"] for e in lines}
    [left] = [e for e in lines if e["msg"] == "left alone" and "precious" in e["object"]]
    assert "heal.disposableClaims" in left["why"] and "speculative" in left["why"]
    assert not core.read_namespaced_pod(pods["precious"], namespace).metadata.deletion_timestamp


def start_heal_watch(
    namespace: str, kube: Cluster, cwd: Path, env: dict[str, str], log: IO[str]
) -> subprocess.Popen[str]:
    """`gate heal --watch` on `namespace`, logging to `log` (a file, not a pipe: a full pipe
    would block the watcher)."""
    return subprocess.Popen(
        [
            *gate_command(),
            "heal",
            "--watch",
            "--interval=1s",
            "--apply",
            "-n",
            namespace,
            "--older-than=0s",
            f"--kubeconfig={kube.kubeconfig}",
        ],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )


def test_the_webhook_publishes_stuck_deletions_and_records_one_event_per_object(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    core = k.core(kube.client)
    k.make_claim(kube.client, namespace, "data")
    pod = k.make_pod(kube.client, namespace, node, ["data"]).metadata.name
    core.delete_namespaced_persistent_volume_claim("data", namespace)  # before the webhook is up
    series = 'prune_gate_stuck_objects{kind="PersistentVolumeClaim",state="WaitingOnPods"}'

    def metrics(hook: Webhook) -> dict[str, float]:
        with urllib.request.urlopen(f"{hook.health_url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("prune_gate_stuck")
        }

    with serve_webhook(
        kube, tmp_path, args=["--stuck-interval=1s", "--stuck-older-than=0s"]
    ) as hook:
        k.wait_for(lambda: metrics(hook).get(series, 0) >= 1, what=f"{series} to be 1")
        [event] = k.wait_for(lambda: events(kube, namespace, "data"), what="DeletionStuck")
        assert event.reason == "DeletionStuck" and pod in event.message
        passes = metrics(hook)["prune_gate_stuck_detector_passes_total"]
        k.wait_for(
            lambda: metrics(hook)["prune_gate_stuck_detector_passes_total"] >= passes + 2,
            what="two more detector passes",
        )
        assert len(events(kube, namespace, "data")) == 1  # once per object, not per pass
        assert metrics(hook)["prune_gate_stuck_detector_errors_total"] == 0


def test_rescue_never_reserves_a_volume_whose_rescue_mark_someone_else_wrote(
    kube: Cluster, namespace: str, tmp_path: Path, volumes: list[str]
) -> None:
    """A deployer (or a candidate commit) applying a volume with heal's rescue mark does not get
    it reserved for a new claim: only heal's own write (its field manager) counts."""
    core = k.core(kube.client)
    name = k.unique("pv")
    volumes.append(name)
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(
                name=name, annotations={"prune-gate.io/rescued-claim-uid": "uid-of-a-gone-claim"}
            ),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteOnce"],
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/{name}"),
                claim_ref=client.V1ObjectReference(
                    namespace=namespace, name="data", uid="uid-of-a-gone-claim"
                ),
            ),
        )
    )
    k.wait_for(
        lambda: core.read_persistent_volume(name).status.phase == "Released",
        what=f"volume {name} to be Released (its claim does not exist)",
    )
    code, report, _ = gate(
        kube, tmp_path, "heal", "-n", namespace, "pvc/data", "--rescue", "--apply", "--yes"
    )
    assert code == 0 and report["actions"] == [], report
    assert core.read_persistent_volume(name).spec.claim_ref.uid == "uid-of-a-gone-claim"
