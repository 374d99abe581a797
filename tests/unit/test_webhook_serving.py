"""Certificates, rotation, registration and Events: the pieces around the app."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import ipaddress
import logging
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from gate.kube.events import event_body
from gate.model.events import EventSpec
from gate.model.refs import ObjectRef
from gate.model.stateful import CATALOGUE
from gate.sources.policyfile import policy_from_dict
from tests.unit.wsgiclient import client_of
from webhook import tls
from webhook.events import EventQueue
from webhook.register import build_configuration
from webhook.serve import CertReloader, host_of


def test_serving_certificate_has_the_ip_san_and_chains_to_the_ca(tmp_path: Path) -> None:
    ca = tls.make_ca()
    pair = tls.make_serving_cert(ca, ["127.0.0.1"])
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert.verify_directly_issued_by(ca_cert)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    assert client.verify_mode is ssl.CERT_REQUIRED


def test_reloader_swaps_the_context_when_files_change_and_keeps_it_on_garbage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    ca = tls.make_ca()
    tls.write_pair(tls.make_serving_cert(ca, ["127.0.0.1"]), crt, key)
    reloader = CertReloader(crt, key)
    first = reloader.context()
    assert reloader.context() is first
    tls.write_pair(tls.make_serving_cert(ca, ["127.0.0.1", "localhost"]), crt, key)
    second = reloader.context()
    assert second is not first
    assert reloader.reloads == 1
    crt.write_text("half-written")
    with caplog.at_level(logging.ERROR):
        assert reloader.context() is second
    assert "keeping the previous one" in caplog.text


def test_host_of() -> None:
    assert host_of("127.0.0.1:8443") == ("127.0.0.1", 8443)
    assert host_of("[::1]:9443") == ("::1", 9443)
    with pytest.raises(ValueError, match="HOST:PORT"):
        host_of("8443")


def test_registration_asks_about_guarded_kinds_with_exclusions() -> None:
    policy = policy_from_dict({})
    config = build_configuration(
        "prune-gate", "https://127.0.0.1:8443/validate", b"PEM", policy, "Ignore", 7, "tools"
    )
    hook = config["webhooks"][0]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:8443/validate",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 7
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert {op for r in hook["rules"] for op in r["operations"]} == {"CREATE", "DELETE", "UPDATE"}
    assert hook["matchConditions"][0]["expression"].startswith("request.operation == 'DELETE' || ")
    resources = {
        (r["apiGroups"][0], res.removesuffix("/status").removesuffix("/finalize"))
        for r in hook["rules"]
        for res in r["resources"]
    }
    assert resources == {
        ("", "persistentvolumeclaims"),
        ("", "persistentvolumes"),
        ("", "namespaces"),
        ("apps", "statefulsets"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("snapshot.storage.k8s.io", "volumesnapshots"),  # guarded by gate check too: one default
        *((k.group, k.plural) for k in CATALOGUE),  # the stateful kinds, CRDs or not
    }
    expr = hook["namespaceSelector"]["matchExpressions"][0]
    assert expr == {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "tools"],
    }


EVENT = EventSpec(
    "PruneBlocked",
    "refused",
    ObjectRef("", "PersistentVolume", "", "pv-1"),
    "v1",
    "uid-1",
)


def test_event_body_for_a_cluster_scoped_object_goes_to_default() -> None:
    body = event_body(EVENT, dt.datetime(2026, 12, 2, tzinfo=dt.UTC), "pod-a")
    assert body["metadata"]["namespace"] == "default"
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "name": "pv-1",
        "uid": "uid-1",
    }
    assert body["type"] == "Warning"
    assert body["firstTimestamp"] == "2026-12-02T00:00:00Z"


class _SlowApi:
    """Blocks every request until released; then fails it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def param_serialize(self, **kw: Any) -> Any:
        return kw["method"], kw["resource_path"], kw["header_params"], kw["body"], []

    def call_api(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        self.release.wait(10)
        raise ConnectionError("API server unreachable")


def test_a_full_queue_drops_and_a_failed_send_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = _SlowApi()
    q = EventQueue(api, maxsize=2)
    q.start()
    try:
        for i in range(6):
            q.submit(dataclasses.replace(EVENT, message=f"refused {i}"))  # never blocks
        assert q.dropped >= 3
    finally:
        api.release.set()
        q.stop()
    assert q.failed >= 1
    assert "could not record event" in caplog.text


class _Answer:
    """A RESTResponse: a status and a JSON body."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self._body = body
        self.response = self

    def read(self) -> bytes:
        return self._body

    def release_conn(self) -> None:
        pass


class _FlakyApi:
    """Accepts the first Event and refuses the second (403)."""

    def __init__(self) -> None:
        self.calls = 0

    def param_serialize(self, **kw: Any) -> Any:
        return kw["method"], kw["resource_path"], kw["header_params"], kw["body"], []

    def call_api(self, *args: Any, **kw: Any) -> _Answer:
        self.calls += 1
        if self.calls == 1:
            return _Answer(201, b'{"kind": "Event"}')
        return _Answer(403, b'{"message": "events is forbidden"}')


def test_events_sent_and_failed_reach_metrics() -> None:
    """The queue counted sends and failures that /metrics never showed: a webhook whose Events
    all fail (RBAC) looked the same as a healthy one."""
    from gate.engine.livestate import LiveState
    from webhook.app import Settings, create_app
    from webhook.cache import StaticCache

    q = EventQueue(_FlakyApi())
    q.start()
    q.submit(EVENT)
    q.submit(dataclasses.replace(EVENT, message="refused again"))
    q.submit(EVENT)  # the same as the first, just sent: not sent again
    q.stop()
    counts = q.counts()
    assert (counts.sent, counts.failed, counts.dropped, counts.repeated) == (1, 1, 0, 1)
    policy = policy_from_dict({})
    settings = Settings(
        policy=policy, cache=StaticCache(LiveState(policy.guarded_kinds)), event_counts=q.counts
    )
    with client_of(create_app(settings)) as c:
        text = c.get("/metrics").get_data(as_text=True)
    assert "prune_gate_webhook_events_sent_total 1.0" in text
    assert "prune_gate_webhook_events_failed_total 1.0" in text
    assert "prune_gate_webhook_events_dropped_total 0.0" in text
    assert "prune_gate_webhook_events_repeated_total 1.0" in text


class _CountingApi(_FlakyApi):
    def call_api(self, *args: Any, **kw: Any) -> _Answer:
        self.calls += 1
        return _Answer(201, b'{"kind": "Event"}')


def test_an_event_repeated_within_a_minute_is_sent_once() -> None:
    """A deployer retrying a refused deletion gets a refusal each time, and the object one
    Event a minute: the same object, reason and message within REPEAT_SECONDS is counted, not
    posted; another object's, another message, or the same a minute later is posted."""
    from webhook.events import REPEAT_SECONDS

    now = [1000.0]
    api = _CountingApi()
    q = EventQueue(api, clock=lambda: now[0])
    q.start()
    for _ in range(50):
        q.submit(EVENT)
    other = dataclasses.replace(EVENT, ref=ObjectRef("", "PersistentVolume", "", "pv-2"))
    q.submit(other)
    q.submit(dataclasses.replace(EVENT, message="refused for another reason"))
    now[0] += REPEAT_SECONDS + 1
    q.submit(EVENT)
    q.stop()
    assert (q.sent, q.repeated) == (4, 49)
    assert api.calls == 4
