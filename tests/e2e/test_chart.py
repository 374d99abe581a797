"""The Helm chart against a real kube-apiserver: every object it renders is valid, and it installs.

Nothing runs the webhook's pods here (no kubelet, no scheduler), so the installed webhook never
answers. The real install registers it with failurePolicy Ignore and an objectSelector no object
in the cluster has: a registered webhook that cannot answer must not refuse DELETEs of the other
tests sharing this cluster. It is uninstalled in a `finally`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .webhookserver import REPO, free_port

pytestmark = pytest.mark.e2e

CHART = Path(__file__).resolve().parents[2] / "charts" / "prune-gate"
#: Kinds whose CRDs (cert-manager, the Prometheus operator) the test cluster does not have.
ABSENT_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")

Obj = dict[str, Any]


class Helm:
    """The pinned helm against the test cluster, with its own (temporary) config and cache."""

    def __init__(self, kube: Cluster, home: Path) -> None:
        self.kube = kube
        self.path = kube.binary("helm")
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(
        self, *args: str, values: Obj | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        extra = ["--values", "-"] if values is not None else []
        result = subprocess.run(
            [self.path, f"--kubeconfig={self.kube.kubeconfig}", *args, *extra],
            input=json.dumps(values) if values is not None else None,
            capture_output=True,
            text=True,
            check=False,
            env=self.env,
            timeout=180,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result


@pytest.fixture
def helm(kube: Cluster, tmp_path: Path) -> Helm:
    return Helm(kube, tmp_path / "helm")


def release_name() -> str:
    return f"chart-{uuid.uuid4().hex[:8]}"


def kubectl_json(kube: Cluster, *args: str) -> Obj:
    data: Obj = json.loads(kube.kubectl(*args, "-o", "json").stdout)
    return data


@pytest.mark.parametrize(
    "values",
    [
        {
            "liveReader": {"create": True},
            "networkPolicy": {"enabled": True},
            "healer": {"enabled": True},
        },
        {
            "tls": {"mode": "certManager"},
            "serviceMonitor": {"enabled": True},
            "webhook": {"clientCA": {"enabled": True, "configMap": "apiserver-webhook-ca"}},
        },
        {
            "tls": {"mode": "secret", "secret": {"name": "mine", "caBundle": "Zm9v"}},
            "replicaCount": 1,
            "podAntiAffinity": "hard",
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                }
            ],
        },
    ],
    ids=["helm-tls", "certManager", "secret"],
)
def test_every_rendered_object_is_valid_for_the_api_server(
    kube: Cluster, helm: Helm, namespace: str, values: Obj
) -> None:
    release = release_name()
    rendered = helm("template", release, str(CHART), "--namespace", namespace, values=values)
    objs = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    # The `helm test` pod is admitted only once its ServiceAccount exists, which a dry run never
    # makes: test_webhook_verify makes the hook's identity for real, then dry-runs the pod.
    present = [
        o
        for o in objs
        if not o["apiVersion"].startswith(ABSENT_GROUPS)
        and not (o["kind"] == "Pod" and o["metadata"]["annotations"]["helm.sh/hook"] == "test")
    ]
    assert {o["kind"] for o in present} >= {
        "ValidatingWebhookConfiguration",
        "Deployment",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "ConfigMap",
    }
    stream = yaml.safe_dump_all(present)
    applied = subprocess.run(
        [
            kube.binary("kubectl"),
            f"--kubeconfig={kube.kubeconfig}",
            "apply",
            "--dry-run=server",
            "--namespace",
            namespace,
            "-f",
            "-",
        ],
        input=stream,
        capture_output=True,
        text=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    lines = [line for line in applied.stdout.splitlines() if line.strip()]
    assert len(lines) == len(present), applied.stdout
    assert all(line.endswith("(server dry run)") for line in lines), applied.stdout


@pytest.fixture
def installed(kube: Cluster, helm: Helm, namespace: str) -> Iterator[tuple[str, str]]:
    """A real `helm install` of the chart in `namespace`, made harmless; uninstalled after."""
    release = release_name()
    values: Obj = {
        "webhook": {
            "failurePolicy": "Ignore",
            # Nothing carries this label: the API server never calls the (absent) pods.
            "objectSelector": {"matchLabels": {"prune-gate.io/e2e-chart": release}},
        },
        "liveReader": {"create": True},
        "healer": {"enabled": True},
        "policy": {"webhook": {"resync": "5m"}},
        "rbac": {
            "countedResources": [{"apiGroups": ["e2e.prune-gate.io"], "resources": ["widgets"]}]
        },
    }
    try:
        helm("install", release, str(CHART), "--namespace", namespace, values=values)
        yield release, namespace
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=60s", check=False)


def test_helm_install_registers_the_webhook_rbac_and_deployment(
    kube: Cluster, helm: Helm, installed: tuple[str, str]
) -> None:
    release, namespace = installed
    fullname = f"{release}-prune-gate"

    config = kubectl_json(kube, "get", "validatingwebhookconfiguration", fullname)
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"]["namespace"] == namespace
    assert {op for rule in hook["rules"] for op in rule["operations"]} == {
        "CREATE",
        "DELETE",
        "UPDATE",
    }
    assert [c["name"] for c in hook["matchConditions"]] == ["update-touches-guards"]
    excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert {"kube-system", namespace} <= set(excluded)

    secret = kubectl_json(kube, "get", "secret", "-n", namespace, f"{fullname}-tls")
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)

    deploy = kubectl_json(kube, "get", "deployment", "-n", namespace, fullname)
    assert deploy["spec"]["replicas"] == 2
    kube.kubectl("get", "service", "-n", namespace, fullname)
    kube.kubectl("get", "poddisruptionbudget", "-n", namespace, fullname)
    kube.kubectl("get", "clusterrole", f"{fullname}-live-reader")

    # The bound ServiceAccount may read what the cache watches and write Events, nothing more.
    sa = f"system:serviceaccount:{namespace}:{fullname}"

    def can(*args: str) -> bool:
        out = kube.kubectl("auth", "can-i", *args, f"--as={sa}", check=False)
        return out.stdout.strip() == "yes"

    for resource in ("pods", "persistentvolumeclaims", "persistentvolumes", "namespaces"):
        assert can("watch", resource, "--all-namespaces"), resource
    assert can("list", "statefulsets.apps", "--all-namespaces")
    assert can("watch", "customresourcedefinitions.apiextensions.k8s.io")
    assert can("get", "leases.coordination.k8s.io", "-n", "prune-gate")
    assert can("create", "events", "-n", "default")
    assert can("create", "events.events.k8s.io", "-n", "default")
    assert not can("delete", "persistentvolumeclaims", "--all-namespaces")
    assert not can("update", "leases.coordination.k8s.io", "-n", "prune-gate")
    assert not can("get", "secrets", "-n", "default")
    # Attack 12: counting custom resources must not let it read every Secret (its own tls.key).
    for verb in ("list", "watch"):
        assert not can(verb, "secrets", "--all-namespaces"), verb
        assert not can(verb, "secrets", "-n", namespace), verb
    assert not can("list", "gadgets.other.prune-gate.io")
    assert can("list", "deployments.apps", "--all-namespaces")
    # The stateful kinds: the API server took rules naming them with no CRD installed, and the
    # cache may watch them once one is (a watch it may not make would keep the webhook unready).
    named = {(g, r) for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert ("postgresql.cnpg.io", "clusters") in named
    # (a SubjectAccessReview: `kubectl auth can-i` resolves a resource by discovery, and no
    # CRD serves this one here)
    authz: Any = client.AuthorizationV1Api(kube.client)

    def may(verb: str) -> bool:
        attrs = {"verb": verb, "group": "postgresql.cnpg.io", "resource": "clusters"}
        review = {"spec": {"user": sa, "resourceAttributes": attrs}}
        return bool(authz.create_subject_access_review(review).status.allowed)

    assert may("list") and may("watch")
    assert not may("delete")

    # An upgrade keeps the CA (the chart looks the Secret up) and rolls pods on a policy change.
    before = deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    helm(
        "upgrade",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--reuse-values",
        "--set",
        "policy.webhook.resync=10m",
    )
    after_secret = kubectl_json(kube, "get", "secret", "-n", namespace, f"{fullname}-tls")
    assert after_secret["data"] == secret["data"]
    after = kubectl_json(kube, "get", "validatingwebhookconfiguration", fullname)
    assert after["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    deploy = kubectl_json(kube, "get", "deployment", "-n", namespace, fullname)
    assert deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != before
    config_map = kubectl_json(kube, "get", "configmap", "-n", namespace, fullname)
    # The objectSelector's key is protected: a deployer may not relabel an object out of it.
    policy = {
        "resync": "10m",
        "protectedLabels": ["prune-gate.io/e2e-chart"],
        # the chart's default deployers: Flux's and Argo CD's controllers
        "deployers": [
            "system:serviceaccount:flux-system:kustomize-controller",
            "system:serviceaccount:flux-system:helm-controller",
            "system:serviceaccount:argocd:argocd-application-controller",
        ],
    }
    expected = {"apiVersion": "prune-gate.io/v1", "webhook": policy}
    assert yaml.safe_load(config_map["data"]["prune-gate.yaml"]) == expected

    status = helm("status", release, "--namespace", namespace)
    assert "https://" in status.stdout and "/validate" in status.stdout


def test_the_healer_may_release_and_rescue_but_never_strip_a_finalizer_or_delete_a_claim(
    kube: Cluster, installed: tuple[str, str]
) -> None:
    release, namespace = installed
    sa = f"system:serviceaccount:{namespace}:{release}-prune-gate-healer"

    def can(*args: str) -> bool:
        out = kube.kubectl("auth", "can-i", *args, f"--as={sa}", check=False)
        return out.stdout.strip() == "yes"

    for resource in ("pods", "persistentvolumeclaims", "persistentvolumes", "nodes", "namespaces"):
        assert can("list", resource, "--all-namespaces"), resource
    assert can("delete", "pods", "--all-namespaces")
    assert can("patch", "persistentvolumes")
    assert can("create", "events", "-n", "default")
    # Finalizers are stripped by update/patch: the healer may do neither on pods or claims.
    for verb in ("update", "patch"):
        assert not can(verb, "pods", "--all-namespaces"), verb
        assert not can(verb, "persistentvolumeclaims", "--all-namespaces"), verb
    assert not can("delete", "persistentvolumeclaims", "--all-namespaces")
    assert not can("delete", "persistentvolumes")
    assert not can("delete", "nodes")
    assert not can("get", "secrets", "-n", namespace)
    deploy = kubectl_json(
        kube, "get", "deployment", "-n", namespace, f"{release}-prune-gate-healer"
    )
    assert deploy["spec"]["replicas"] == 1


def test_helm_uninstall_removes_the_cluster_scoped_objects(
    kube: Cluster, helm: Helm, namespace: str
) -> None:
    release = release_name()
    fullname = f"{release}-prune-gate"
    values: Obj = {
        "webhook": {
            "failurePolicy": "Ignore",
            "objectSelector": {"matchLabels": {"prune-gate.io/e2e-chart": release}},
        }
    }
    try:
        helm("install", release, str(CHART), "--namespace", namespace, values=values)
        kube.kubectl("get", "validatingwebhookconfiguration", fullname)
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=60s")
    for kind in ("validatingwebhookconfiguration", "clusterrole", "clusterrolebinding"):
        gone = kube.kubectl("get", kind, fullname, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, kind


# --- arming: the install refuses nothing until a Ready pod arms it ------------------------------

ARM_ANNOTATION = "prune-gate.io/failure-policy"


def policies(kube: Cluster, name: str) -> list[str]:
    config = kubectl_json(kube, "get", "validatingwebhookconfiguration", name)
    return [h["failurePolicy"] for h in config["webhooks"]]


def chart_webhook_argv(
    kube: Cluster, namespace: str, fullname: str, tmp: Path, port: int, health_port: int
) -> list[str]:
    """`gate webhook serve` with the installed Deployment's own arguments, run here: the
    chart's certificate, policy and flags, on loopback ports, with a kubeconfig that holds a
    token of the chart's ServiceAccount (so it has exactly the chart's RBAC)."""
    secret = kubectl_json(kube, "get", "secret", "-n", namespace, f"{fullname}-tls")
    for key in ("tls.crt", "tls.key"):
        (tmp / key).write_bytes(base64.b64decode(secret["data"][key]))
    config_map = kubectl_json(kube, "get", "configmap", "-n", namespace, fullname)
    (tmp / "prune-gate.yaml").write_text(config_map["data"]["prune-gate.yaml"])
    token = kube.kubectl("create", "token", fullname, "-n", namespace, "--duration=1h")
    admin = yaml.safe_load(Path(kube.kubeconfig).read_text())
    cluster = admin["clusters"][0]
    (tmp / "kubeconfig").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "sa", "user": {"token": token.stdout.strip()}}],
                "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "sa"}}],
                "current-context": "sa",
            }
        )
    )
    deploy = kubectl_json(kube, "get", "deployment", "-n", namespace, fullname)
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    local = {
        "--cert-file": str(tmp / "tls.crt"),
        "--key-file": str(tmp / "tls.key"),
        "--config": str(tmp / "prune-gate.yaml"),
        "--listen": f"127.0.0.1:{port}",
        "--health-port": str(health_port),
    }
    assert c["command"] == ["gate"] and c["args"][:2] == ["webhook", "serve"], c
    args = []
    for arg in c["args"][2:]:
        flag, eq, value = arg.partition("=")
        args.append(f"{flag}={local.get(flag, value)}" if eq else arg)  # a switch: --http2
    return [sys.executable, "-m", "webhook", "serve", *args, f"--kubeconfig={tmp / 'kubeconfig'}"]


def metric(health_url: str, name: str) -> float | None:
    """The sum over workers of a metric on the webhook's plain-HTTP /metrics; None if absent."""
    try:
        with urllib.request.urlopen(f"{health_url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if re.match(rf"{re.escape(name)}(\{{[^}}]*\}})? ", line)
    ]
    return sum(values) if values else None


