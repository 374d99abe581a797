"""`gate webhook serve --register` registers only once it serves (issue 13).

A registration that points at nothing refuses every guarded DELETE under failurePolicy Fail, so
the webhook must never be registered before it answers: not while its port cannot be bound, not
while its cache is not ready. The API server's watch of webhook configurations, replayed from a
resourceVersion taken before the server started, shows every registration that ever existed,
however briefly.
"""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from . import kube as k
from .kube import Cluster
from .webhookserver import serve_and_fail, serve_webhook

pytestmark = pytest.mark.e2e
_Watch: Any = watch.Watch  # the client's watch is untyped


def _marker(name: str) -> dict[str, Any]:
    """A configuration that matches nothing: written last, its event ends the replay."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [],
    }


def _events_until(api: Any, since: str, last: str) -> list[tuple[str, str]]:
    """(type, name) of every configuration event after `since`, up to `last`'s ADDED."""
    seen: list[tuple[str, str]] = []
    stream = _Watch().stream(
        api.list_validating_webhook_configuration,
        resource_version=since,
        timeout_seconds=120,  # a hang guard; the marker's event ends it
    )
    for event in stream:
        name = event["object"].metadata.name
        seen.append((event["type"], name))
        if name == last and event["type"] == "ADDED":
            return seen
    raise AssertionError(f"the watch ended before {last} was seen: {seen}")


def test_a_taken_port_is_never_registered(kube: Cluster) -> None:
    api: Any = client.AdmissionregistrationV1Api(kube.client)
    name = f"prune-gate-e2e-taken-{uuid.uuid4().hex[:6]}"
    marker = f"{name}-end"
    since = api.list_validating_webhook_configuration().metadata.resource_version
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve_and_fail(kube, name, "--listen", f"127.0.0.1:{port}", "--health-port", "0")
    assert result.returncode == 2, result.stderr
    assert f"cannot listen on 127.0.0.1:{port} (--listen)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    api.create_validating_webhook_configuration(_marker(marker))
    try:
        seen = _events_until(api, since, marker)
    finally:
        k.delete_if_present(api.delete_validating_webhook_configuration, marker)
    assert [e for e in seen if e[1] == name] == [], seen


def _probe_at_first_sight(api: Any, since: str, prefix: str, found: list[Any]) -> None:
    """Watch from `since`; at the first registration named `prefix*`, GET /readyz at the URL it
    names, trusting its caBundle, and keep the answer (or the error) in `found`."""
    stream = _Watch().stream(
        api.list_validating_webhook_configuration,
        resource_version=since,
        timeout_seconds=120,  # a hang guard
    )
    for event in stream:
        config = event["object"]
        if not config.metadata.name.startswith(prefix) or not config.webhooks:
            continue
        hook = config.webhooks[0].client_config
        context = ssl.create_default_context(cadata=base64.b64decode(hook.ca_bundle).decode())
        url = hook.url.removesuffix("/validate") + "/readyz"
        try:
            with urllib.request.urlopen(url, context=context, timeout=5) as resp:
                found.append((event["type"], resp.status))
        except (OSError, urllib.error.HTTPError) as exc:
            found.append((event["type"], exc))
        return


def test_the_registration_appears_only_once_the_webhook_answers(
    kube: Cluster, tmp_path: Path
) -> None:
    """Watched live from before the server starts: when the registration first appears, the
    webhook already answers /readyz with 200 (before the change it appeared before the port
    was even bound)."""
    api: Any = client.AdmissionregistrationV1Api(kube.client)
    since = api.list_validating_webhook_configuration().metadata.resource_version
    found: list[Any] = []
    watcher = threading.Thread(
        target=_probe_at_first_sight, args=(api, since, "prune-gate-e2e-", found), daemon=True
    )
    watcher.start()
    with serve_webhook(kube, tmp_path, client_ca=False):
        watcher.join(timeout=120)
    assert found == [("ADDED", 200)], found
