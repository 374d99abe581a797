"""The health port cannot starve /validate (issue 32, item 6), against the real API server.

`gate webhook serve` serves /validate over TLS and /healthz, /readyz and /metrics over plain HTTP
on --health-port, which needs no client certificate. With one worker both listeners shared one
budget of 1,024 connections: about 1,100 half-sent requests to the health port made the server
reset every new TLS connection, the API server's included (with failurePolicy Fail every guarded
DELETE failed; with Ignore every one passed unchecked). With two workers the master's health
port was the only victim: 1,500 held connections failed most probes, and kubelet restarts a pod
whose liveness probe fails.

Each test holds the half-sent requests (a bounded count, on loopback), then has the API server
call the webhook on new connections (a burst of concurrent dry-run DELETEs of a mounted claim)
and probes the health port as kubelet does, each on a connection of its own.
"""

from __future__ import annotations

import contextlib
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_listener_budgets import enough_descriptors

from . import kube as k
from .kube import Cluster
from .webhookserver import Webhook, delete_claim, refusal_reason, serve_webhook, wait_refused

pytestmark = pytest.mark.e2e

#: The start of a request whose head never ends.
HALF_A_HEAD = b"GET /readyz HTTP/1.1\r\nHost: x\r\n"
#: The first bytes of a TLS ClientHello whose record says 512 bytes follow (they never do).
HALF_A_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
PATIENCE = 30.0


def _hold(held: ExitStack, url: str, payload: bytes, count: int, source: str = "") -> None:
    """Open `count` connections to `url`'s port (from the loopback address `source`, if given),
    each sending `payload` and no more."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    enough_descriptors(count)
    bind = (source, 0) if source else None
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=PATIENCE, source_address=bind)
        held.callback(sock.close)
        with contextlib.suppress(ConnectionError):  # an older one may already be closed
            sock.sendall(payload)


def _outcome(kube: Cluster, ns: str, claim: str) -> str:
    """What the API server answers a dry-run DELETE of the mounted claim."""
    try:
        delete_claim(kube.client, ns, claim, dry_run=True)()
    except ApiException as exc:
        if exc.status == 403 and "prune-gate" in str(exc.body):
            return f"refused {refusal_reason(exc)[0]}"
        return f"error {exc.status}: {exc.body}"
    return "allowed"


def _probe(hook: Webhook, path: str) -> str:
    """GET `path` on the health port over a new connection, as kubelet probes."""
    try:
        with urllib.request.urlopen(f"{hook.health_url}{path}", timeout=PATIENCE) as resp:
            return str(resp.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def _closed_over_budget(
    hook: Webhook, name: str = "prune_gate_webhook_connections_closed_over_budget_total"
) -> list[tuple[dict[str, str], float]]:
    """The samples of the counter `name` (by default the connections closed over budget) on
    /metrics."""
    with urllib.request.urlopen(f"{hook.health_url}/metrics", timeout=PATIENCE) as resp:
        text = resp.read().decode()
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def _direct(hook: Webhook) -> str:
    """GET /healthz over TLS on a new connection, with the API server's client certificate."""
    try:
        return str(hook.get("/healthz")[0])
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def _attack(
    kube: Cluster,
    ns: str,
    claim: str,
    hook: Webhook,
    port_url: str,
    payload: bytes,
    held: int,
    source: str = "",
) -> None:
    """Hold `held` connections to `port_url`, each sending `payload` and no more; then the API
    server's calls, probes and TLS requests of our own must all be answered."""
    with ExitStack() as stack:
        _hold(stack, port_url, payload, held, source)
        # Concurrent calls make the API server open connections beside the one it keeps.
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(lambda _: _outcome(kube, ns, claim), range(32)))
        probes = [_probe(hook, "/readyz" if i % 2 else "/healthz") for i in range(20)]
        # TLS from a client of our own, each on a new connection, with the client certificate
        # the server requires of the API server.
        direct = [_direct(hook) for _ in range(5)]
    failed = [o for o in outcomes if o != "refused CLAIM_MOUNTED"]
    bad = [p for p in probes if p != "200"]
    lost = [d for d in direct if d != "200"]
    assert not (failed or bad or lost), (
        f"under {held} held connections to {port_url}: {len(failed)} of {len(outcomes)} "
        f"DELETEs not decided, {len(bad)} of {len(probes)} probes failed, {len(lost)} of "
        f"{len(direct)} TLS requests failed; first: "
        f"{[x[:240] for x in (failed[:1] + bad[:1] + lost[:1])]}"
    )


def _served(kube: Cluster, ns: str, node: str) -> str:
    """A claim mounted by a pod: every DELETE of it is refused with CLAIM_MOUNTED."""
    claim: str = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    return claim


@pytest.mark.parametrize(("workers", "held"), [("1", 1_100), ("2", 1_500)])
def test_half_sent_requests_to_the_health_port_starve_neither_validate_nor_probes(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, workers: str, held: int
) -> None:
    claim = _served(kube, namespace, node)
    with serve_webhook(kube, tmp_path, args=["--workers", workers]) as hook:
        refused = wait_refused(delete_claim(kube.client, namespace, claim, dry_run=True), "ready")
        assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
        _attack(kube, namespace, claim, hook, hook.health_url, HALF_A_HEAD, held)
        # What tells an operator: the health port (the master's, with workers) kept closing
        # connections for its budget; the TLS port closed none.
        closed = _closed_over_budget(hook)
        health = {"listener": "health"}
        if workers == "2":
            health["worker"] = "master"
        assert sum(v for labels, v in closed if labels == health) >= held - 64
        assert sum(v for labels, v in closed if labels.get("listener") == "tls") == 0


def test_stalled_handshakes_on_the_tls_port_do_not_cut_off_the_api_server(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    """Anyone who reaches the TLS port can start handshakes without a client certificate:
    1,500 stalled ones, over its budget of 1,024, while the API server calls. The stranger's
    address is not the API server's (127.0.0.2 here): what it holds of --max-handshakes is its
    own address's, and the API server's new connections are still handshaken."""
    claim = _served(kube, namespace, node)
    with serve_webhook(kube, tmp_path) as hook:
        refused = wait_refused(delete_claim(kube.client, namespace, claim, dry_run=True), "ready")
        assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
        _attack(kube, namespace, claim, hook, hook.url, HALF_A_HELLO, 1_500, "127.0.0.2")
        # Past its 256 handshakes in progress, the stranger's address had its connections
        # closed at once: it never filled the port's budget of 1,024.
        turned = _closed_over_budget(hook, "prune_gate_webhook_connections_turned_away_total")
        assert sum(v for labels, v in turned if labels.get("listener") == "tls") >= 1_500 - 256
