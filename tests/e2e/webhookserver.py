"""Serving the real webhook for end-to-end tests, and the helpers those tests share.

`serve_webhook` runs `python -m webhook serve --self-signed --register` in a subprocess, so the
real HTTPS server answers over TLS with its own CA and the real watch cache feeds the
decisions; the registration is removed when the server gets SIGTERM, which the exit checks.
When the cluster's kube-apiserver presents a webhook client certificate (scripts/dev-cluster's
does), the server requires it (`--client-ca`), as the chart does; `client_ca=False` serves
without, where reviews record no Events. Every server also has a plain-HTTP health port.
The `webhook` and `clean` fixtures in conftest use it; a test module that needs another policy
or other flags makes its own module fixture with `serve_webhook(kube, tmp, policy_doc, args)`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gate.engine.fence import HOLDER_USER

from . import kube as k
from .kube import Cluster, WebhookClient

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
    #: plain HTTP: /healthz, /readyz and /metrics only
    health_url: str = ""
    #: the client certificate the server requires (the API server's), or None
    client: WebhookClient | None = None
    #: SIGKILL the server and its worker at once, as a node failure would: nothing cleans up
    kill: Callable[[], None] = lambda: None
    #: The server's process (with --workers above 1, the master)
    pid: int = 0

    def get(self, path: str) -> tuple[int, str]:
        """GET over TLS, presenting the API server's client certificate when it is required."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client is not None:
            ctx.load_cert_chain(str(self.client.cert), str(self.client.key))
        try:
            with urllib.request.urlopen(f"{self.url}{path}", context=ctx, timeout=5) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


#: A label the tests' policy protects, as an objectSelector's key would be.
PROTECTED_LABEL = "prune-gate.io/e2e-guard"
#: Claims with this label set to "true" are exempted by the tests' policy (from every code).
EXEMPT_LABEL = "prune-gate.io/e2e-exempt"
#: The reason of that exemption, as the warning and the PruneExempted Event quote it.
EXEMPT_REASON = "e2e: scratch claims"


