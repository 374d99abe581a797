"""Helpers for end-to-end tests against the real control plane of scripts/dev-cluster.

There is no kubelet and no scheduler. A pod counts as running on a node when its ``spec.nodeName``
names a Node object the test made (``make_node``); pvc-protection then counts it as a user of its
claims. ``force_delete_pod`` (grace period 0) stands in for the kubelet that would finish a graceful
deletion.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3 import HTTPHeaderDict

T = TypeVar("T")

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: no kubelet runs here
NODE_LEASE_NAMESPACE = "kube-node-lease"
BUILD_BINARIES = Path(__file__).resolve().parents[2] / "scripts" / "build-binaries"


def core(api: Any) -> Any:
    """``CoreV1Api`` over ``api``, typed as Any: the client's models make every field Optional."""
    return client.CoreV1Api(api)


def apps(api: Any) -> Any:
    """``AppsV1Api`` over ``api`` (typed as Any, like ``core``)."""
    return client.AppsV1Api(api)


def coordination(api: Any) -> Any:
    """``CoordinationV1Api`` over ``api`` (typed as Any, like ``core``)."""
    return client.CoordinationV1Api(api)


def authentication(api: Any) -> Any:
    """``AuthenticationV1Api`` over ``api`` (typed as Any, like ``core``)."""
    return client.AuthenticationV1Api(api)


def bind_cluster_admin(api: Any, binding: str, namespace: str, account: str) -> None:
    """Bind service account `namespace/account` to cluster-admin as `binding`: the rights a
    deployer has in a real cluster."""
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=binding),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)
            ],
        )
    )


