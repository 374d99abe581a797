"""The watch cache under faults, against the real API server: the webhook never decides stale.

The webhook reaches kube-apiserver through a small TCP proxy of the test's own, which can pass
bytes, hold them (a paused proxy: connections open, no bytes; the watch streams go silent), or
be down (every connection cut, new ones closed at once: an API server restart). The API server
still calls the webhook directly, so each DELETE made meanwhile is decided (or not) by a webhook
whose cache cannot hear the cluster. Watches are served with `timeoutSeconds` of 3 s here
(PRUNE_GATE_WATCH_SECONDS), so a silent stream is caught within seconds.

Also here: the kinds the cache must watch for the doors to agree (a Namespace holding only a
VolumeSnapshot, attack 7), and one custom resource kind in a bad state (a listKind clash,
attack 9a), which must not make the webhook unready.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import kube as k
from .kube import Cluster
from .webhookserver import (
    Webhook,
    claim_terminating,
    cleanup_claims,
    delete_claim,
    deny,
    events,
    has_event,
    refusal_reason,
    serve_webhook,
    wait_refused,
)

pytestmark = pytest.mark.e2e


class FaultyProxy:
    """A TCP proxy to one upstream that can pass, hold (pause) or drop (down) the traffic."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._down = False
        self._closed = False
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        """Hold every byte: connections stay open and go silent."""
        self._flowing.clear()

    def down(self) -> None:
        """Cut every connection and close new ones at once, like a restarting API server."""
        self._down = True
        self._cut()
        self._flowing.set()

    def resume(self) -> None:
        self._down = False
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self._cut()
        self._flowing.set()

    def _cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            if self._down:
                down.close()
                continue
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                down.close()
                continue
            up.settimeout(None)
            with self._lock:
                self._conns += [down, up]
            threading.Thread(target=self._pump, args=(down, up), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Copy both ways; while paused, read nothing more and send nothing."""
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while not self._closed and a.fileno() != -1 and b.fileno() != -1:
                self._flowing.wait()
                for key, _ in sel.select(timeout=0.2):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    self._flowing.wait()
                    if self._down or self._closed:
                        return
                    key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()


def _proxied_kubeconfig(kube: Cluster, port: int, path: Path) -> Path:
    """The test cluster's kubeconfig, with its server at the proxy (same host, so TLS holds)."""
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for entry in doc["clusters"]:
        url = urllib.parse.urlsplit(entry["cluster"]["server"])
        entry["cluster"]["server"] = f"{url.scheme}://{url.hostname}:{port}"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def proxy(kube: Cluster) -> Iterator[FaultyProxy]:
    url = urllib.parse.urlsplit(kube.server)
    p = FaultyProxy((url.hostname or "127.0.0.1", url.port or 443))
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def emptied(kube: Cluster, namespace: str) -> Iterator[str]:
    """The test's namespace, emptied of pods and claims before it is deleted."""
    try:
        yield namespace
    finally:
        cleanup_claims(kube, namespace)


@pytest.fixture(scope="module")
def proxied(
    kube: Cluster, proxy: FaultyProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    """A webhook whose cache reads the API server through the proxy, with 3 s watches."""
    tmp = tmp_path_factory.mktemp("proxied")
    kubeconfig = _proxied_kubeconfig(kube, proxy.port, tmp / "kubeconfig")
    saved = os.environ.get("PRUNE_GATE_WATCH_SECONDS")
    os.environ["PRUNE_GATE_WATCH_SECONDS"] = "3"
    try:
        with serve_webhook(kube, tmp, args=["--kubeconfig", str(kubeconfig)]) as hook:
            try:
                yield hook
            finally:
                proxy.resume()  # unregistering on exit goes through it
    finally:
        if saved is None:
            os.environ.pop("PRUNE_GATE_WATCH_SECONDS", None)
        else:
            os.environ["PRUNE_GATE_WATCH_SECONDS"] = saved


def _status(hook: Webhook) -> int:
    return hook.get("/readyz")[0]


def _not_allowed(call: Any) -> bool:
    """True when the DELETE did not go through: refused by the webhook, or the webhook could not
    answer (503) and failurePolicy Fail refused it."""
    try:
        call()
    except ApiException as exc:
        return exc.status in (403, 500) and "prune-gate" in str(exc.body)
    return False


def _mounted_claim_is_never_deleted_while_the_cache_is_blind(
    kube: Cluster, ns: str, node: str, hook: Webhook, blind: Any, see: Any
) -> None:
    claim = k.make_claim(kube.client, ns).metadata.name
    k.wait_for(lambda: _status(hook) == 200, what="the webhook ready")
    blind()
    k.wait_for(lambda: _status(hook) == 503, timeout=30, what="/readyz 503 while blind")
    reason = hook.get("/readyz")[1]
    assert "watch broken" in reason, reason
    pod = k.make_pod(kube.client, ns, node, [claim]).metadata.name
    assert _not_allowed(delete_claim(kube.client, ns, claim)), "deleted on a stale cache"
    assert not claim_terminating(kube, ns, claim), "a deletionTimestamp appeared"
    see()
    k.wait_for(lambda: _status(hook) == 200, timeout=60, what="ready again")
    refused = wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "sees the pod")
    assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
    assert pod in refusal_reason(refused)[1]
    k.force_delete_pod(kube.client, ns, pod)
    k.wait_for(
        lambda: deny(delete_claim(kube.client, ns, claim, dry_run=True)) is None,
        what="the unmounted claim deletable",
    )


def test_paused_api_server_makes_the_webhook_unready_before_a_stale_decision(
    kube: Cluster, emptied: str, node: str, proxy: FaultyProxy, proxied: Webhook
) -> None:
    _mounted_claim_is_never_deleted_while_the_cache_is_blind(
        kube, emptied, node, proxied, proxy.pause, proxy.resume
    )


def test_api_server_restart_is_seen_and_the_cache_relists(
    kube: Cluster, emptied: str, node: str, proxy: FaultyProxy, proxied: Webhook
) -> None:
    _mounted_claim_is_never_deleted_while_the_cache_is_blind(
        kube, emptied, node, proxied, proxy.down, proxy.resume
    )


def _crd(group: str, kind: str, plural: str, list_kind: str, scope: str = "Namespaced") -> Any:
    body = k.crd_body(group, kind, plural, scope, list_kind)
    # Groups under k8s.io are protected: the CRD must say where it was approved.
    body["metadata"]["annotations"] = {"api-approved.kubernetes.io": "unapproved, e2e test"}
    return body


def _served(create: Any) -> bool:
    try:
        create()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@contextlib.contextmanager
def _installed_crd(kube: Cluster, body: Any) -> Iterator[str]:
    ext: Any = client.ApiextensionsV1Api(kube.client)
    name = body["metadata"]["name"]
    ext.create_custom_resource_definition(body)
    try:
        yield name
    finally:
        k.wait_for(
            lambda: (
                deny(lambda: ext.delete_custom_resource_definition(name, dry_run="All")) is None
            ),
            what=f"CRD {name} deletable",
        )
        k.delete_if_present(ext.delete_custom_resource_definition, name)


def test_namespace_holding_only_a_volume_snapshot_is_refused(
    kube: Cluster, namespace: str, webhook: Webhook
) -> None:
    group = "snapshot.storage.k8s.io"
    body = _crd(group, "VolumeSnapshot", "volumesnapshots", "VolumeSnapshotList")
    custom: Any = client.CustomObjectsApi(kube.client)
    snap = {
        "apiVersion": f"{group}/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "nightly"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
    }
    with _installed_crd(kube, body):
        create = lambda: custom.create_namespaced_custom_object(  # noqa: E731
            group, "v1", namespace, "volumesnapshots", snap
        )
        k.wait_for(lambda: _served(create), what="VolumeSnapshots served")
        core = k.core(kube.client)
        refused = wait_refused(
            lambda: core.delete_namespace(namespace, dry_run="All"), "the namespace refused"
        )
        reason, message = refusal_reason(refused)
        assert reason == "NAMESPACE_HOLDS_CLAIMS"
        assert "VolumeSnapshot" in message and "nightly" in message
        custom.delete_namespaced_custom_object(group, "v1", namespace, "volumesnapshots", "nightly")
        k.wait_for(
            lambda: deny(lambda: core.delete_namespace(namespace, dry_run="All")) is None,
            what="the emptied namespace deletable",
        )


def test_a_custom_kind_that_cannot_be_listed_leaves_the_webhook_ready(
    kube: Cluster, webhook: Webhook
) -> None:
    group = f"e2e{uuid.uuid4().hex[:6]}.prune-gate.io"
    good = _crd(group, "Alpha", "alphas", "AlphaList", scope="Cluster")
    clash = _crd(group, "Beta", "betas", "AlphaList", scope="Cluster")  # listKind taken
    del good["metadata"]["annotations"], clash["metadata"]["annotations"]
    ext: Any = client.ApiextensionsV1Api(kube.client)
    with _installed_crd(kube, good), _installed_crd(kube, clash) as name:

        def uncounted() -> bool:
            return any(
                line.startswith("prune_gate_webhook_watch_live{")
                and f'kind="Beta.{group}"' in line
                and line.endswith(" 0.0")
                for line in webhook.get("/metrics")[1].splitlines()
            )

        k.wait_for(uncounted, timeout=60, what="the clashing kind reported as not live")
        assert _status(webhook) == 200, webhook.get("/readyz")[1]
        recorded = k.wait_for(  # reported once it has failed for 30 s (REPORT_AFTER_SECONDS)
            has_event(kube, "default", name, "ResourcesUncounted"),
            timeout=180,
            what="a ResourcesUncounted Event on the clashing CRD",
        )
        assert "cannot list betas." in recorded[0].message, recorded[0].message
        assert "status.conditions" in recorded[0].message  # a bad CRD, not RBAC: the fix says so
        assert not events(kube, "default", f"alphas.{group}", "ResourcesUncounted")
        refused = wait_refused(
            lambda: ext.delete_custom_resource_definition(name, dry_run="All"),
            "the uncountable CRD's deletion refused",
        )
        reason, message = refusal_reason(refused)
        assert reason == "RESOURCES_UNCOUNTED", message
        assert "cannot be counted" in message
        ext.patch_custom_resource_definition(
            name, {"metadata": {"annotations": {"prune-gate.io/allow-delete": "e2e cleanup"}}}
        )
