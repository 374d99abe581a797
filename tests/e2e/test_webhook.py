"""The admission webhook against the real control plane: real deletions through the API server.

One webhook per module: `python -m webhook serve --self-signed --register` in a subprocess, so the
real gunicorn server answers over TLS with its own CA and the real watch cache feeds the
decisions; the registration is removed when the server gets SIGTERM, which the teardown checks.

Before a refusal is asserted, the test waits until a server-side dry-run delete is refused: the
dry run is decided exactly like the real one, so that wait only lets the watch cache catch up with
the objects the test just made, and a real delete is never sent to a cache that has not seen them.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook import tls

from . import kube as k
from .kube import Cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEPLOYER = "system:serviceaccount:flux-system:kustomize-controller"
RETIRE = "prune-gate.io/retire"


@dataclass
class Webhook:
    """A running webhook server and what the tests need to reach it."""

    url: str
    ca_file: Path
    cert_dir: Path
    registration: str
    fence_namespace: str
    fence_name: str
    log: Path

    def get(self, path: str) -> tuple[int, str]:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(f"{self.url}{path}", context=ctx, timeout=5) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _registered(kube: Cluster, name: str) -> bool:
    api = client.AdmissionregistrationV1Api(kube.client)
    return not k.gone(api.read_validating_webhook_configuration, name)


@pytest.fixture(scope="module")
def webhook(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The webhook, served and registered; stopped and unregistered after the module."""
    tmp = tmp_path_factory.mktemp("webhook")
    suffix = uuid.uuid4().hex[:6]
    fence_ns = f"e2e-fence-{suffix}"
    core = k.core(kube.client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=fence_ns)))
    rbac = client.RbacAuthorizationV1Api(kube.client)
    binding = f"prune-gate-e2e-deployer-{suffix}"
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=binding),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="ServiceAccount", name="kustomize-controller", namespace="flux-system"
                )
            ],
        )
    )
    policy = tmp / "prune-gate.yaml"
    policy.write_text(
        json.dumps(
            {
                "webhook": {
                    "deployers": [DEPLOYER],
                    "breakGlassGroups": ["sre-oncall"],
                    "fence": {"namespace": fence_ns, "name": "speculation-fence"},
                    "resync": "5m",
                }
            }
        )
    )
    port = _free_port()
    name = f"prune-gate-e2e-{suffix}"
    log = tmp / "webhook.log"
    cert_dir = tmp / "certs"
    argv = [
        sys.executable,
        "-m",
        "webhook",
        "serve",
        "--self-signed",
        "--cert-dir",
        str(cert_dir),
        "--register",
        "--name",
        name,
        "--listen",
        f"127.0.0.1:{port}",
        "--config",
        str(policy),
        "--kubeconfig",
        kube.kubeconfig,
        "--failure-policy",
        "Fail",
        "--timeout-seconds",
        "5",
        "--threads",
        "4",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    hook = Webhook(
        f"https://127.0.0.1:{port}",
        cert_dir / "ca.crt",
        cert_dir,
        name,
        fence_ns,
        "speculation-fence",
        log,
    )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"webhook exited {proc.returncode}:\n{log.read_text()}")
            try:
                return hook.get("/readyz")[0] == 200 and _registered(kube, name)
            except OSError:
                return False

        k.wait_for(ready, timeout=60, what="the webhook to be ready and registered")
        yield hook
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        registered_after = _registered(kube, name)
        rbac.delete_cluster_role_binding(binding)
        core.delete_namespace(fence_ns)
        assert not registered_after, "the registration outlived the server"
        assert proc.returncode == 0, log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()


# ------------------------------------------------------------------------------------ helpers


def _deny(call: Callable[[], Any]) -> ApiException | None:
    """Run a delete; the ApiException when the webhook refused it, None when it was allowed."""
    try:
        call()
    except ApiException as exc:
        if exc.status == 403 and "prune-gate" in str(exc.body):
            return exc
        raise
    return None


def _reason(exc: ApiException) -> tuple[str, str]:
    body = json.loads(exc.body or "{}")
    return str(body.get("reason")), str(body.get("message"))


def _delete_claim(api: Any, ns: str, name: str, dry_run: bool = False) -> Callable[[], Any]:
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    return lambda: k.core(api).delete_namespaced_persistent_volume_claim(name, ns, **kwargs)


def _wait_refused(call: Callable[[], Any], what: str) -> ApiException:
    """Wait until a dry-run call is refused (the cache caught up); return the refusal."""
    return k.wait_for(lambda: _deny(call), timeout=30, what=what)


def _claim_terminating(kube: Cluster, ns: str, name: str) -> bool:
    obj = k.core(kube.client).read_namespaced_persistent_volume_claim(name, ns)
    return obj.metadata.deletion_timestamp is not None


def _events(kube: Cluster, ns: str, name: str, reason: str) -> list[Any]:
    items = k.core(kube.client).list_namespaced_event(ns).items
    return [e for e in items if e.involved_object.name == name and e.reason == reason]


def _ignore_missing(call: Callable[[], Any]) -> Callable[[], Any]:
    """The call, with 404 (already gone, e.g. a Terminating claim that finished) as success."""

    def run() -> Any:
        try:
            return call()
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None

    return run