def unique(prefix: str) -> str:
    """A DNS-1123 name that no other test uses: ``prefix-<8 hex>``."""
    clean = "".join(c if c.isalnum() else "-" for c in prefix.lower()).strip("-")[:50] or "x"
    return f"{clean}-{uuid.uuid4().hex[:8]}"


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Raises ``TimeoutError`` naming ``what`` and the last value seen when ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def delete_if_present(delete: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Call ``delete(*args, **kwargs)``; a 404 (already gone) is fine."""
    try:
        delete(*args, **kwargs)
    except ApiException as e:
        if e.status != 404:
            raise


def gone(read: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """True when ``read(*args, **kwargs)`` answers 404, i.e. the object no longer exists."""
    try:
        read(*args, **kwargs)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def now() -> datetime:
    """The current time, timezone-aware (what the API expects in timestamps)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class WebhookClient:
    """The client certificate kube-apiserver presents to admission webhooks, and its CA."""

    ca: Path
    cert: Path
    key: Path


def webhook_client_of(kubeconfig: str) -> WebhookClient | None:
    """What scripts/dev-cluster's state.json (beside the kubeconfig) says kube-apiserver presents
    to webhooks; None for another cluster, or one started before it presented a certificate."""
    try:
        state = json.loads((Path(kubeconfig).parent / "state.json").read_text(encoding="utf-8"))
        files = state["webhookClient"]
        found = WebhookClient(Path(files["ca"]), Path(files["cert"]), Path(files["key"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if all(f.exists() for f in (found.ca, found.cert, found.key)) else None


class Cluster:
    """A running control plane: where it is, and API clients for it.

    Every ApiClient handed out is closed when the session ends, so tests may close theirs or not.
    """

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self._config = client.Configuration()
        load: Any = config.load_kube_config  # untyped in the client
        load(config_file=kubeconfig, client_configuration=self._config)
        self.server: str = self._config.host
        #: What kube-apiserver presents to webhooks (`serve --client-ca`), when known.
        self.webhook_client = webhook_client_of(kubeconfig)
        self._clients: list[Any] = []
        self.client: Any = self.api_client()

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` with the kubeconfig's (admin) credentials."""
        api = client.ApiClient(configuration=self._config)
        self._clients.append(api)
        return api

    def impersonating(self, user: str, groups: Sequence[str] = ()) -> Any:
        """A new ApiClient whose requests act as ``user`` in ``groups`` (Impersonate-* headers).

        For a service account pass ``system:serviceaccount:NS:NAME`` and no groups: the API server
        then adds ``system:serviceaccounts`` and ``system:serviceaccounts:NS`` itself.
        """
        api = self.api_client()
        rest = api.rest_client
        plain_request = rest.request

        def request(*args: Any, headers: Any = None, **kwargs: Any) -> Any:
            merged = HTTPHeaderDict(headers or {})
            merged["Impersonate-User"] = user
            for group in groups:  # one header line per group, as the API server expects
                merged.add("Impersonate-Group", group)
            return plain_request(*args, headers=merged, **kwargs)

        rest.request = request
        return api

    def binary(self, name: str) -> str:
        """Path of a pinned binary (kubectl, helm, ...), built if missing."""
        out = subprocess.run(
            [str(BUILD_BINARIES), "path", name], check=True, stdout=subprocess.PIPE, text=True
        )
        return out.stdout.strip()

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster; stdout and stderr are captured."""
        return subprocess.run(
            [self.binary("kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
        )

    def close(self) -> None:
        """Close every ApiClient this object handed out."""
        for api in self._clients:
            api.close()
        self._clients.clear()


# ------------------------------------------------------------------------------------ nodes


def make_node(
    api: client.ApiClient,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Any:
    """Create a Node whose status says Ready, plus its heartbeat Lease; return the V1Node.

    The node-lifecycle controller turns a node Unknown (and taints it unreachable) when it has not
    heartbeated for its grace period (about 50s); call ``heartbeat_node`` in long tests, or make a
    fresh node.
    """
    v1 = core(api)
    name = name or unique("node")
    node = client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
        ),
        spec=client.V1NodeSpec(),
    )
    v1.create_node(node)
    stamp = now()
    v1.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "prune-gate e2e stand-in for a kubelet",
                        "lastHeartbeatTime": stamp.isoformat(),
                        "lastTransitionTime": stamp.isoformat(),
                    }
                ],
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            }
        },
    )
    coordination(api).create_namespaced_lease(
        NODE_LEASE_NAMESPACE,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1LeaseSpec(
                holder_identity=name, lease_duration_seconds=40, renew_time=stamp
            ),
        ),
    )
    return v1.read_node(name)


def heartbeat_node(api: client.ApiClient, name: str) -> None:
    """Renew a node's Lease, as its kubelet would, so node lifecycle keeps it Ready."""
    coordination(api).patch_namespaced_lease(
        name, NODE_LEASE_NAMESPACE, {"spec": {"renewTime": now().isoformat()}}
    )


def delete_node(api: client.ApiClient, name: str) -> None:
    """Delete a node and its Lease; missing ones are fine."""
    delete_if_present(core(api).delete_node, name)
    delete_if_present(coordination(api).delete_namespaced_lease, name, NODE_LEASE_NAMESPACE)


# ----------------------------------------------------------------------------- claims, pods


def crd_body(
    group: str, kind: str, plural: str, scope: str = "Namespaced", list_kind: str | None = None
) -> dict[str, Any]:
    """A CustomResourceDefinition serving `v1` of `kind` with any fields (schemaless)."""
    names = {"kind": kind, "plural": plural, "listKind": list_kind or f"{kind}List"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": scope,
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


def make_claim(
    api: client.ApiClient,
    namespace: str,
    name: str | None = None,
    size: str = "1Gi",
    storage_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Any:
    """Create a ReadWriteOnce PersistentVolumeClaim and return the V1PersistentVolumeClaim.

    No provisioner runs, so it stays Pending; pvc-protection still guards it.
    """
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(
            name=name or unique("claim"),
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
        ),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": size}),
            storage_class_name=storage_class,
        ),
    )
    return core(api).create_namespaced_persistent_volume_claim(namespace, claim)


def pod_manifest(
    name: str,
    node: str | None = None,
    claims: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> Any:
    """A V1Pod running the pause image, mounting each claim at /data/<claim>, on ``node``."""
    volumes = [
        client.V1Volume(
            name=f"v{i}",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=c),
        )
        for i, c in enumerate(claims)
    ]
    mounts = [
        client.V1VolumeMount(name=f"v{i}", mount_path=f"/data/{c}") for i, c in enumerate(claims)
    ]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=dict(labels or {})),
        spec=client.V1PodSpec(
            node_name=node,
            containers=[client.V1Container(name="main", image=PAUSE_IMAGE, volume_mounts=mounts)],
            volumes=volumes,
            termination_grace_period_seconds=30,
        ),
    )


def make_pod(
    api: client.ApiClient,
    namespace: str,
    node: str | None,
    claims: Iterable[str] = (),
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    running: bool = True,
) -> Any:
    """Create a pod scheduled on ``node`` (``spec.nodeName``) that mounts ``claims``.

    With ``running`` its status is set to Running, as a kubelet would report. Returns the V1Pod.
    """
    v1 = core(api)
    pod = pod_manifest(name or unique("pod"), node, list(claims), labels)
    created = v1.create_namespaced_pod(namespace, pod)
    if running and node:
        stamp = now().isoformat()
        created = v1.patch_namespaced_pod_status(
            created.metadata.name,
            namespace,
            {
                "status": {
                    "phase": "Running",
                    "startTime": stamp,
                    "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": stamp},
                    ],
                }
            },
        )
    return created


def force_delete_pod(api: client.ApiClient, namespace: str, name: str) -> None:
    """Delete a pod with grace period 0, as a kubelet finishing its shutdown would; 404 is fine."""
    delete_if_present(
        core(api).delete_namespaced_pod,
        name,
        namespace,
        grace_period_seconds=0,
        propagation_policy="Background",
    )


def force_delete_pods(api: client.ApiClient, namespace: str) -> int:
    """Force-delete every pod in ``namespace``; return how many there were."""
    pods = core(api).list_namespaced_pod(namespace).items
    for pod in pods:
        force_delete_pod(api, namespace, pod.metadata.name)
    return len(pods)
