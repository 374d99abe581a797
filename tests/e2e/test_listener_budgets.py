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
import resource
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from . import kube as k
from .kube import Cluster
from .webhookserver import Webhook, delete_claim, refusal_reason, serve_webhook, wait_refused

pytestmark = pytest.mark.e2e

#: The start of a request whose head never ends.
HALF_A_HEAD = b"GET /readyz HTTP/1.1\r\nHost: x\r\n"
PATIENCE = 30.0


def _hold_half_sent(held: ExitStack, url: str, count: int) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 512
    if soft != resource.RLIM_INFINITY and soft < wanted:
        assert hard == resource.RLIM_INFINITY or hard >= wanted, (
            f"the attack holds {count} sockets; the descriptor limit is {hard}"
        )
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=PATIENCE)
        held.callback(sock.close)
        with contextlib.suppress(ConnectionError):  # an older one may already be closed
            sock.sendall(HALF_A_HEAD)


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


def _closed_over_budget(hook: Webhook) -> list[tuple[dict[str, str], float]]:
    """The samples of prune_gate_webhook_connections_closed_over_budget_total on /metrics."""
    with urllib.request.urlopen(f"{hook.health_url}/metrics", timeout=PATIENCE) as resp:
        text = resp.read().decode()
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "prune_gate_webhook_connections_closed_over_budget_total"
    ]


def _direct(hook: Webhook) -> str:
    """GET /healthz over TLS on a new connection, with the API server's client certificate."""
    try:
        return str(hook.get("/healthz")[0])
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize(("workers", "held"), [("1", 1_100), ("2", 1_500)])
def test_half_sent_requests_to_the_health_port_starve_neither_validate_nor_probes(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, workers: str, held: int
) -> None:
    ns = namespace
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    with serve_webhook(kube, tmp_path, args=["--workers", workers]) as hook, ExitStack() as stack:
        refused = wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "decided")
        assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
        _hold_half_sent(stack, hook.health_url, held)

        # Concurrent calls make the API server open connections beside the one it keeps.
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(lambda _: _outcome(kube, ns, claim), range(32)))
        probes = [_probe(hook, "/readyz" if i % 2 else "/healthz") for i in range(20)]
        # TLS from a client of our own, each on a new connection, with the client certificate
        # the server requires of the API server.
        direct = [_direct(hook) for _ in range(5)]

        closed = _closed_over_budget(hook)

        failed = [o for o in outcomes if o != "refused CLAIM_MOUNTED"]
        bad = [p for p in probes if p != "200"]
        lost = [d for d in direct if d != "200"]
        assert not (failed or bad or lost), (
            f"under {held} half-sent requests to the health port: {len(failed)} of "
            f"{len(outcomes)} DELETEs not decided, {len(bad)} of {len(probes)} probes failed, "
            f"{len(lost)} of {len(direct)} TLS requests failed; first: "
            f"{[x[:240] for x in (failed[:1] + bad[:1] + lost[:1])]}"
        )
        # What tells an operator: the health port (the master's, with workers) kept closing
        # connections for its budget; the TLS port closed none.
        health = (
            {"listener": "health"} if workers == "1" else {"listener": "health", "worker": "master"}
        )
        assert sum(v for labels, v in closed if labels == health) >= held - 64
        assert sum(v for labels, v in closed if labels.get("listener") == "tls") == 0