def _has_event(kube: Cluster, ns: str, name: str, reason: str) -> Callable[[], list[Any]]:
    return lambda: _events(kube, ns, name, reason)


def _cleanup_claims(kube: Cluster, ns: str) -> None:
    """Remove pods, then claims, so the namespace fixture may delete the namespace."""
    k.force_delete_pods(kube.client, ns)
    v1 = k.core(kube.client)
    k.wait_for(lambda: not v1.list_namespaced_pod(ns).items, timeout=30, what="pods gone")
    for c in v1.list_namespaced_persistent_volume_claim(ns).items:
        delete = _ignore_missing(_delete_claim(kube.client, ns, c.metadata.name))
        k.wait_for(lambda: _deny(delete) is None, timeout=30, what=f"{c.metadata.name} deletable")  # noqa: B023
    k.wait_for(
        lambda: not v1.list_namespaced_persistent_volume_claim(ns).items,
        timeout=60,
        what="claims gone",
    )


@pytest.fixture
def clean(kube: Cluster, namespace: str, webhook: Webhook) -> Iterator[str]:
    """The test's namespace, emptied of pods and claims before the namespace fixture deletes it."""
    try:
        yield namespace
    finally:
        _cleanup_claims(kube, namespace)


# -------------------------------------------------------------------------------------- tests


def test_mounted_claim_is_refused_then_deleted_once_retired_and_unmounted(
    kube: Cluster, clean: str, node: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    pod = k.make_pod(kube.client, ns, node, [claim]).metadata.name
    _wait_refused(_delete_claim(kube.client, ns, claim, dry_run=True), "cache sees the pod")

    refused = _deny(_delete_claim(kube.client, ns, claim))
    assert refused is not None, "a mounted claim was deleted"
    reason, message = _reason(refused)
    assert reason == "CLAIM_MOUNTED"
    assert f"pod {pod} on node {node}" in message
    assert "fix:" in message
    assert not _claim_terminating(kube, ns, claim), "a deletionTimestamp appeared"
    k.wait_for(lambda: _events(kube, ns, claim, "PruneBlocked"), what="a PruneBlocked event")

    k.force_delete_pod(kube.client, ns, pod)
    k.core(kube.client).patch_namespaced_persistent_volume_claim(
        claim, ns, {"metadata": {"annotations": {RETIRE: "e2e: data moved"}}}
    )
    deployer = kube.impersonating(DEPLOYER)
    k.wait_for(
        lambda: _deny(_delete_claim(deployer, ns, claim, dry_run=True)) is None,
        what="the retired, unmounted claim to be allowed",
    )
    assert _deny(_delete_claim(deployer, ns, claim)) is None
    k.wait_for(
        lambda: k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, claim, ns),
        what=f"claim {claim} gone",
    )


def test_deployer_needs_retirement_a_person_does_not(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    deployer = kube.impersonating(DEPLOYER)
    refused = _wait_refused(
        _delete_claim(deployer, ns, claim, dry_run=True), "the deployer to be refused"
    )
    assert _reason(refused)[0] == "NOT_RETIRED"
    again = _deny(_delete_claim(deployer, ns, claim))
    assert again is not None and _reason(again)[0] == "NOT_RETIRED"
    assert not _claim_terminating(kube, ns, claim)

    assert _deny(_delete_claim(kube.client, ns, claim)) is None  # a person, by hand
    k.wait_for(
        lambda: k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, claim, ns),
        what=f"claim {claim} gone",
    )


