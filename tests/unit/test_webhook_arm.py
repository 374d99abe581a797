"""Arming the chart's configuration (webhook.arm), and what the self-watch reports around it."""

from __future__ import annotations

import base64
import copy
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gate.kube.client import ApiStatusError
from webhook import tls
from webhook.arm import ANNOTATION, Armer, arm_patch, callee, serves, unarmed, wanted_policy
from webhook.events import RecordingSink
from webhook.selfwatch import CONFIGURATION_TAMPERED, SelfWatch, disarmed

CA = tls.make_ca()
HOST = "pg-prune-gate.gatekeeping.svc"


def hook(name: str, policy: str = "Ignore") -> dict[str, Any]:
    return {
        "name": name,
        "failurePolicy": policy,
        "clientConfig": {
            "service": {"name": "pg-prune-gate", "namespace": "gatekeeping", "port": 443},
            "caBundle": base64.b64encode(CA.cert_pem).decode(),
        },
        "rules": [],
    }


def config(wanted: str | None = "Fail", *policies: str) -> dict[str, Any]:
    """The chart's configuration as the API server returns it: entries at `policies`."""
    names = ["prune-gate.prune-gate.io", "fence.prune-gate.io"]
    annotations = {ANNOTATION: wanted} if wanted is not None else {}
    return {
        "metadata": {"name": "pg-prune-gate", "uid": "u1", "annotations": annotations},
        "webhooks": [
            hook(n, p) for n, p in zip(names, policies or ("Ignore", "Ignore"), strict=True)
        ],
    }


# --- pure -------------------------------------------------------------------------------------


def test_only_a_configuration_that_asks_for_fail_is_armed() -> None:
    assert unarmed(config("Fail")) == ["prune-gate.prune-gate.io", "fence.prune-gate.io"]
    assert unarmed(config("Fail", "Fail", "Ignore")) == ["fence.prune-gate.io"]
    assert unarmed(config("Fail", "Fail", "Fail")) == []
    # Ignore chosen stays Ignore; a configuration without the annotation is not the chart's.
    assert unarmed(config("Ignore")) == []
    assert unarmed(config(None)) == []
    assert unarmed(None) == []
    # A value nobody wrote through the chart's schema fails closed.
    assert wanted_policy(config("fail")) == "Fail"
    assert wanted_policy(config(None)) is None


def test_the_patch_arms_only_what_is_unarmed_and_only_the_configuration_it_read() -> None:
    ops = arm_patch(config("Fail", "Fail", "Ignore"))
    assert ops == [
        {
            "op": "test",
            "path": "/metadata/annotations/prune-gate.io~1failure-policy",
            "value": "Fail",
        },
        {"op": "test", "path": "/webhooks/1/name", "value": "fence.prune-gate.io"},
        {"op": "test", "path": "/webhooks/1/failurePolicy", "value": "Ignore"},
        {"op": "replace", "path": "/webhooks/1/failurePolicy", "value": "Fail"},
    ]
    assert arm_patch(config("Ignore")) == []


def test_the_name_the_api_server_verifies() -> None:
    assert callee(hook("x")) == HOST
    assert callee({"clientConfig": {"url": "https://10.0.0.1:8443/validate"}}) == "10.0.0.1"
    assert callee({"clientConfig": {}}) is None


