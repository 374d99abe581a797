"""The webhook past saturation still answers the API server in time (issue 40), for real.

`gate webhook serve` with the chart's two workers, registered with the real kube-apiserver
(failurePolicy Fail, timeoutSeconds 5). vegeta (built from its Go module, tools/vegeta) first
measures what the webhook serves saturated, then offers twice that for a few seconds, over TLS
with the API server's client certificate, from as many connections as it needs (bounded). While
it does, the API server is asked to delete a mounted claim again and again (dry run): each call
must come back within the webhook's timeout with an answer of the webhook's (the refusal, or
its explicit 429 when it sheds), never the API server's timeout. After, the webhook decides
again, and it says what it shed on /metrics. Bounded and on loopback; the load is relative to
what this machine serves, so no figure here is a speed.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from tests.ci import pinned_binary

from . import kube as k
from .kube import Cluster
from .webhookserver import Webhook, delete_claim, refusal_reason, serve_webhook, wait_refused

pytestmark = pytest.mark.e2e

#: The registration's timeoutSeconds (serve_webhook registers with 5).
TIMEOUT_SECONDS = 5.0
#: What the API server adds around the webhook's call, at most, on a loaded machine.
API_SERVER_SLACK = 5.0
#: vegeta's connections at most: twice saturation needs more than saturation's, and no more
#: than a bounded test holds.
MAX_CONNECTIONS = 256


def review_of(claim: dict[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview of a DELETE of `claim` by a deployer, as the API server sends it."""
    meta = claim["metadata"]
    gvk = {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"}
    resource = {"group": "", "version": "v1", "resource": "persistentvolumeclaims"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": resource,
            "requestKind": gvk,
            "requestResource": resource,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "operation": "DELETE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": None,
            "oldObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim},
            "dryRun": True,
        },
    }


def vegeta_attack(
    vegeta: str, hook: Webhook, targets: Path, rate: int, seconds: float, out: Path
) -> subprocess.Popen[bytes]:
    assert hook.client is not None, "the dev cluster presents a webhook client certificate"
    workers = ["-rate=0", "-workers=32", "-max-workers=32"] if rate == 0 else [f"-rate={rate}/1s"]
    with out.with_suffix(".log").open("wb") as log:
        return subprocess.Popen(
            [
                vegeta,
                "attack",
                "-format=json",
                f"-targets={targets}",
                f"-duration={seconds}s",
                f"-timeout={TIMEOUT_SECONDS:g}s",
                "-http2=false",
                f"-root-certs={hook.ca_file}",
                f"-cert={hook.client.cert}",
                f"-key={hook.client.key}",
                f"-max-connections={MAX_CONNECTIONS}",
                f"-output={out}",
                *workers,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def report(vegeta: str, results: Path) -> dict[str, Any]:
    done = subprocess.run(
        [vegeta, "report", "-type=json", str(results)], capture_output=True, check=True, timeout=60
    )
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def metric(hook: Webhook, name: str, **labels: str) -> float:
    """The sum over the workers of the samples of `name` with `labels`."""
    with urllib.request.urlopen(f"{hook.health_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def shed_total(hook: Webhook) -> float:
    return metric(hook, "prune_gate_webhook_requests_shed_total")


def api_server_call(kube: Cluster, ns: str, claim: str) -> tuple[float, str]:
    """Seconds the API server took to answer a dry-run DELETE of the mounted claim, and what
    it answered: the webhook's refusal, the webhook's shed, or anything else in full."""
    started = time.monotonic()
    try:
        delete_claim(kube.client, ns, claim, dry_run=True)()
        outcome = "allowed"
    except ApiException as exc:
        body = str(exc.body)
        if exc.status == 403 and "prune-gate" in body:
            outcome = f"refused {refusal_reason(exc)[0]}"
        elif "failed calling webhook" in body and (
            "overloaded" in body or "429" in body or "too many requests" in body.lower()
        ):
            outcome = "shed"
        else:
            outcome = f"error {exc.status}: {body[:300]}"
    return time.monotonic() - started, outcome


def test_twice_saturation_leaves_the_api_servers_calls_answered_in_time(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    vegeta = pinned_binary("vegeta")
    mounted: str = k.make_claim(kube.client, namespace).metadata.name
    k.make_pod(kube.client, namespace, node, [mounted])
    free = k.make_claim(kube.client, namespace)
    free_doc = kube.client.sanitize_for_serialization(free)
    with serve_webhook(kube, tmp_path, args=["--workers", "2"]) as hook:
        refused = wait_refused(delete_claim(kube.client, namespace, mounted, dry_run=True), "up")
        assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
        targets = tmp_path / "targets.jsonl"
        with targets.open("w") as out:
            for i in range(64):
                body = json.dumps(review_of(free_doc, f"load-{i}-{uuid.uuid4().hex[:6]}"))
                target = {
                    "method": "POST",
                    "url": f"{hook.url}/validate",
                    "body": base64.b64encode(body.encode()).decode(),
                    "header": {"Content-Type": ["application/json"]},
                }
                out.write(json.dumps(target) + "\n")

        saturated = vegeta_attack(vegeta, hook, targets, 0, 3, tmp_path / "saturated.bin")
        assert saturated.wait(120) == 0, (tmp_path / "saturated.log").read_text()
        measured = report(vegeta, tmp_path / "saturated.bin")
        assert measured["status_codes"].get("200", 0) > 0, measured
        offered = max(100, int(2 * measured["throughput"]))

        calls: list[tuple[float, str]] = []
        overload = vegeta_attack(vegeta, hook, targets, offered, 5, tmp_path / "overload.bin")
        caller = threading.Thread(
            target=lambda: calls.extend(
                api_server_call(kube, namespace, mounted)
                for _ in iter(lambda: overload.poll() is None, False)
            )
        )
        caller.start()
        assert overload.wait(120) == 0, (tmp_path / "overload.log").read_text()
        caller.join(120)
        offered_report = report(vegeta, tmp_path / "overload.bin")

        assert calls, "no call of the API server's was made during the overload"
        late = [(round(s, 1), o) for s, o in calls if s > TIMEOUT_SECONDS + API_SERVER_SLACK]
        lost = [o for _, o in calls if o not in ("refused CLAIM_MOUNTED", "shed")]
        assert not (late or lost), (
            f"offered {offered}/s (twice the {measured['throughput']:.0f}/s measured saturated): "
            f"{len(late)} of {len(calls)} API server calls late, {len(lost)} not the webhook's "
            f"answer; first: {(late + lost)[:2]}; vegeta: {offered_report['status_codes']}"
        )
        # Past the overload it decides again, and the pod says whether it shed.
        after = wait_refused(delete_claim(kube.client, namespace, mounted, dry_run=True), "after")
        assert refusal_reason(after)[0] == "CLAIM_MOUNTED"
        assert hook.get("/readyz")[0] == 200
        codes = offered_report["status_codes"]
        assert shed_total(hook) >= codes.get("429", 0) + sum(o == "shed" for _, o in calls)
        # vegeta came over HTTP/1.1 (-http2=false: a connection per call in flight, the harder
        # case); the API server, offered h2 in ALPN, sent its calls over HTTP/2 streams.
        served = "prune_gate_webhook_connections_served_total"
        assert metric(hook, served, listener="tls", protocol="h2") >= 1
        assert metric(hook, served, listener="tls", protocol="http/1.1") >= 1