def _put_fence(kube: Cluster, hook: Webhook, holder: str, renewed: dt.datetime) -> None:
    lease = {
        "metadata": {"name": hook.fence_name},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 300,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    api = k.coordination(kube.client)
    if k.gone(api.read_namespaced_lease, hook.fence_name, hook.fence_namespace):
        api.create_namespaced_lease(hook.fence_namespace, lease)
    else:
        api.patch_namespaced_lease(hook.fence_name, hook.fence_namespace, lease)


def test_held_fence_refuses_the_deployer_an_expired_one_does_not(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns, annotations={RETIRE: "e2e"}).metadata.name
    deployer = kube.impersonating(DEPLOYER)
    sha = "3f2c9a1b7e4d"
    _put_fence(kube, webhook, sha, k.now())
    try:
        refused = _wait_refused(
            _delete_claim(deployer, ns, claim, dry_run=True), "the fence to be obeyed"
        )
        reason, message = _reason(refused)
        assert reason == "SPECULATION_FENCE"
        assert sha in message
        assert _deny(_delete_claim(kube.client, ns, claim, dry_run=True)) is None  # a person

        _put_fence(kube, webhook, sha, k.now() - dt.timedelta(hours=1))
        k.wait_for(
            lambda: _deny(_delete_claim(deployer, ns, claim, dry_run=True)) is None,
            what="the expired fence to be ignored",
        )
        assert _deny(_delete_claim(deployer, ns, claim)) is None
        k.wait_for(lambda: _events(kube, ns, claim, "FenceExpired"), what="a FenceExpired event")
    finally:
        k.coordination(kube.client).delete_namespaced_lease(
            webhook.fence_name, webhook.fence_namespace
        )


def test_dry_run_is_decided_without_events(kube: Cluster, clean: str, node: str) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    refused = _wait_refused(_delete_claim(kube.client, ns, claim, dry_run=True), "refusal")
    assert _reason(refused)[0] == "CLAIM_MOUNTED"
    for _ in range(3):
        assert _deny(_delete_claim(kube.client, ns, claim, dry_run=True)) is not None
    time.sleep(1.0)  # the Event queue would have sent by now
    assert _events(kube, ns, claim, "PruneBlocked") == []
    assert not _claim_terminating(kube, ns, claim)


def test_namespace_with_a_mounted_claim_is_refused(kube: Cluster, clean: str, node: str) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    v1 = k.core(kube.client)
    refused = _wait_refused(lambda: v1.delete_namespace(ns, dry_run="All"), "namespace refusal")
    reason, message = _reason(refused)
    assert reason == "NAMESPACE_HOLDS_CLAIMS"
    assert claim in message
    assert _deny(lambda: v1.delete_namespace(ns)) is not None
    assert v1.read_namespace(ns).metadata.deletion_timestamp is None


def test_metrics_and_rotated_certificate(kube: Cluster, webhook: Webhook) -> None:
    status, text = webhook.get("/metrics")
    assert status == 200
    assert 'prune_gate_webhook_decisions_total{code="CLAIM_MOUNTED",outcome="refused"}' in text
    assert "prune_gate_webhook_watch_restarts_total" in text

    crt, key = webhook.cert_dir / "tls.crt", webhook.cert_dir / "tls.key"
    original = tls.CertPair(crt.read_bytes(), key.read_bytes())
    host, port = webhook.url.removeprefix("https://").split(":")

    def served(pair: tls.CertPair) -> bool:
        pem = ssl.get_server_certificate((host, int(port)))
        return ssl.PEM_cert_to_DER_cert(pem) == ssl.PEM_cert_to_DER_cert(pair.cert_pem.decode())

    rotated = tls.make_serving_cert(tls.make_ca("rotated CA"), ["127.0.0.1"])
    tls.write_pair(rotated, crt, key)
    try:
        k.wait_for(lambda: served(rotated), timeout=10, what="the rotated certificate served")
    finally:  # back to the certificate the API server trusts
        tls.write_pair(original, crt, key)
    k.wait_for(lambda: served(original), timeout=10, what="the original certificate served")


def test_overrides_allow_with_an_event(kube: Cluster, clean: str, node: str) -> None:
    ns = clean
    annotated = k.make_claim(
        kube.client, ns, annotations={"prune-gate.io/allow-delete": "e2e: restored elsewhere"}
    ).metadata.name
    plain = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [annotated, plain])
    _wait_refused(_delete_claim(kube.client, ns, plain, dry_run=True), "cache sees the pod")

    assert _deny(_delete_claim(kube.client, ns, annotated)) is None
    sre = kube.impersonating("alice", ["sre-oncall", "system:masters"])
    assert _deny(_delete_claim(sre, ns, plain)) is None
    for claim in (annotated, plain):
        k.wait_for(
            _has_event(kube, ns, claim, "PruneOverridden"), what=f"PruneOverridden on {claim}"
        )
    # Allowed, so pvc-protection now holds them Terminating until the pod goes.
    assert _claim_terminating(kube, ns, annotated)


def test_crd_with_custom_resources_is_refused(kube: Cluster, webhook: Webhook) -> None:
    group = f"e2e{uuid.uuid4().hex[:6]}.prune-gate.io"
    crd_name = f"backups.{group}"
    ext: Any = client.ApiextensionsV1Api(kube.client)
    ext.create_custom_resource_definition(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": crd_name},
            "spec": {
                "group": group,
                "names": {"kind": "Backup", "plural": "backups", "singular": "backup"},
                "scope": "Cluster",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )
    custom: Any = client.CustomObjectsApi(kube.client)
    try:
        body = {"apiVersion": f"{group}/v1", "kind": "Backup", "metadata": {"name": "nightly"}}
        create = lambda: custom.create_cluster_custom_object(group, "v1", "backups", body)  # noqa: E731
        k.wait_for(lambda: _created(create), timeout=30, what="the CRD to be served")
        refused = _wait_refused(
            lambda: ext.delete_custom_resource_definition(crd_name, dry_run="All"),
            "the CRD deletion to be refused",
        )
        reason, message = _reason(refused)
        assert reason == "CRD_HOLDS_RESOURCES"
        assert "1 custom resource" in message

        custom.delete_cluster_custom_object(group, "v1", "backups", "nightly")
        k.wait_for(
            lambda: (
                _deny(lambda: ext.delete_custom_resource_definition(crd_name, dry_run="All"))
                is None
            ),
            what="the emptied CRD to be deletable",
        )
    finally:
        ext.delete_custom_resource_definition(crd_name)


def _created(create: Callable[[], Any]) -> bool:
    try:
        create()
    except ApiException as exc:
        if exc.status == 404:
            return False  # the CRD is not served yet
        raise
    return True
