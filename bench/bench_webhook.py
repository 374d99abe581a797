"""Measure the webhook: handler latency with 10,000 pods in the cache, over TLS, and cache memory.

Four figures, on the same synthetic cluster (10,000 pods on 100 nodes in 200 namespaces, each pod
mounting its own claim, pod JSON shaped like real API objects):

1. the decision alone (`decide_admission` on the filled LiveState), p50/p99;
2. the app in process: the WSGI call the server makes, p50/p99, and the same review parsed,
   decided and answered without the app around it: their difference is what the app's routing,
   metrics and log line cost per review;
3. end to end over HTTPS to the real server (`webhook.httpserver.HttpsServer`, TLS) from a
   client on loopback, on one kept-alive connection as the API server uses, and
   with a new TLS connection per request; p50/p99;
4. the cache's memory (tracemalloc: LiveState filled from the raw JSON, the JSON itself freed), and
   what the request path would pay without a cache: decoding and indexing a 10,000-pod list on every
   request (a lower bound: the API server's own time to produce the list is not counted).

With `--kubeconfig K` it also measures the real alternative against that cluster: it creates the
same pods (in 200 namespaces, spread as above) and times what a webhook without a cache would do
per DELETE: list the claim's namespace's pods (raw JSON, decoded, checked), and list all pods. The
namespaces are force-emptied and deleted at the end. Use a throwaway cluster
(`scripts/dev-cluster`).

Run: `python -m bench.bench_webhook [--pods N] [--requests N] [--kubeconfig K]`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import http.client
import io
import itertools
import json
import logging
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gate.engine.fence import FenceState, FenceStatus
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.sources.policyfile import policy_from_dict
from webhook import tls
from webhook.app import Settings, WebhookApp, create_app
from webhook.cache import StaticCache
from webhook.decide import decide_admission
from webhook.review import parse_review, render_response

POLICY: dict[str, Any] = {
    "webhook": {"deployers": ["system:serviceaccount:flux-system:kustomize-controller"]}
}


def pod_json(i: int) -> dict[str, Any]:
    """A pod as the API server lists it (trimmed of managedFields, which lists can omit)."""
    ns, name = f"ns-{i % 200}", f"app-{i}-7d9f8b6c5-x{i % 97:02d}q"
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"0f1e2d3c-{i:08d}-4b5a-9c8d-7e6f5a4b3c2d",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-12-01T09:00:00Z",
            "labels": {"app": f"app-{i}", "pod-template-hash": "7d9f8b6c5"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"app-{i}-7d9f8b6c5",
                    "uid": f"rs-{i}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"node-{i % 100}",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1.2.3",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}],
            "serviceAccountName": "default",
            "restartPolicy": "Always",
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            "startTime": "2026-12-01T09:00:05Z",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def claim_json(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"data-{i}", "namespace": f"ns-{i % 200}", "uid": f"c-{i}"},
        "spec": {"volumeName": f"pv-{i}", "resources": {"requests": {"storage": "1Gi"}}},
    }


def fill(live: LiveState, pods: list[dict[str, Any]], claims: list[dict[str, Any]]) -> None:
    for p in pods:
        live.upsert(p, "v1", "Pod")
    for c in claims:
        live.upsert(c, "v1", "PersistentVolumeClaim")


def review_body(i: int, user: str = "kubernetes-admin") -> bytes:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim_json(i)}
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"req-{i}",
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": f"data-{i}",
            "namespace": f"ns-{i % 200}",
            "operation": "DELETE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "oldObject": claim,
            "dryRun": True,
        },
    }
    return json.dumps(doc).encode()


def percentiles(samples: list[float]) -> str:
    qs = statistics.quantiles(samples, n=100)
    return f"p50 {qs[49] * 1000:.3f} ms  p99 {qs[98] * 1000:.3f} ms  (n={len(samples)})"


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def build_live(n: int, policy: Policy) -> LiveState:
    live = LiveState(policy.guarded_kinds)
    fill(live, [pod_json(i) for i in range(n)], [claim_json(i) for i in range(n)])
    return live


def wsgi_environ(body: bytes) -> dict[str, Any]:
    """POST /validate as `webhook.httpserver` hands it to the app."""
    return {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/validate",
        "QUERY_STRING": "",
        "SERVER_NAME": "prune-gate",
        "SERVER_PORT": "443",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_TYPE": "application/json",
        "HTTP_ACCEPT": "application/json, */*",
        "HTTP_USER_AGENT": "kube-apiserver-admission",
        "CONTENT_LENGTH": str(len(body)),
    }


def wsgi_figures(
    app: WebhookApp, bodies: list[bytes], policy: Policy, live: LiveState, requests: int
) -> None:
    """What the app costs per review: the WSGI call the server makes, against the same
    review parsed, decided and answered with no app around it (the difference is the app's
    routing and answer, and its metrics and log line)."""
    now = dt.datetime.now(dt.UTC)
    free = FenceStatus(FenceState.FREE)
    environs = itertools.cycle([wsgi_environ(b) for b in bodies])

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return None

    def call() -> None:
        environ = next(environs)
        environ["wsgi.input"].seek(0)
        b"".join(app(environ, start_response))

    def bare() -> None:
        environ = next(environs)
        environ["wsgi.input"].seek(0)
        req = parse_review(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
        outcome = decide_admission(req, policy, live, free, now.date())
        json.dumps(render_response(outcome.response), sort_keys=True, separators=(",", ":"))

    for _ in range(50):
        call()
    wsgi_t = timed(call, requests)
    bare_t = timed(bare, requests)
    print(f"handler (WSGI call, as served): {percentiles(wsgi_t)}")
    print(f"parse + decide + answer, no app: {percentiles(bare_t)}")
    around = statistics.median(wsgi_t) - statistics.median(bare_t)
    print(f"the app around it (p50 difference): {around * 1e6:.0f} us")


def serve(port: int, cert_dir: str, n: int) -> None:
    """Child process: the real HTTPS server around a cache filled with `n` pods."""
    from webhook.httpserver import HttpsServer
    from webhook.serve import CertReloader, listen_socket

    policy = policy_from_dict(POLICY)
    app = create_app(Settings(policy=policy, cache=StaticCache(build_live(n, policy))))
    reloader = CertReloader(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
    HttpsServer(app, reloader.context).run(listen_socket("127.0.0.1", port))


def https_figures(n_pods: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ca = tls.make_ca()
        tls.write_pair(
            tls.make_serving_cert(ca, ["127.0.0.1"]), Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        )
        (Path(tmp) / "ca.crt").write_bytes(ca.cert_pem)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_webhook", "--serve", str(port), tmp, str(n_pods)]
        )
        try:
            ctx = ssl.create_default_context(cafile=str(Path(tmp) / "ca.crt"))
            _wait_up(port, ctx, proc)
            bodies = [review_body(i) for i in range(200)]
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)

            def one(c: http.client.HTTPSConnection, body: bytes) -> None:
                c.request("POST", "/validate", body, {"Content-Type": "application/json"})
                resp = c.getresponse()
                data = resp.read()
                assert resp.status == 200, data

            for b in bodies[:50]:
                one(conn, b)  # warm up
            it = itertools.cycle(bodies)
            kept = timed(lambda: one(conn, next(it)), requests)
            conn.close()

            def fresh() -> None:
                c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                try:
                    one(c, next(it))
                finally:
                    c.close()

            new = timed(fresh, max(100, requests // 5))
            print(f"HTTPS, kept-alive connection:   {percentiles(kept)}")
            print(f"HTTPS, new TLS connection each: {percentiles(new)}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def _wait_up(port: int, ctx: ssl.SSLContext, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        try:
            c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
            c.request("GET", "/readyz")
            ok = c.getresponse().status == 200
            c.close()
            if ok:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("server did not come up")


def api_figures(kubeconfig: str, n: int, requests: int) -> None:
    """The request-time alternative against a real API server holding the same pods."""
    from concurrent.futures import ThreadPoolExecutor

    from gate.kube.client import request_json
    from webhook.cli import api_client

    api = api_client(kubeconfig)
    run = uuid.uuid4().hex[:6]
    namespaces = [f"bench-{run}-{i}" for i in range(200)]
    try:
        started = time.perf_counter()
        for ns in namespaces:
            request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})

        def create(i: int) -> None:
            body = pod_json(i)
            ns = namespaces[i % 200]
            body["metadata"] = {"name": body["metadata"]["name"], "namespace": ns}
            body["spec"]["containers"][0].pop("resources")
            request_json(api, "POST", f"/api/v1/namespaces/{ns}/pods", body=body)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(n)))
        print(f"API: created {n} pods in {time.perf_counter() - started:.0f}s")

        def namespaced(i: int) -> None:
            ns = namespaces[i % 200]
            items = request_json(api, "GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            claim = f"data-{i}"
            mounted = [
                p["metadata"]["name"]
                for p in items
                for v in p["spec"].get("volumes", [])
                if v.get("persistentVolumeClaim", {}).get("claimName") == claim
            ]
            assert mounted, f"no pod in {ns} ({len(items)} listed) mounts {claim}"

        counter = itertools.count()
        per_ns = timed(lambda: namespaced(next(counter) % n), min(requests, 500))
        print(f"API: list the namespace's pods per DELETE: {percentiles(per_ns)}")

        def everything() -> None:
            cont = ""
            while True:
                query = [("limit", 500)] + ([("continue", cont)] if cont else [])
                page = request_json(api, "GET", "/api/v1/pods", query)
                cont = page["metadata"].get("continue", "")
                if not cont:
                    return

        all_t = timed(everything, 5)
        median = statistics.median(all_t) * 1000
        print(f"API: list all pods (paginated) per DELETE: median {median:.0f} ms")
    finally:
        for ns in namespaces:
            with contextlib.suppress(Exception):
                request_json(
                    api,
                    "DELETE",
                    f"/api/v1/namespaces/{ns}/pods",
                    [("gracePeriodSeconds", 0)],
                )
                request_json(api, "DELETE", f"/api/v1/namespaces/{ns}")
        api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--kubeconfig", help="also measure request-time API lists on this cluster")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CERT_DIR", "PODS"))
    args = parser.parse_args()
    # Every benchmark request is a refusal: its log line would measure the terminal, not us.
    logging.getLogger("prune_gate").setLevel(logging.ERROR)
    if args.serve:
        serve(int(args.serve[0]), args.serve[1], int(args.serve[2]))
        return
    n = args.pods
    policy = policy_from_dict(POLICY)
    print(f"webhook benchmark: {n} pods and {n} claims in the cache, python {sys.version[:6]}")

    # 4. memory first, on a clean heap
    pods = [pod_json(i) for i in range(n)]
    claims = [claim_json(i) for i in range(n)]
    gc.collect()
    tracemalloc.start()
    live = LiveState(policy.guarded_kinds)
    fill(live, pods, claims)
    del pods, claims
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"cache memory: {current / 2**20:.1f} MiB for {len(live.pods)} pods + "
        f"{len(live.objects)} claims ({current / len(live):.0f} B per object; "
        f"peak while filling {peak / 2**20:.1f} MiB)"
    )
    listing = json.dumps({"kind": "PodList", "items": [pod_json(i) for i in range(n)]}).encode()

    def request_time_list() -> None:
        scratch = LiveState(policy.guarded_kinds)
        for p in json.loads(listing)["items"]:
            scratch.upsert(p, "v1", "Pod")

    cost = timed(request_time_list, 5)
    print(
        f"without a cache: decode + index a {len(listing) / 2**20:.1f} MiB pod list per request: "
        f"median {statistics.median(cost) * 1000:.0f} ms (lower bound, API server time excluded)"
    )

    # 1. the decision alone
    now = dt.datetime.now(dt.UTC)
    free = FenceStatus(FenceState.FREE)
    reqs = [parse_review(review_body(i)) for i in range(500)]
    it = itertools.cycle(reqs)
    decide_t = timed(
        lambda: decide_admission(next(it), policy, live, free, now.date()), args.requests
    )
    print(f"decision (decide_admission):    {percentiles(decide_t)}")

    # 2. the app in process
    app = create_app(Settings(policy=policy, cache=StaticCache(live)))
    bodies = [review_body(i) for i in range(500)]
    wsgi_figures(app, bodies, policy, live, args.requests)

    # 3. end to end over TLS to the real server
    https_figures(n, args.requests)

    if args.kubeconfig:
        api_figures(args.kubeconfig, n, args.requests)


if __name__ == "__main__":
    main()