# --- serves: the TLS check, as the API server would do it --------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A TLS server with a certificate of CA for HOST, answering handshakes until closed."""
    d: Path = tmp_path_factory.mktemp("arm-tls")
    tls.write_pair(tls.make_serving_cert(CA, [HOST]), d / "tls.crt", d / "tls.key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "tls.crt", d / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(conn, server_side=True) as s:
                    s.recv(1)
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", int(listener.getsockname()[1])
    finally:
        stop.set()
        socket.create_connection(listener.getsockname()).close()  # wakes the accept
        thread.join(timeout=5)
        listener.close()


def test_serves_only_with_a_certificate_the_ca_verifies_for_the_called_name(
    tls_server: tuple[str, int],
) -> None:
    assert serves(tls_server, HOST, CA.cert_pem)
    assert not serves(tls_server, "other.gatekeeping.svc", CA.cert_pem)
    assert not serves(tls_server, HOST, tls.make_ca().cert_pem)
    assert not serves(tls_server, HOST, b"")
    closed = socket.create_server(("127.0.0.1", 0))
    port = int(closed.getsockname()[1])
    closed.close()
    assert not serves(("127.0.0.1", port), HOST, CA.cert_pem)


# --- the Armer --------------------------------------------------------------------------------


class Probes:
    """What the Armer asks, answered by the test; the patches it sent."""

    def __init__(self) -> None:
        self.cache = True
        self.pod = ""
        self.tls = True
        self.served: list[tuple[str, bytes]] = []
        self.patches: list[list[dict[str, Any]]] = []
        self.fail: list[Exception] = []

    def serving(self, host: str, ca: bytes) -> bool:
        self.served.append((host, ca))
        return self.tls

    def patch(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.patches.append(ops)
        if self.fail:
            raise self.fail.pop(0)
        return config("Fail", "Fail", "Fail")

    def armer(self) -> Armer:
        return Armer(
            "pg-prune-gate",
            lambda: self.cache,
            self.serving,
            self.patch,
            pod_ready=lambda: self.pod,
        )


def test_arms_only_once_the_cache_the_pod_and_the_tls_port_are_ready() -> None:
    p = Probes()
    armer = p.armer()
    assert armer.step() is None and armer.armed() is None  # nothing seen yet
    armer.offer(config("Fail"))
    p.cache = False
    assert armer.step() == armer.interval
    assert armer.waiting == "the watch cache is not ready"
    p.cache, p.pod = True, "pod gatekeeping/pg-1 is not Ready"
    assert armer.step() == armer.interval and armer.waiting == p.pod
    p.pod, p.tls = "", False
    armer.step()
    assert "does not answer TLS as pg-prune-gate.gatekeeping.svc" in armer.waiting
    assert p.patches == [] and armer.armed() is False
    p.tls = True
    assert armer.step() is None
    assert p.patches == [arm_patch(config("Fail"))]
    assert p.served[-1] == (HOST, CA.cert_pem)
    assert (armer.armed(), armer.armed_count, armer.waiting) == (True, 1, "")
    assert armer.step() is None and len(p.patches) == 1  # armed: nothing more to send


def test_ignore_chosen_is_never_armed() -> None:
    p = Probes()
    armer = p.armer()
    armer.offer(config("Ignore"))
    assert armer.step() is None and p.patches == [] and armer.armed() is True
    armer.offer(None)  # deleted: nothing to arm, and not armed
    assert armer.step() is None and p.patches == [] and armer.armed() is False


def test_a_failed_patch_is_counted_logged_and_retried_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = Probes()
    p.fail = [ApiStatusError(403, "forbidden"), ApiStatusError(500, "etcd"), OSError("reset")]
    armer = p.armer()
    armer.offer(config("Fail"))
    assert [armer.step(), armer.step(), armer.step()] == [2.0, 4.0, 8.0]
    assert armer.failures == 3 and armer.armed() is False
    assert "cannot arm the webhook configuration, retrying" in caplog.text
    assert armer.waiting.startswith("the patch failed: OSError")
    assert armer.step() is None and armer.armed() is True and len(p.patches) == 4


def test_a_configuration_changed_meanwhile_is_not_a_failure() -> None:
    p = Probes()
    p.fail = [ApiStatusError(422, "test failed")]
    armer = p.armer()
    armer.offer(config("Fail"))
    assert armer.step() == armer.interval and armer.failures == 0


def test_the_thread_arms_when_offered_and_stops() -> None:
    p = Probes()
    armer = p.armer()
    armer.start()
    try:
        armer.offer(config("Fail"))
        done = threading.Event()
        for _ in range(100):  # bounded: woken by the offer, not by a timer
            if armer.armed():
                done.set()
                break
            done.wait(0.05)
        assert done.is_set() and len(p.patches) == 1
    finally:
        armer.stop()


# --- the self-watch around the arming -----------------------------------------------------------


def watch() -> tuple[SelfWatch, RecordingSink, Probes]:
    p = Probes()
    sink = RecordingSink()
    return SelfWatch(None, None, sink, name="pg-prune-gate", armer=p.armer()), sink, p


def test_the_arming_is_not_reported_a_later_disarm_is() -> None:
    w, sink, _ = watch()
    w.observe(config("Fail"))  # as installed: disarmed, waiting
    w.observe(config("Fail", "Fail", "Ignore"))  # armed one by one
    w.observe(config("Fail", "Fail", "Fail"))
    assert (w.tampered, sink.events) == (0, [])
    w.observe(config("Fail", "Ignore", "Fail"))  # someone else disarms it
    assert w.tampered == 1
    [event] = sink.events
    assert event.reason == CONFIGURATION_TAMPERED
    assert (
        "webhook prune-gate.prune-gate.io: failurePolicy changed to Ignore after it was armed"
        in event.message
    )
    assert "arming it again" in event.message
    # and the Armer was told: it arms it again
    assert w.armer is not None and w.armer.armed() is False


def test_other_changes_are_still_reported_when_armed() -> None:
    w, sink, _ = watch()
    w.observe(config("Fail", "Fail", "Fail"))
    changed = config("Fail", "Fail", "Fail")
    changed["webhooks"][0]["rules"] = [{"resources": ["nothing"]}]
    w.observe(changed)
    w.observe(None)
    assert [e.message.split(": ", 1)[1].split(";")[0] for e in sink.events] == [
        "webhook prune-gate.prune-gate.io: rules changed",
        "the configuration was deleted",
    ]


def test_choosing_ignore_is_reported_once_then_is_the_baseline() -> None:
    w, sink, _ = watch()
    w.observe(config("Fail", "Fail", "Fail"))
    w.observe(config("Ignore", "Ignore", "Ignore"))  # helm upgrade --set failurePolicy=Ignore
    w.observe(config("Ignore", "Ignore", "Ignore"))  # a resync
    assert w.tampered == 1
    assert "annotation prune-gate.io/failure-policy changed from Fail to Ignore" in (
        sink.events[0].message
    )
    assert "restore it (helm upgrade)" in sink.events[0].message


def test_disarmed_names_only_entries_seen_armed() -> None:
    base = config("Fail")
    assert disarmed(base, config("Fail"), set()) == []
    assert disarmed(base, config("Fail"), {"fence.prune-gate.io"}) == [
        "webhook fence.prune-gate.io: failurePolicy changed to Ignore after it was armed"
    ]
    gone = copy.deepcopy(base)
    del gone["metadata"]["annotations"][ANNOTATION]
    assert disarmed(base, gone, set()) == [
        "annotation prune-gate.io/failure-policy changed from Fail to nothing"
    ]
    assert disarmed(base, None, {"fence.prune-gate.io"}) == []


def test_without_the_annotation_the_watch_compares_failure_policy_as_before() -> None:
    w, sink, p = watch()
    w.observe(config(None, "Fail", "Fail"))
    w.observe(config(None, "Ignore", "Fail"))
    assert w.tampered == 1 and "failurePolicy changed; restore it" in sink.events[0].message
    assert w.armer is not None and w.armer.step() is None and p.patches == []


def test_a_probe_that_raises_is_logged_and_retried_not_fatal() -> None:
    p = Probes()
    raised: list[bool] = []

    def cache_ready() -> bool:
        if not raised:
            raised.append(True)
            raise RuntimeError("cache exploded")
        return True

    armer = Armer("pg-prune-gate", cache_ready, p.serving, p.patch, max_backoff=0.05)
    armer.start()
    try:
        armer.offer(config("Fail"))
        done = threading.Event()
        for _ in range(100):  # bounded
            if armer.armed():
                done.set()
                break
            done.wait(0.05)
        assert done.is_set() and armer.failures == 1 and len(p.patches) == 1
    finally:
        armer.stop()
