"""Attack 8 of issue 8: a review posted to /validate by anyone who can reach the port.

The attack: user `eve`, group `platform-oncall` (a break-glass group), posts an AdmissionReview
deleting a mounted claim straight to the webhook, and a real PruneOverridden Event lands on the
claim. With `--client-ca` (the CA of the certificate kube-apiserver presents, from the dev
cluster's AdmissionConfiguration) such a caller fails the TLS handshake and records nothing, while
the API server's own calls are decided as before. Without it the forged review still gets its
verdict (it decides nothing: the API server never asked), but no review records an Event.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.ci import ci
from webhook import tls

from . import kube as k
from .kube import Cluster
from .webhookserver import (
    Webhook,
    claim_terminating,
    delete_claim,
    deny,
    events,
    refusal_reason,
    serve_webhook,
    wait_refused,
)

pytestmark = pytest.mark.e2e

BREAK_GLASS = "platform-oncall"
POLICY = {"webhook": {"breakGlassGroups": [BREAK_GLASS]}}


@pytest.fixture(scope="module")
def webhook(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """This module's webhook (the `clean` fixture uses it): eve's group can break glass, and the
    server requires the API server's client certificate."""
    if kube.webhook_client is None:
        message = "the cluster presents no webhook client certificate (restart scripts/dev-cluster)"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    with serve_webhook(kube, tmp_path_factory.mktemp("webhook"), POLICY) as hook:
        assert hook.client is not None, "serve_webhook did not pass --client-ca"
        yield hook


def _forged_review(kube: Cluster, ns: str, name: str) -> bytes:
    """What eve posts: a DELETE of the claim by herself in the break-glass group."""
    claim = k.core(kube.client).read_namespaced_persistent_volume_claim(name, ns)
    old = kube.client.sanitize_for_serialization(claim)
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": name,
            "namespace": ns,
            "operation": "DELETE",
            "userInfo": {"username": "eve", "groups": [BREAK_GLASS, "system:authenticated"]},
            "oldObject": old,
            "dryRun": False,
        },
    }
    return json.dumps(doc).encode()


def _post(hook: Webhook, body: bytes, cert: tuple[Path, Path] | None = None) -> dict[str, Any]:
    """POST a review to /validate as a caller with `cert` (or none); the response document."""
    ctx = ssl.create_default_context(cafile=str(hook.ca_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(
        f"{hook.url}/validate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
    return doc


def _rejected_at_tls(hook: Webhook, body: bytes, cert: tuple[Path, Path] | None = None) -> str:
    """Post, expecting no HTTP answer at all; the connection error."""
    try:
        doc = _post(hook, body, cert)
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"the webhook answered HTTP {exc.code}: {exc.read()!r}") from None
    except OSError as exc:  # URLError, ssl.SSLError, a reset: the handshake was refused
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError(f"a forged review was answered: {doc}")


def _mounted_claim(kube: Cluster, ns: str, node: str) -> str:
    claim: str = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "cache sees the pod")
    return claim


def test_with_client_ca_a_forged_review_is_refused_at_tls_and_records_nothing(
    kube: Cluster, clean: str, node: str, webhook: Webhook, tmp_path: Path
) -> None:
    ns = clean
    claim = _mounted_claim(kube, ns, node)  # the API server's calls get through
    body = _forged_review(kube, ns, claim)

    error = _rejected_at_tls(webhook, body)
    # TLS 1.3: the client's side of the handshake ends before the server checks its certificate;
    # the server then fails the handshake and closes, with or without the alert reaching the
    # client first (asyncio drops it when it aborts the transport); a close that lands while
    # the client still reads its handshake is "EOF occurred in violation of protocol" (seen in
    # a clean-clone CI run).
    said = ("certificate", "reset", "closed connection without response", "eof occurred")
    assert any(s in error.lower() for s in said), error
    other_ca = tls.make_ca("eve's CA")
    tls.write_pair(tls.make_client_cert(other_ca, "kube-apiserver"), tmp_path / "c", tmp_path / "k")
    _rejected_at_tls(webhook, body, (tmp_path / "c", tmp_path / "k"))

    # A real refusal records its Event; the queue sends in order, so once it is there an Event
    # of the forged review (had it been decided) would be there too.
    refused = deny(delete_claim(kube.client, ns, claim))
    assert refused is not None, "the API server's DELETE of a mounted claim was allowed"
    assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
    k.wait_for(lambda: events(kube, ns, claim, "PruneBlocked"), timeout=30, what="PruneBlocked")
    assert events(kube, ns, claim, "PruneOverridden") == [], "a forged review recorded an Event"
    assert not claim_terminating(kube, ns, claim)

    free = k.make_claim(kube.client, ns).metadata.name
    assert deny(delete_claim(kube.client, ns, free)) is None, "an unmounted claim was refused"


def test_with_client_ca_probes_and_metrics_need_no_certificate_on_the_health_port(
    webhook: Webhook,
) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        with urllib.request.urlopen(f"{webhook.health_url}{path}", timeout=10) as resp:
            assert resp.status == 200, path
    req = urllib.request.Request(
        f"{webhook.health_url}/validate", data=b"{}", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 404
    assert "/validate is on the TLS port" in json.loads(refused.value.read())["reason"]
    _rejected_at_tls(webhook, b"{}")  # the TLS port: no certificate, no answer, not even a 400


@pytest.fixture
def unverified(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """A second webhook served without --client-ca."""
    with serve_webhook(
        kube, tmp_path_factory.mktemp("unverified"), POLICY, client_ca=False
    ) as hook:
        yield hook


def test_without_client_ca_a_forged_review_gets_a_verdict_but_records_no_event(
    kube: Cluster, clean: str, node: str, unverified: Webhook
) -> None:
    ns = clean
    claim = _mounted_claim(kube, ns, node)
    answer = _post(unverified, _forged_review(kube, ns, claim))
    assert answer["response"]["allowed"] is True  # what eve's review would earn from the API server

    # Something that does record an Event through the same queue: changing the registration
    # (the self-watch reports it). Once that Event is there, the forged review's would be too.
    admission = client.AdmissionregistrationV1Api(kube.client)
    admission.patch_validating_webhook_configuration(
        unverified.registration,
        [{"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 7}],
    )
    k.wait_for(
        lambda: events(kube, "default", unverified.registration, "ConfigurationTampered"),
        timeout=30,
        what="the ConfigurationTampered Event",
    )
    assert events(kube, ns, claim, "PruneOverridden") == [], "a forged review recorded an Event"
    assert not claim_terminating(kube, ns, claim)
    said = "no --client-ca: any caller that reaches the port could forge"
    assert said in unverified.log.read_text()