def serve_and_fail(kube: Cluster, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`webhook serve --self-signed --register --name NAME ARGS` run to its end, for the tests of
    a serve that must refuse to start (exit 2, with nothing registered)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--self-signed",
            "--register",
            "--name",
            name,
            *args,
            "--kubeconfig",
            kube.kubeconfig,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, not a speed assertion
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def registered(kube: Cluster, name: str) -> bool:
    api = client.AdmissionregistrationV1Api(kube.client)
    return not k.gone(api.read_validating_webhook_configuration, name)


# ------------------------------------------------------------------------------------ helpers


def deny(call: Callable[[], Any]) -> ApiException | None:
    """Run a delete; the ApiException when the webhook refused it, None when it was allowed."""
    try:
        call()
    except ApiException as exc:
        if exc.status == 403 and "prune-gate" in str(exc.body):
            return exc
        raise
    return None


def refusal_reason(exc: ApiException) -> tuple[str, str]:
    body = json.loads(exc.body or "{}")
    return str(body.get("reason")), str(body.get("message"))


def delete_claim(api: Any, ns: str, name: str, dry_run: bool = False) -> Callable[[], Any]:
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    return lambda: k.core(api).delete_namespaced_persistent_volume_claim(name, ns, **kwargs)


def wait_refused(call: Callable[[], Any], what: str) -> ApiException:
    """Wait until a dry-run call is refused (the cache caught up); return the refusal."""
    return k.wait_for(lambda: deny(call), timeout=30, what=what)


def claim_terminating(kube: Cluster, ns: str, name: str) -> bool:
    obj = k.core(kube.client).read_namespaced_persistent_volume_claim(name, ns)
    return obj.metadata.deletion_timestamp is not None


def events(kube: Cluster, ns: str, name: str, reason: str) -> list[Any]:
    items = k.core(kube.client).list_namespaced_event(ns).items
    return [e for e in items if e.involved_object.name == name and e.reason == reason]


def ignore_missing(call: Callable[[], Any]) -> Callable[[], Any]:
    """The call, with 404 (already gone, e.g. a Terminating claim that finished) as success."""

    def run() -> Any:
        try:
            return call()
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None

    return run


def has_event(kube: Cluster, ns: str, name: str, reason: str) -> Callable[[], list[Any]]:
    return lambda: events(kube, ns, name, reason)


def cleanup_claims(kube: Cluster, ns: str) -> None:
    """Remove pods, then claims, so the namespace fixture may delete the namespace."""
    k.force_delete_pods(kube.client, ns)
    v1 = k.core(kube.client)
    k.wait_for(lambda: not v1.list_namespaced_pod(ns).items, timeout=30, what="pods gone")
    for c in v1.list_namespaced_persistent_volume_claim(ns).items:
        delete = ignore_missing(delete_claim(kube.client, ns, c.metadata.name))
        k.wait_for(lambda: deny(delete) is None, timeout=30, what=f"{c.metadata.name} deletable")  # noqa: B023
    k.wait_for(
        lambda: not v1.list_namespaced_persistent_volume_claim(ns).items,
        timeout=60,
        what="claims gone",
    )


def put_fence(kube: Cluster, hook: Webhook, holder: str, renewed: dt.datetime) -> None:
    """Create or rewrite the fence Lease as its recorded holder (webhook.guards lets only that
    user weaken or remove a held fence)."""
    me = k.authentication(kube.client).create_self_subject_review({}).status.user_info.username
    lease = {
        "metadata": {"name": hook.fence_name, "annotations": {HOLDER_USER: me}},
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


@contextlib.contextmanager
def serve_webhook(
    kube: Cluster,
    tmp: Path,
    policy_doc: dict[str, Any] | None = None,
    args: Sequence[str] = (),
    client_ca: bool = True,
) -> Iterator[Webhook]:
    """A webhook, served and registered; stopped and unregistered on exit (the exit asserts a
    clean stop). `policy_doc` is merged over the tests' policy; `args` are added to `serve`.
    With `client_ca` (and a cluster that presents a webhook client certificate) the server
    requires the API server's certificate."""
    suffix = uuid.uuid4().hex[:6]
    fence_ns = f"e2e-fence-{suffix}"
    core = k.core(kube.client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=fence_ns)))
    rbac = client.RbacAuthorizationV1Api(kube.client)
    binding = f"prune-gate-e2e-deployer-{suffix}"
    k.bind_cluster_admin(kube.client, binding, "flux-system", "kustomize-controller")
    policy = tmp / "prune-gate.yaml"
    webhook_section: dict[str, Any] = {
        "deployers": [DEPLOYER],
        "breakGlassGroups": ["sre-oncall"],
        "fence": {"namespace": fence_ns, "name": "speculation-fence"},
        "resync": "5m",
        "protectedLabels": [PROTECTED_LABEL],
    }
    doc = dict(policy_doc or {})
    doc["webhook"] = {**webhook_section, **doc.get("webhook", {})}
    doc.setdefault(
        "exemptions",
        [
            {
                "kind": "PersistentVolumeClaim",
                "labels": {EXEMPT_LABEL: "true"},
                "reason": EXEMPT_REASON,
                "expires": "2099-12-31",
            }
        ],
    )
    policy.write_text(json.dumps(doc))
    port = free_port()
    health_port = free_port()
    while health_port == port:
        health_port = free_port()
    presented = kube.webhook_client if client_ca else None
    ca_args = ["--client-ca", str(presented.ca)] if presented is not None else []
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
        "--health-port",
        str(health_port),
        *ca_args,
        *args,
    ]
    with log.open("wb") as out:
        # A session of its own, so `kill` reaches every process of the server.
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    killed: list[bool] = []

    def kill() -> None:
        killed.append(True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    hook = Webhook(
        f"https://127.0.0.1:{port}",
        cert_dir / "ca.crt",
        cert_dir,
        name,
        fence_ns,
        "speculation-fence",
        log,
        f"http://127.0.0.1:{health_port}",
        presented,
        kill,
        proc.pid,
    )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"webhook exited {proc.returncode}:\n{log.read_text()}")
            try:
                return hook.get("/readyz")[0] == 200 and registered(kube, name)
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
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        registered_after = registered(kube, name)
        if killed:  # nothing removed it: a killed server leaves its registration behind
            admission: Any = client.AdmissionregistrationV1Api(kube.client)
            k.delete_if_present(admission.delete_validating_webhook_configuration, name)
        rbac.delete_cluster_role_binding(binding)
        core.delete_namespace(fence_ns)
        if killed:
            assert registered_after, "a killed server cannot have removed its registration"
        else:
            assert not registered_after, "the registration outlived the server"
            assert proc.returncode == 0, log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()