def test_an_install_refuses_nothing_until_a_ready_pod_arms_it_and_upgrades_keep_it_so(
    kube: Cluster, helm: Helm, namespace: str, tmp_path: Path
) -> None:
    """The chart with its defaults (failurePolicy Fail, no objectSelector): while no pod is
    Ready, a guarded DELETE works; the real webhook, run here as the chart's ServiceAccount and
    as one of its pods, arms the configuration once that pod is Ready, after which the API
    server refuses a guarded DELETE it cannot ask about (the Service has no endpoints here); a
    `helm upgrade` keeps it armed, and one that chooses Ignore disarms it for good."""
    release = release_name()
    fullname = f"{release}-prune-gate"
    core = k.core(kube.client)
    work = [k.unique("e2e-arm-a"), k.unique("e2e-arm-b")]
    for ns in work:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    proc: subprocess.Popen[bytes] | None = None
    log = tmp_path / "webhook.log"
    try:
        helm("install", release, str(CHART), "--namespace", namespace, values={})
        config = kubectl_json(kube, "get", "validatingwebhookconfiguration", fullname)
        assert config["metadata"]["annotations"][ARM_ANNOTATION] == "Fail"
        assert policies(kube, fullname) == ["Ignore"]

        # No pod is Ready (nothing runs them): a claim and a namespace can be deleted.
        pods = k.wait_for(
            lambda: core.list_namespaced_pod(namespace).items, what="the chart's pods"
        )
        assert not any(
            c.type == "Ready" and c.status == "True"
            for p in pods
            for c in (p.status.conditions or [])
        )
        claim = k.make_claim(kube.client, work[0]).metadata.name
        kube.kubectl("delete", "pvc", claim, "-n", work[0], "--wait=false")
        kube.kubectl("delete", "namespace", work[0], "--wait=false")
        assert core.read_namespace(work[0]).metadata.deletion_timestamp is not None

        # The real webhook, as the chart runs it, standing in for one of the chart's pods.
        pod = pods[0].metadata.name
        port, health_port = free_port(), free_port()
        while health_port == port:
            health_port = free_port()
        argv = chart_webhook_argv(kube, namespace, fullname, tmp_path, port, health_port)
        health = f"http://127.0.0.1:{health_port}"
        env = {**os.environ, "POD_NAMESPACE": namespace, "POD_NAME": pod}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def alive() -> bool:
            assert proc is not None
            if proc.poll() is not None:
                raise AssertionError(f"webhook exited {proc.returncode}:\n{log.read_text()}")
            return True

        def waiting_for_the_pod() -> bool:
            return alive() and f"pod {namespace}/{pod} is not Ready" in log.read_text()

        k.wait_for(waiting_for_the_pod, timeout=120, what="the webhook to wait for its pod")
        # It serves, but its pod is not Ready. A worker says it waits for the pod once its own
        # cache is ready; /readyz is every worker's, so it may follow a moment later.
        k.wait_for(
            lambda: alive() and status_of(f"{health}/readyz") == 200,
            timeout=120,
            what="the webhook to be ready",
        )
        assert policies(kube, fullname) == ["Ignore"]

        # The kubelet's part: the pod becomes Ready. The webhook arms its configuration.
        core.patch_namespaced_pod_status(
            pod, namespace, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        )
        k.wait_for(
            lambda: alive() and policies(kube, fullname) == ["Fail"],
            timeout=120,
            what="the webhook to arm its configuration",
        )
        assert metric(health, "prune_gate_webhook_configuration_armed") == 1
        assert metric(health, "prune_gate_webhook_configuration_tampered_total") == 0

        # Armed, and it has effect: the API server cannot reach the Service, so it refuses.
        claim = k.make_claim(kube.client, work[1]).metadata.name
        refused = kube.kubectl("delete", "pvc", claim, "-n", work[1], "--wait=false", check=False)
        assert refused.returncode != 0
        assert 'failed calling webhook "prune-gate.prune-gate.io"' in refused.stderr
        obj = core.read_namespaced_persistent_volume_claim(claim, work[1])
        assert obj.metadata.deletion_timestamp is None

        # An upgrade with the same values leaves it armed: not disarmed and armed again.
        generation = kubectl_json(kube, "get", "validatingwebhookconfiguration", fullname)[
            "metadata"
        ]["generation"]
        helm("upgrade", release, str(CHART), "--namespace", namespace, "--reuse-values")
        after = kubectl_json(kube, "get", "validatingwebhookconfiguration", fullname)
        assert [h["failurePolicy"] for h in after["webhooks"]] == ["Fail"]
        assert after["metadata"]["generation"] == generation
        assert metric(health, "prune_gate_webhook_configuration_tampered_total") == 0

        # Choosing Ignore disarms it, and the running webhook does not arm it again.
        helm(
            "upgrade",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--reuse-values",
            "--set",
            "webhook.failurePolicy=Ignore",
        )
        k.wait_for(
            lambda: metric(health, "prune_gate_webhook_configuration_tampered_total") == 1,
            timeout=120,
            what="the webhook to see the choice of Ignore",
        )
        config = kubectl_json(kube, "get", "validatingwebhookconfiguration", fullname)
        assert config["metadata"]["annotations"][ARM_ANNOTATION] == "Ignore"
        assert [h["failurePolicy"] for h in config["webhooks"]] == ["Ignore"]
        assert kube.kubectl("get", "clusterrole", f"{fullname}-arm", check=False).returncode != 0
        kube.kubectl("delete", "pvc", claim, "-n", work[1], "--wait=false")
        alive()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
        text = log.read_text()
        assert "webhook armed" in text and "Traceback" not in text, text
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=60s", check=False)
        for ns in work:
            k.delete_if_present(core.delete_namespace, ns)
    gone = kube.kubectl("get", "validatingwebhookconfiguration", fullname, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
