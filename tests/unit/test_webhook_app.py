"""The WSGI app through a test client: limits, health, readiness, metrics, events, errors."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client

from gate.engine.fence import Lease
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.model.events import MAX_EVENT_MESSAGE
from gate.model.findings import Code, Finding
from gate.model.liveview import LiveView
from gate.model.refs import ObjectRef
from gate.sources.policyfile import policy_from_dict
from tests.unit.wsgiclient import client_of
from webhook.app import Settings, WebhookApp, create_app
from webhook.cache import CacheStats, StaticCache
from webhook.decide import how_to_override, refusal_message
from webhook.events import RecordingSink
from webhook.outcome import MAX_MESSAGE

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
FLUX = "system:serviceaccount:flux-system:kustomize-controller"


def claim(name: str = "data", **ann: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "app", "uid": f"uid-{name}", "annotations": ann},
        "spec": {},
    }


def pod(name: str, claim_name: str, node: str = "n1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "app", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
        "status": {"phase": "Running"},
    }


def review(
    obj: dict[str, Any], user: str = "kubernetes-admin", dry_run: bool = False, uid: str = "u-1"
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"].get("namespace", ""),
            "operation": "DELETE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "oldObject": obj,
            "dryRun": dry_run,
        },
    }


POLICY = policy_from_dict({"webhook": {"deployers": [FLUX], "maxCacheAge": "6m"}})


def make_app(
    *objs: dict[str, Any], policy: Policy = POLICY, ready: bool = True, max_bytes: int = 4096
) -> tuple[WebhookApp, RecordingSink]:
    live = LiveState(policy.guarded_kinds)
    for o in objs:
        live.upsert(o)
    sink = RecordingSink()
    settings = Settings(
        policy=policy,
        cache=StaticCache(live, ready=ready),
        events=sink,
        max_body_bytes=max_bytes,
        now=lambda: NOW,
    )
    return create_app(settings), sink


@pytest.fixture
def app_and_sink() -> tuple[WebhookApp, RecordingSink]:
    return make_app(claim(), pod("web-0", "data"))


@pytest.fixture
def client(app_and_sink: tuple[WebhookApp, RecordingSink]) -> Iterator[Client]:
    with client_of(app_and_sink[0]) as c:
        yield c


def post(client: Client, doc: Any) -> Any:
    return client.post("/validate", data=json.dumps(doc), content_type="application/json")


def test_refusal_echoes_uid_and_names_pod_and_node(client: Client) -> None:
    resp = post(client, review(claim(), uid="abc-123"))
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["uid"] == "abc-123"
    assert out["allowed"] is False
    assert out["status"]["code"] == 403
    assert out["status"]["reason"] == "CLAIM_MOUNTED"
    assert "pod web-0 on node n1" in out["status"]["message"]
    assert "fix:" in out["status"]["message"]


def test_dry_run_is_decided_the_same_without_events(
    client: Client, app_and_sink: tuple[WebhookApp, RecordingSink]
) -> None:
    wet = post(client, review(claim())).get_json()["response"]
    assert [e.reason for e in app_and_sink[1].events] == ["PruneBlocked"]
    dry = post(client, review(claim(), dry_run=True)).get_json()["response"]
    assert dry == wet
    assert len(app_and_sink[1].events) == 1


def test_oversized_body_is_413_with_reason() -> None:
    app, _ = make_app(max_bytes=1000)
    with client_of(app) as c:
        resp = c.post("/validate", data=b" " * 5000, content_type="application/json")
    assert resp.status_code == 413
    assert "exceeds the limit of 1000 bytes" in resp.get_json()["reason"]


def test_wrong_content_type_is_400(client: Client) -> None:
    resp = client.post("/validate", data=json.dumps(review(claim())), content_type="text/plain")
    assert resp.status_code == 400
    assert "Content-Type" in resp.get_json()["reason"]


def test_non_utf8_body_is_400(client: Client) -> None:
    resp = client.post("/validate", data=b"\xff\xfe{", content_type="application/json")
    assert resp.status_code == 400


def test_health_and_readiness() -> None:
    ready_app, _ = make_app(ready=True)
    cold_app, _ = make_app(ready=False)
    with client_of(ready_app) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200
    with client_of(cold_app) as c:
        assert c.get("/healthz").status_code == 200
        resp = c.get("/readyz")
        assert resp.status_code == 503
        assert resp.get_json()["ready"] is False


def test_metrics_count_requests_decisions_and_latency(client: Client) -> None:
    post(client, review(claim()))
    post(client, review(claim("other")))
    post(client, review(claim(**{"prune-gate.io/allow-delete": "restoring from backup"})))
    client.post("/validate", data=b"nope", content_type="application/json")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'prune_gate_webhook_requests_total{code="200"} 3.0' in text
    assert 'prune_gate_webhook_requests_total{code="400"} 1.0' in text
    decisions = "prune_gate_webhook_decisions_total"
    assert f'{decisions}{{code="CLAIM_MOUNTED",outcome="refused"}} 1.0' in text
    assert f'{decisions}{{code="CLAIM_MOUNTED",outcome="overridden"}} 1.0' in text
    assert f'{decisions}{{code="none",outcome="allowed"}} 1.0' in text
    assert 'code="allow"' not in text
    assert "prune_gate_webhook_handler_seconds_count 3.0" in text
    assert 'prune_gate_webhook_cache_objects{type="pod"} 1.0' in text
    assert "prune_gate_webhook_cache_age_seconds" in text


def test_two_apps_have_their_own_registries() -> None:
    a, _ = make_app()
    b, _ = make_app()
    with client_of(a) as ca, client_of(b) as cb:
        post(ca, review(claim()))
        assert 'requests_total{code="200"} 1.0' in ca.get("/metrics").get_data(as_text=True)
        assert 'requests_total{code="200"}' not in cb.get("/metrics").get_data(as_text=True)


class _BrokenCache:
    """A cache whose live view raises: a bug must become a 500 with no stack trace."""

    def __init__(self) -> None:
        self.lock = threading.RLock()

    @property
    def state(self) -> LiveView:
        raise RuntimeError("boom: secret internals")

    def fence_lease(self) -> Lease | None:
        return None

    def ready(self) -> tuple[bool, str]:
        return True, "ready"

    def stats(self) -> CacheStats:
        return CacheStats(0, 0, 0.0, {})


def test_a_bug_is_a_500_without_a_stack_trace(caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(Settings(policy=POLICY, cache=_BrokenCache(), now=lambda: NOW))
    with client_of(app) as c:
        resp = post(c, review(claim()))
    assert resp.status_code == 500
    assert "boom" not in resp.get_data(as_text=True)
    assert "Traceback" not in resp.get_data(as_text=True)
    assert any("could not decide" in r.message for r in caplog.records)


def test_not_a_delete_of_a_guarded_kind_is_allowed_quietly(client: Client) -> None:
    doc = review(claim())
    doc["request"]["operation"] = "UPDATE"
    out = post(client, doc).get_json()["response"]
    assert out == {"uid": "u-1", "allowed": True}


def test_validate_is_503_until_the_cache_is_ready() -> None:
    """An empty or stale cache would allow what it cannot see: the failurePolicy decides."""
    app, sink = make_app(claim(), pod("web-0", "data"), ready=False)
    with client_of(app) as c:
        resp = post(c, review(claim()))
    assert resp.status_code == 503
    assert resp.get_json()["reason"] == "not ready (static cache)"
    assert sink.events == []


def test_a_refusal_ends_with_how_to_override() -> None:
    policy = policy_from_dict(
        {"annotations": {"allowDelete": "example.com/let-go"}, "webhook": {"maxCacheAge": "6m"}}
    )
    app, sink = make_app(claim(), pod("web-0", "data"), policy=policy)
    with client_of(app) as c:
        message = post(c, review(claim())).get_json()["response"]["status"]["message"]
    hint = (
        "to delete anyway: kubectl annotate -n app persistentvolumeclaim/data "
        'example.com/let-go="<reason>"'
    )
    assert message.endswith(f". {hint}")
    assert "break-glass" not in message
    assert sink.events[0].message.endswith(f". {hint}")


def test_the_override_survives_a_long_refusal_and_names_break_glass_groups() -> None:
    policy = policy_from_dict({"webhook": {"breakGlassGroups": ["sre-oncall", "dba"]}})
    ref = ObjectRef("", "PersistentVolumeClaim", "app", "data")
    long = Finding(Code.CLAIM_MOUNTED, ref, "x" * 5000, tuple(f"pod p{i}" for i in range(9)), "y")
    hint = how_to_override(ref, policy)
    assert hint.endswith(", or act as a member of a break-glass group (sre-oncall, dba)")
    message = refusal_message([long], hint)
    assert len(message) <= MAX_MESSAGE
    assert message.startswith("prune-gate CLAIM_MOUNTED: xxx")
    assert message.endswith(f"... {hint}")
    event = refusal_message([long], hint, MAX_EVENT_MESSAGE, "DELETE by me refused: ")
    assert len(event) <= MAX_EVENT_MESSAGE
    assert event.startswith("DELETE by me refused: prune-gate CLAIM_MOUNTED")
    assert event.endswith(f"... {hint}")


def test_a_warned_decision_is_counted_under_its_finding_code() -> None:
    policy = policy_from_dict({"severity": {"CLAIM_MOUNTED": "warn"}})
    app, _sink = make_app(claim(), pod("web-0", "data"), policy=policy)
    with client_of(app) as c:
        assert post(c, review(claim())).get_json()["response"]["allowed"] is True
        text = c.get("/metrics").get_data(as_text=True)
    decisions = "prune_gate_webhook_decisions_total"
    assert f'{decisions}{{code="CLAIM_MOUNTED",outcome="allowed"}} 1.0' in text
    assert 'code="warn"' not in text
    assert "the finding code that decided" in text


def test_an_exempted_refusal_is_counted_logged_and_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = policy_from_dict(
        {
            "exemptions": [
                {"kind": "PersistentVolumeClaim", "reason": "INC-42", "expires": "2027-01-31"}
            ]
        }
    )
    app, sink = make_app(claim(), pod("web-0", "data"), policy=policy)
    caplog.set_level("INFO", logger="prune_gate.webhook")
    with client_of(app) as c:
        out = post(c, review(claim())).get_json()["response"]
        text = c.get("/metrics").get_data(as_text=True)
    assert out["allowed"] is True
    assert out["warnings"][0].startswith("prune-gate: allowed by policy exemption ('INC-42'")
    assert [e.reason for e in sink.events] == ["PruneExempted"]
    decisions = "prune_gate_webhook_decisions_total"
    assert f'{decisions}{{code="CLAIM_MOUNTED",outcome="exempted"}} 1.0' in text
    assert 'outcome="allowed"' not in text
    (line,) = [r for r in caplog.records if r.getMessage() == "DELETE exempted"]
    assert line.__dict__["exemption"] == "INC-42"
    assert line.__dict__["exempted"] == ["CLAIM_MOUNTED"]


def test_an_exempted_refusal_records_no_event_when_reviews_may_not() -> None:
    policy = policy_from_dict(
        {
            "exemptions": [
                {"kind": "PersistentVolumeClaim", "reason": "INC-42", "expires": "2027-01-31"}
            ]
        }
    )
    live = LiveState(policy.guarded_kinds)
    live.upsert(claim())
    live.upsert(pod("web-0", "data"))
    sink = RecordingSink()
    settings = Settings(
        policy=policy, cache=StaticCache(live), events=sink, now=lambda: NOW, record_events=False
    )
    with client_of(create_app(settings)) as c:
        out = post(c, review(claim())).get_json()["response"]
    assert out["allowed"] is True and out["warnings"]
    assert sink.events == []


def test_exemptions_expire_by_the_utc_date_whatever_zone_the_clock_is_in() -> None:
    """A clock in UTC+14 at 02:00 on the 3rd is still the 2nd in UTC: the exemption holds."""
    policy = policy_from_dict(
        {
            "exemptions": [
                {"kind": "PersistentVolumeClaim", "reason": "INC-9", "expires": "2026-12-02"}
            ]
        }
    )
    live = LiveState(policy.guarded_kinds)
    live.upsert(claim())
    live.upsert(pod("web-0", "data"))
    ahead = dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.timezone(dt.timedelta(hours=14)))
    settings = Settings(policy=policy, cache=StaticCache(live), now=lambda: ahead)
    with client_of(create_app(settings)) as c:
        assert post(c, review(claim())).get_json()["response"]["allowed"] is True
