"""`gate webhook serve --workers 2` called by the real API server: every worker decides, one that
dies is replaced, and the pod's health port speaks for both.

The API server opens connections to the webhook as it needs them; the kernel hands each to one of
the workers sharing the port, so a burst of concurrent DELETEs reaches both.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from . import kube as k
from .kube import Cluster
from .webhookserver import Webhook, delete_claim, deny, refusal_reason, serve_webhook, wait_refused

pytestmark = pytest.mark.e2e


def _health(hook: Webhook, path: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{hook.health_url}{path}", timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return sorted(int(p) for p in text.split())


def _samples(hook: Webhook, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    status, text = _health(hook, "/metrics")
    assert status == 200
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def _refused_by_worker(hook: Webhook) -> dict[str, float]:
    counts: dict[str, float] = {}
    for labels, value in _samples(hook, "prune_gate_webhook_decisions_total").items():
        d = dict(labels)
        if d.get("outcome") == "refused" and d.get("code") == "CLAIM_MOUNTED":
            counts[d["worker"]] = counts.get(d["worker"], 0.0) + value
    return counts


def test_two_workers_decide_and_one_that_dies_is_replaced(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    ns = namespace
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    # Over HTTP/1.1: the API server opens a connection per call in flight, and the kernel hands
    # them to both workers. Over HTTP/2 (the default) its calls share one connection, which one
    # worker serves (test_overload checks that the API server speaks it).
    args = ["--workers", "2", "--no-http2"]
    with serve_webhook(kube, tmp_path, args=args) as hook:
        status, body = _health(hook, "/readyz")
        assert status == 200 and set(json.loads(body)["workers"]) == {"0", "1"}
        workers = _children(hook.pid)
        assert len(workers) == 2

        refused = wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "decided")
        assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"

        # Concurrent DELETEs open several connections: both workers get some, and every one
        # is refused with the evidence.
        def burst() -> int:
            with ThreadPoolExecutor(8) as pool:
                outcomes = list(
                    pool.map(
                        lambda _: deny(delete_claim(kube.client, ns, claim, dry_run=True)),
                        range(64),
                    )
                )
            assert all(o is not None and refusal_reason(o)[0] == "CLAIM_MOUNTED" for o in outcomes)
            return len(_refused_by_worker(hook))

        k.wait_for(lambda: burst() == 2, timeout=120, what="both workers to decide a DELETE")

        os.kill(workers[1], signal.SIGKILL)
        restarted = (("worker", "1"),)
        k.wait_for(
            lambda: (
                _samples(hook, "prune_gate_webhook_worker_restarts_total").get(restarted) == 1.0
            ),
            timeout=60,
            what="the master to start worker 1 again",
        )
        k.wait_for(
            lambda: _health(hook, "/readyz")[0] == 200, timeout=60, what="the pod ready again"
        )
        replaced = _children(hook.pid)
        assert workers[0] in replaced and workers[1] not in replaced and len(replaced) == 2
        refused = wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "decided")
        assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_idle_clients_do_not_stall_the_api_servers_calls(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, workers: str
) -> None:
    """Before, 8 clients that connected and said nothing (gunicorn's 8 threads) stalled every
    call of the API server until its timeout. Now 32 of them, half-open and handshaken-then-
    silent, cost the API server nothing: a guarded DELETE is refused with its evidence."""
    ns = namespace
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    with serve_webhook(kube, tmp_path, args=["--workers", workers]) as hook, ExitStack() as held:
        host, port = hook.url.removeprefix("https://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(hook.ca_file))
        context.check_hostname = False
        if hook.client is not None:  # the server requires the API server's certificate
            context.load_cert_chain(str(hook.client.cert), str(hook.client.key))
        for i in range(32):
            raw = socket.create_connection((host, int(port)), timeout=30)
            if i % 2:
                raw = context.wrap_socket(raw)  # handshaken, then silent
            held.callback(raw.close)
        refused = deny(delete_claim(kube.client, ns, claim, dry_run=True))
        assert refused is not None and refusal_reason(refused)[0] == "CLAIM_MOUNTED"
