"""The webhook under load from a separate process, behind its own server and two production
WSGI servers, through the real kube-apiserver beside Kyverno and a no-op webhook, and its cache's
start and catch-up: issues 13's and 40's figures, printed as one table beside the targets.

One cluster holds 10,000 pods and 5,000 claims in 100 namespaces (half the claims mounted by a pod,
half by none; pods of realistic size, bench_snapshot's). Each server runs the same WSGI app
around the same watch cache (TLS with --client-ca as the chart serves it):
`gate webhook serve` (its own asyncio server, webhook/httpserver.py), granian (Rust: hyper and
rustls, the app on one blocking thread per worker) and gunicorn's threaded worker (what served it
before), the last two loading bench/wsgi_app.py; `--servers` picks them, `--workers` the worker
count of each (the chart's 2 by default).

1. load from another process: vegeta (built from its Go module, tools/vegeta) POSTs the
   AdmissionReview of a refused DELETE (a claim a pod mounts) and of an allowed one (a claim
   nothing mounts), 200 claims each, over kept-alive TLS connections as the API server does, at
   constant rates (100, 500, 1,000 and 4,000 requests/s, the last about twice saturation) and
   saturated (-rate=0 with --max-workers concurrent requests): p50/p90/p99 of the steady state
   (the first second, when vegeta opens its connections, is left out and its slowest answer
   printed apart), transport errors, 429s (shed) and other non-2xx answers, the share answered
   within 1 s, and every 200 checked for the right verdict and a uid that was sent; each rate
   over h2 (vegeta offers it in ALPN, as kube-apiserver does: streams over few connections) and
   over HTTP/1.1 (a connection per request in flight), `--protocols`. Memory: RSS
   summed over the server's process tree while it runs (/proc/PID/status), and PSS in one more
   run at the highest rate (smaps_rollup, which stalls the process it reads, so that run gives
   no latency); then, the connections closed, whether it is alive and what it kept; then the
   slowloris probe: 1,100 TLS connections each holding half a request head, and whether a new
   review is still answered, at once and 8 s later (`--no-slowloris` leaves it out).
2. end to end through kube-apiserver (the project's server only): DELETE ?dryRun=All of a
   mounted and of an unmounted claim in four namespaces: one no webhook sees, one that
   prune-gate's registration selects (what `--register` registers, its namespaceSelector
   narrowed to that namespace's label), one that Kyverno's selects (built from its Go module,
   tools/kyverno, run out of cluster the way its developers run it, enforcing
   bench/kyverno-claim-in-use.yaml: an apiCall listing the namespace's pods), and the floor: a
   webhook that decides nothing (bench/noop_webhook.py), registered as prune-gate is. In
   rounds, each round all requests in a random order, so the setups share the API server's
   state and the machine's load; p50/p99 of each, the latency each webhook adds over none, and
   prune-gate's above the floor.
3. the cache: start to ready (/readyz), and a change to a decision: from the API server's answer
   to a pod mounting a free claim (or to the deletion of its only pod) until the webhook's
   verdict for that claim changes (the first changed answer, and the first of 10 changed
   answers in a row: with several workers each has its own cache), polled over new connections.

Run: `python -m bench.bench_load [--servers prune-gate,granian,gunicorn] [--workers 2]
[--rates 100,500,1000,4000] [--protocols h2,http/1.1] [--duration 5] [--rounds 100]
[--no-kyverno] [--no-slowloris]
[--serve-arg=--queue-timeout=0s ...]` (`make bench` installs granian and gunicorn: the `bench`
extra). With KUBECONFIG (or --kubeconfig) it uses that cluster and removes what it created, else
it starts its own scripts/dev-cluster in a temporary directory. Everything listens and is loaded
on 127.0.0.1. vegeta and Kyverno are built on first use (scripts/build-binaries; Kyverno takes
many minutes); if Kyverno cannot be built or started, the table says why and the rest is
measured.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import http.client
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.bench_snapshot import BUILD_BINARIES, Raw, claim_body, cluster, kubectl_path, pod_body
from bench.proctree import process_tree
from webhook.serve import MALLOC_ENV

REPO = Path(__file__).resolve().parents[1]
KYVERNO_POLICY = Path(__file__).with_name("kyverno-claim-in-use.yaml")
KYVERNO_POLICY_NAME = "bench-refuse-mounted-claim-delete"
KYVERNO_NAMESPACE = "kyverno"
#: The namespace label the webhooks' namespaceSelectors pick their setup's namespace by.
SETUP_LABEL = "bench.prune-gate.io/setup"
#: The floor: a webhook that decides nothing (bench/noop_webhook.py), registered the same way.
SETUPS = ("none", "prune-gate", "kyverno", "floor")
DEPLOYER = "system:serviceaccount:flux-system:kustomize-controller"
POLICY: dict[str, Any] = {"webhook": {"deployers": [DEPLOYER]}}
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
#: Pods tolerate their (kubelet-less) nodes going unreachable: no eviction mid-run.
TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
]
# Issue 13's targets, on this machine.
TARGET_SATURATED = 1500.0
TARGET_P99_AT_500_MS = 5.0
TARGET_ADDED_P50_MS = 2.0
TARGET_MEMORY_MB = 150.0
POLL_SECONDS = 0.01
SETTLED_STREAK = 10
ENFORCED_STREAK = 20
#: The namespace of the change-to-decision trials: none of the setups'.
CHANGE_NS = len(SETUPS)
#: vegeta gives up on a request after this long: the registration's timeoutSeconds (5 s, the
#: default of `--timeout-seconds` and the chart), after which the API server applies the
#: failurePolicy. A timeout counts as a transport error.
TIMEOUT_SECONDS = 5
#: Each vegeta run starts with this long more, left out of the latency percentiles: the
#: connections it opens then (each a TLS handshake) are a start-up cost a caller like the API
#: server, which keeps its connections, pays once; its slowest answer is printed apart.
WARMUP_SECONDS = 1.0
#: Issue 40's overload figure: at about twice saturation, the share of requests answered (a
#: verdict, or an explicit 429) within this long.
ANSWERED_SECONDS = 1.0
TARGET_ANSWERED_SHARE = 0.90
#: The constant rate that is about twice saturation on this machine (issue 40).
OVERLOAD_RATE = 4000

T = TypeVar("T")


class BenchError(Exception):
    """Something the bench needs did not happen in time or answered wrong; the message says what."""


def wait_for(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.1) -> T:
    """Poll check() until it returns something other than None/False; BenchError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got is not None and got is not False:
            return got
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def say(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------ memory (/proc)


@dataclass
class Memory:
    """MiB summed over a process tree; PSS splits pages the workers share with their master."""

    rss: float = 0.0
    pss: float = 0.0
    processes: int = 0

    def text(self) -> str:
        if not self.processes:
            return "-"
        many = f", {self.processes} processes" if self.processes > 1 else ""
        if not self.pss:
            return f"RSS {self.rss:.0f} MiB{many}"
        return f"RSS {self.rss:.0f} MiB (PSS {self.pss:.0f} MiB{many})"


_SMAPS = re.compile(r"^(Rss|Pss):\s+(\d+) kB", re.MULTILINE)


def memory_of(root: int) -> Memory:
    mem = Memory()
    for pid in process_tree(root):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        kb = {k: int(v) for k, v in _SMAPS.findall(text)}
        mem.rss += kb.get("Rss", 0) / 1024
        mem.pss += kb.get("Pss", 0) / 1024
        mem.processes += 1
    return mem


def connections_to(port: int) -> int:
    """Established TCP connections whose local end is 127.0.0.1:port (/proc/net/tcp)."""
    local = f"0100007F:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return 0
    return sum(1 for ln in lines if (f := ln.split())[1] == local and f[3] == "01")


def rss_of(root: int) -> Memory:
    """RSS summed over a process tree from /proc/PID/status: cheap, unlike smaps_rollup, whose
    walk of a process's page tables holds its memory map's lock and stalls it (a worker's
    reviews waited up to 50 ms each time it was read, the p99 of a quiet run). No PSS."""
    mem = Memory()
    for pid in process_tree(root):
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
        if found:
            mem.rss += int(found.group(1)) / 1024
            mem.processes += 1
    return mem


class PeakMemory:
    """Samples a process tree's memory (and the connections to its port) from a thread while in
    the `with` block; keeps the peaks. RSS only (`rss_of`), unless `pss`: then smaps_rollup,
    which stalls the server while it is read, so latency figures come from runs without it."""

    def __init__(self, root: int, port: int = 0, every: float = 0.25, pss: bool = False) -> None:
        self.root, self.port, self.every = root, port, every
        self.read = memory_of if pss else rss_of
        self.peak = Memory()
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            mem = self.read(self.root)
            if mem.rss > self.peak.rss:
                self.peak = mem
            if self.port:
                self.connections = max(self.connections, connections_to(self.port))
            self._stop.wait(self.every)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# ------------------------------------------------------------------------------ the cluster


def api_call(
    raw: Raw, method: str, path: str, query: Sequence[tuple[str, str]] = (), body: Any = None
) -> tuple[int, bytes]:
    """One request over the pooled, kept-alive connections of `raw`: (status, body), any status."""
    m, url, headers, data, _ = raw.api.param_serialize(
        method,
        path,
        query_params=list(query),
        body=body,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    resp = raw.api.call_api(m, url, header_params=headers, body=data, _request_timeout=60)
    return int(resp.status), bytes(resp.read())


@dataclass
class Layout:
    """Where the bench's objects live: claim j and pod i in namespace (j or i) % namespaces; pod
    i < claims/2 mounts claim i, so claims [0, claims/2) are mounted and the rest free."""

    run: str
    pods: int
    claims: int
    namespaces: int
    nodes: list[str] = field(default_factory=list)

    def ns(self, index: int) -> str:
        return f"bench-load-{self.run}-{index % self.namespaces}"

    @property
    def all_ns(self) -> list[str]:
        return [self.ns(k) for k in range(self.namespaces)]

    @property
    def mounted(self) -> int:
        return self.claims // 2

    def free_claim_in(self, ns_index: int, nth: int = 0) -> int:
        """The nth free claim of namespace ns_index."""
        j = self.mounted + (ns_index - self.mounted) % self.namespaces + nth * self.namespaces
        if j >= self.claims:
            raise BenchError(f"namespace {ns_index} has fewer than {nth + 1} free claims")
        return j

    def claim_path(self, j: int) -> str:
        return f"/api/v1/namespaces/{self.ns(j)}/persistentvolumeclaims/data-{j}"


def pod_with(i: int, node: str, claim: str | None, name: str | None = None) -> dict[str, Any]:
    body = pod_body(i, node, claim)
    body["spec"]["tolerations"] = TOLERATIONS
    if name:
        body["metadata"]["name"] = name
    return body


def populate(raw: Raw, lay: Layout) -> float:
    """Namespaces (the first four labelled with their setup), two nodes, claims, then pods."""
    started = time.perf_counter()
    for k in range(lay.namespaces):
        labels = {SETUP_LABEL: SETUPS[k]} if k < len(SETUPS) else {}
        raw.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": lay.ns(k), "labels": labels}}
        )
    for node in lay.nodes:
        raw.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    claims = [
        (f"/api/v1/namespaces/{lay.ns(j)}/persistentvolumeclaims", claim_body(j))
        for j in range(lay.claims)
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in pool.map(lambda pb: raw.request("POST", pb[0], pb[1]), claims):
            pass
    wanted = set(lay.all_ns)

    def accounts_ready() -> bool:
        items = raw.request("GET", "/api/v1/serviceaccounts")["items"]
        have = {a["metadata"]["namespace"] for a in items if a["metadata"]["name"] == "default"}
        return wanted <= have

    wait_for("the default service accounts of the bench namespaces", accounts_ready, 120, 0.3)
    pods = [
        (
            f"/api/v1/namespaces/{lay.ns(i)}/pods",
            pod_with(i, lay.nodes[i % len(lay.nodes)], f"data-{i}" if i < lay.mounted else None),
        )
        for i in range(lay.pods)
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in pool.map(lambda pb: raw.request("POST", pb[0], pb[1]), pods):
            pass
    return time.perf_counter() - started


def cleanup(raw: Raw, lay: Layout) -> None:
    """Force-delete the pods (no kubelet finishes them), then the namespaces and the nodes."""
    for ns in lay.all_ns:
        with contextlib.suppress(Exception):
            api_call(raw, "DELETE", f"/api/v1/namespaces/{ns}/pods", [("gracePeriodSeconds", "0")])
            api_call(raw, "DELETE", f"/api/v1/namespaces/{ns}")
    for node in lay.nodes:
        with contextlib.suppress(Exception):
            api_call(raw, "DELETE", f"/api/v1/nodes/{node}")


# ------------------------------------------------------------------------------ reviews


def review(claim: dict[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sends for `kubectl delete pvc --dry-run=server`."""
    meta = claim["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "requestKind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "requestResource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": meta["name"],
            "namespace": meta["namespace"],
            "operation": "DELETE",
            "userInfo": {
                "username": "kubernetes-admin",
                "groups": ["system:masters", "system:authenticated"],
            },
            "object": None,
            "oldObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim},
            "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "dryRun": ["All"]},
        },
    }


@dataclass
class Tls:
    """What a caller of the webhook needs: its CA, and the API server's client pair if required."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if self.cert and self.key:
            ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx


class WebhookCaller:
    """POSTs reviews to /validate: on one kept-alive connection, or a new one each time."""

    def __init__(self, port: int, tls: Tls) -> None:
        self.port, self.ctx = port, tls.context()
        self.conn: http.client.HTTPSConnection | None = None

    def _connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)

    def allowed(self, body: bytes, fresh: bool = False) -> bool:
        if fresh or self.conn is None:
            if self.conn is not None:
                self.conn.close()
            self.conn = self._connection()
        try:
            self.conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        if fresh:
            self.conn.close()
            self.conn = None
        if resp.status != 200:
            raise BenchError(f"/validate answered {resp.status}: {data[:300]!r}")
        return bool(json.loads(data)["response"]["allowed"])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# ------------------------------------------------------------------------------ an attack


#: Half-sent requests the slowloris probe holds: past a worker's default connection budget
#: (1,024) and granian's default backpressure (1,024).
SLOWLORIS_CONNECTIONS = 1100
#: How long the probe spends opening them at most.
SLOWLORIS_OPEN_SECONDS = 30.0


def slowloris_probe(server: Server, body: bytes, held: int = SLOWLORIS_CONNECTIONS) -> str:
    """Whether a review is still answered while `held` TLS connections (with the API server's
    client certificate, so each passes the handshake) hold half a request head each: the
    slowloris attack on a server that waits for heads without a budget or a deadline. Tried
    once with them held, and again after 8 s (past a 5 s head deadline) with them kept."""
    ctx = server.tls.context()
    socks: list[ssl.SSLSocket] = []
    opened = 0
    # A server that handshakes in a few threads stalls each connection past those: the attack
    # opens what it can within OPEN_SECONDS (it is held already), not 1,100 timeouts' worth.
    open_until = time.monotonic() + SLOWLORIS_OPEN_SECONDS
    try:
        for _ in range(held):
            if time.monotonic() > open_until:
                break
            try:
                raw = socket.create_connection(("127.0.0.1", server.port), timeout=2)
                tls_sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
                tls_sock.sendall(b"POST /validate HTTP/1.1\r\nHost: webhook\r\n")
            except OSError:
                continue  # closed for a budget, or refused: the attack holds less
            socks.append(tls_sock)
            opened += 1
        answers = []
        for when in ("at once", "after 8 s"):
            if when != "at once":
                time.sleep(8)  # the probe's own pace, not synchronisation
            caller = WebhookCaller(server.port, server.tls)
            started = time.monotonic()
            try:
                caller.allowed(body, fresh=True)
                answers.append(f"{when}: answered in {(time.monotonic() - started) * 1000:.0f} ms")
            except (OSError, http.client.HTTPException, BenchError) as exc:
                answers.append(f"{when}: NOT answered ({type(exc).__name__})")
            finally:
                caller.close()
        still = sum(1 for s in socks if not _closed(s))
        return f"{opened} held, {still} still open after; a new review " + ", ".join(answers)
    finally:
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()


def _closed(sock: ssl.SSLSocket) -> bool:
    """Whether the server has closed `sock` (EOF or reset), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except OSError:
        return True


# ------------------------------------------------------------------------------ the server


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    health_port: int
    tls: Tls
    log: Path
    ready_seconds: float
    ca_pem: bytes


def serve_argv(
    gate: str, kubeconfig: str, port: int, health_port: int, cert_dir: Path, policy: Path
) -> list[str]:
    return [
        gate,
        "webhook",
        "serve",
        "--self-signed",
        "--cert-dir",
        str(cert_dir),
        "--listen",
        f"127.0.0.1:{port}",
        "--health-port",
        str(health_port),
        "--config",
        str(policy),
        "--kubeconfig",
        kubeconfig,
        # the doctor pass lists the whole cluster on a timer: not part of answering reviews
        "--stuck-interval",
        "0s",
    ]


def health_status(port: int, path: str, tls_: Tls | None = None) -> int:
    """The status of GET `path` on 127.0.0.1:`port` over a new connection (TLS with `tls_`);
    0 when there is no answer."""
    try:
        conn = (
            http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            if tls_ is None
            else http.client.HTTPSConnection("127.0.0.1", port, context=tls_.context(), timeout=2)
        )
        conn.request("GET", path)
        status = conn.getresponse().status
        conn.close()
        return int(status)
    except (OSError, http.client.HTTPException):
        return 0


@contextlib.contextmanager
def webhook_server(argv: list[str], tmp: Path, client: WebhookClientPair) -> Iterator[Server]:
    """Start `gate webhook serve`, time it to /readyz 200, stop its whole process group after."""
    port = int(argv[argv.index("--listen") + 1].rsplit(":", 1)[1])
    health = int(argv[argv.index("--health-port") + 1])
    cert_dir = Path(argv[argv.index("--cert-dir") + 1])
    log = tmp / f"webhook-{port}.log"
    with log.open("wb") as out:
        started = time.monotonic()
        # The malloc environment the image and the chart give it (webhook.serve.MALLOC_ENV).
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**os.environ, **MALLOC_ENV},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise BenchError(f"the webhook exited {proc.returncode}:\n{tail(log)}")
            return health_status(health, "/readyz") == 200

        wait_for("the webhook's /readyz", ready, 300, 0.05)
        ready_s = time.monotonic() - started
        tls = Tls(cert_dir / "ca.crt", client.cert, client.key)
        try:
            yield Server(proc, port, health, tls, log, ready_s, (cert_dir / "ca.crt").read_bytes())
        except Exception as exc:
            if proc.poll() is not None:  # say why it stopped answering
                raise BenchError(
                    f"the webhook exited {proc.returncode} during the bench ({exc}); its log "
                    f"ends:\n{tail(log, 30)}"
                ) from exc
            raise
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30) -> None:
    """SIGTERM the process (a session leader we started), then SIGKILL its group if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@dataclass
class WebhookClientPair:
    """The client pair kube-apiserver presents to webhooks (scripts/dev-cluster's), if any."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


def webhook_client_of(kubeconfig: str) -> WebhookClientPair:
    state = Path(kubeconfig).parent / "state.json"
    try:
        client = json.loads(state.read_text()).get("webhookClient") or {}
    except (OSError, ValueError):
        return WebhookClientPair()
    if not all(k in client for k in ("ca", "cert", "key")):
        return WebhookClientPair()
    return WebhookClientPair(Path(client["ca"]), Path(client["cert"]), Path(client["key"]))


def accepts_workers(gate: str) -> bool:
    out = subprocess.run(
        [gate, "webhook", "serve", "--help"], capture_output=True, text=True, timeout=120
    )
    return "--workers" in out.stdout


# ------------------------------------------------------------------------------ vegeta


@dataclass
class Attack:
    """One vegeta run: what was sent, what came back, how fast."""

    rate: int  # 0: saturated
    requests: int = 0
    ok: int = 0
    wrong: int = 0  # 200 with the wrong verdict, or a uid that was not sent
    non_2xx: int = 0
    shed: int = 0  # of those, 429: shed by the server, an explicit answer without a decision
    answered_1s: int = 0  # any HTTP answer (a verdict or a 429) within ANSWERED_SECONDS
    transport: int = 0  # no answer: refused, reset, or TIMEOUT_SECONDS passed
    timeouts: int = 0  # of those, timed out
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    #: The slowest answer of the first WARMUP_SECONDS (left out of p50/p90/p99): vegeta opens
    #: its connections then, a TLS handshake each, as a caller does once.
    warmup_max: float = 0.0
    achieved: float = 0.0  # requests/s sent
    throughput: float = 0.0  # right answers/s
    vegeta_cpu: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    peak: Memory = field(default_factory=Memory)
    connections: int = 0  # the most open at once

    @property
    def failed(self) -> int:
        return self.wrong + self.non_2xx + self.transport

    def latency(self) -> str:
        return (
            f"p50 {self.p50:.1f} / p90 {self.p90:.1f} / p99 {self.p99:.1f} ms "
            f"(first {WARMUP_SECONDS:g} s apart: max {self.warmup_max:.0f} ms)"
        )

    @property
    def answered_share(self) -> float:
        return self.answered_1s / self.requests if self.requests else 0.0

    def outcome(self) -> str:
        if not self.failed:
            return f"{self.ok}/{self.requests} right"
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.transport - self.timeouts, "transport errors"),
                (self.timeouts, f"timeouts (> {TIMEOUT_SECONDS} s)"),
                (self.shed, "shed (429)"),
                (self.non_2xx - self.shed, "other non-2xx"),
                (self.wrong, "wrong verdicts"),
            )
            if n
        ]
        return f"{self.ok}/{self.requests} right, " + ", ".join(parts)


def _stamp(text: str) -> float:
    """Seconds since the epoch of vegeta's RFC 3339 timestamp (nanoseconds cut to micro)."""
    trimmed = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(trimmed).timestamp()


def write_targets(path: Path, url: str, bodies: list[bytes]) -> None:
    with path.open("w") as out:
        for body in bodies:
            target = {
                "method": "POST",
                "url": url,
                "body": base64.b64encode(body).decode(),
                "header": {"Content-Type": ["application/json"]},
            }
            out.write(json.dumps(target) + "\n")


@dataclass
class Targets:
    """A vegeta targets file of reviews, the uids in it, and the verdict each must get."""

    path: Path
    uids: set[str]
    allowed: bool


def attack(
    vegeta: str,
    server: Server,
    targets: Targets,
    rate: int,
    duration: float,
    max_workers: int,
    out_dir: Path,
    pss: bool = False,
    http2: bool = False,
) -> Attack:
    """One vegeta attack, its results decoded and every answer checked; `pss`: the server's
    PSS sampled too (which slows it: see `rss_of`); `http2`: vegeta offers h2 in ALPN, as the
    API server does, and uses it where the server agrees (Go's client: streams over one
    connection, another past the server's MAX_CONCURRENT_STREAMS)."""
    results = out_dir / f"results-{uuid.uuid4().hex[:8]}.bin"
    cmd = [
        vegeta,
        "attack",
        "-format=json",
        f"-targets={targets.path}",
        f"-duration={duration + WARMUP_SECONDS}s",
        f"-timeout={TIMEOUT_SECONDS}s",
        f"-http2={'true' if http2 else 'false'}",
        "-keepalive=true",
        "-max-body=-1",
        f"-root-certs={server.tls.ca}",
        f"-output={results}",
    ]
    if server.tls.cert and server.tls.key:
        cmd += [f"-cert={server.tls.cert}", f"-key={server.tls.key}"]
    if rate:
        cmd += [f"-rate={rate}/1s", "-max-workers=1000"]
    else:
        cmd += ["-rate=0", f"-workers={max_workers}", f"-max-workers={max_workers}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with PeakMemory(server.proc.pid, server.port, pss=pss) as peak:
        proc = subprocess.run(cmd, capture_output=True, timeout=duration + 60, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise BenchError(f"vegeta attack exited {proc.returncode}: {proc.stderr[-500:]!r}")
    out = Attack(rate)
    out.seconds = time.monotonic() - started
    out.vegeta_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out.peak = peak.peak
    out.connections = peak.connections
    report = json.loads(
        subprocess.run(
            [vegeta, "report", "-type=json", str(results)],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
    )
    out.requests = int(report["requests"])
    out.achieved = float(report["rate"])
    elapsed = (report["duration"] + report["wait"]) / 1e9
    encoded = subprocess.run(
        [vegeta, "encode", "-to=json", str(results)], capture_output=True, check=True, timeout=120
    ).stdout
    seen_errors: dict[str, int] = {}
    decoded = [json.loads(line) for line in encoded.splitlines()]
    started_at = [_stamp(r["timestamp"]) for r in decoded]
    first = min(started_at, default=0.0)
    steady: list[float] = []
    warming: list[float] = []
    for r, at in zip(decoded, started_at, strict=True):
        (warming if at < first + WARMUP_SECONDS else steady).append(int(r["latency"]) / 1e6)
    if len(steady) >= 2:
        out.p50, out.p90, out.p99 = (
            statistics.quantiles(steady, n=100, method="inclusive")[q - 1] for q in (50, 90, 99)
        )
    out.warmup_max = max(warming, default=0.0)
    for r in decoded:
        code = int(r.get("code") or 0)
        if code and int(r.get("latency") or 0) <= ANSWERED_SECONDS * 1e9:
            out.answered_1s += 1
        if code == 429:
            out.shed += 1
        if code == 0:
            out.transport += 1
            text = str(r.get("error") or "")
            out.timeouts += "Timeout" in text or "deadline exceeded" in text
            err = re.sub(r":\d+->", "->", str(r.get("error") or "no response"))  # client port
            seen_errors[err] = seen_errors.get(err, 0) + 1
        elif not 200 <= code < 300:
            out.non_2xx += 1
            key = f"HTTP {code}"
            seen_errors[key] = seen_errors.get(key, 0) + 1
        else:
            try:
                resp = json.loads(base64.b64decode(r.get("body") or ""))["response"]
                right = resp["allowed"] is targets.allowed and resp["uid"] in targets.uids
            except (ValueError, KeyError, TypeError):
                right = False
            if right:
                out.ok += 1
            else:
                out.wrong += 1
    out.errors = [f"{n}x {e[:160]}" for e, n in sorted(seen_errors.items(), key=lambda x: -x[1])]
    out.throughput = out.ok / elapsed if elapsed > 0 else 0.0
    results.unlink(missing_ok=True)
    return out


# ------------------------------------------------------------------------------ change -> decision


def poll_until(
    caller: WebhookCaller, body: bytes, want_allowed: bool, since: float, timeout: float
) -> tuple[float, float]:
    """Seconds from `since` to the first answer that is `want_allowed`, and to the first of
    SETTLED_STREAK such answers in a row (new connections: with workers, any may answer)."""
    deadline = time.monotonic() + timeout
    first: float | None = None
    streak_start: float | None = None
    streak = 0
    while time.monotonic() < deadline:
        got = caller.allowed(body, fresh=True)
        now = time.monotonic()
        if got is want_allowed:
            first = now if first is None else first
            streak_start = now if streak_start is None else streak_start
            streak += 1
            if streak >= SETTLED_STREAK:
                return first - since, streak_start - since
        else:
            streak_start, streak = None, 0
        time.sleep(POLL_SECONDS)
    want = "allowed" if want_allowed else "refused"
    raise BenchError(f"the webhook did not answer {want} within {timeout:.0f}s of the change")


@dataclass
class Change:
    mount_first: list[float] = field(default_factory=list)
    mount_settled: list[float] = field(default_factory=list)
    unmount_first: list[float] = field(default_factory=list)
    unmount_settled: list[float] = field(default_factory=list)


def change_trials(
    raw: Raw, lay: Layout, server: Server, claims: list[dict[str, Any]], tag: str
) -> Change:
    """Per free claim: a pod that mounts it appears (refused from then on), then goes (allowed)."""
    out = Change()
    caller = WebhookCaller(server.port, server.tls)
    try:
        for k, claim in enumerate(claims):
            ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
            body = json.dumps(review(claim, f"change-{tag}-{k}")).encode()
            wait_for(f"{name} allowed before the trial", lambda: caller.allowed(body), 30)  # noqa: B023
            pod = pod_with(90_000 + k, lay.nodes[0], name, name=f"bench-change-{tag}-{k}")
            raw.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
            first, settled = poll_until(caller, body, False, time.monotonic(), 30)
            out.mount_first.append(first)
            out.mount_settled.append(settled)
            api_call(
                raw,
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                [("gracePeriodSeconds", "0")],
            )
            first, settled = poll_until(caller, body, True, time.monotonic(), 30)
            out.unmount_first.append(first)
            out.unmount_settled.append(settled)
    finally:
        caller.close()
    return out


# ------------------------------------------------------------------------------ end to end


@dataclass
class Setup:
    """One of the three: the namespace's mounted and free claim, and who must refuse."""

    name: str
    namespace: str
    mounted: str
    free: str
    refuser: str | None  # substring of the API server's refusal message; None: nothing refuses


def e2e_request(raw: Raw, setup: Setup, claim: str) -> tuple[float, int, bytes]:
    path = f"/api/v1/namespaces/{setup.namespace}/persistentvolumeclaims/{claim}"
    started = time.perf_counter()
    status, body = api_call(raw, "DELETE", path, [("dryRun", "All")])
    return time.perf_counter() - started, status, body


def e2e_verdict_ok(setup: Setup, mounted: bool, status: int, body: bytes) -> bool:
    """200 when nothing should refuse; else the API server's denial naming the setup's webhook
    (`admission webhook "NAME" denied the request: ...`), not an error calling it."""
    if setup.refuser is None or not mounted:
        return status == 200
    text = body.decode(errors="replace")
    return 400 <= status < 500 and "denied the request" in text and setup.refuser in text


def e2e_rounds(
    raw: Raw, setups: list[Setup], rounds: int, warmup: int, notes: list[str]
) -> tuple[dict[tuple[str, bool], list[float]], dict[tuple[str, bool], int]]:
    """Latency samples per (setup, mounted), each round all requests in a random order; the
    first wrong answer of each kind is added to `notes`."""
    samples: dict[tuple[str, bool], list[float]] = {
        (s.name, m): [] for s in setups for m in (True, False)
    }
    wrong: dict[tuple[str, bool], int] = dict.fromkeys(samples, 0)
    rng = random.Random(13)
    deadline = time.monotonic() + 600
    for r in range(warmup + rounds):
        if time.monotonic() > deadline:
            raise BenchError(f"the end-to-end rounds took over 600s (round {r})")
        order = [(s, m) for s in setups for m in (True, False)]
        rng.shuffle(order)
        for setup, mounted in order:
            took, status, body = e2e_request(raw, setup, setup.mounted if mounted else setup.free)
            if r < warmup:
                continue
            samples[(setup.name, mounted)].append(took)
            if not e2e_verdict_ok(setup, mounted, status, body):
                if not wrong[(setup.name, mounted)]:
                    what = "mounted" if mounted else "free"
                    notes.append(
                        f"{setup.name}, {what} claim: first unexpected answer: HTTP {status} "
                        f"{body[:400].decode(errors='replace')}"
                    )
                wrong[(setup.name, mounted)] += 1
    return samples, wrong


def wait_enforced(raw: Raw, setup: Setup, proc: subprocess.Popen[bytes] | None, log: Path) -> None:
    """Until the API server sends the setup's DELETEs to its webhook, which answers both right
    ENFORCED_STREAK times in a row (Kyverno's TLS fails for a while after its first answer)."""
    streak = 0

    def enforced() -> bool:
        nonlocal streak
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"exited {proc.returncode}; its log ends:\n{tail(log)}")
        right = all(
            e2e_verdict_ok(setup, mounted, *e2e_request(raw, setup, claim)[1:])
            for mounted, claim in ((True, setup.mounted), (False, setup.free))
        )
        streak = streak + 1 if right else 0
        return streak >= ENFORCED_STREAK

    wait_for(f"{setup.name} to refuse {setup.namespace}/{setup.mounted}", enforced, 240, 0.05)


def register_prune_gate(
    raw: Raw, port: int, ca_pem: bytes, name: str, setup: str = "prune-gate"
) -> None:
    """What `--register` registers (webhook.register), narrowed to the setup's namespace."""
    from gate.sources.policyfile import policy_from_dict
    from webhook.register import build_configuration

    config = build_configuration(
        name, f"https://127.0.0.1:{port}/validate", ca_pem, policy_from_dict(POLICY)
    )
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {SETUP_LABEL: setup}}
    raw.request("POST", VWC, config)


@contextlib.contextmanager
def floor_webhook(ctx: Context, name: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The no-op webhook (bench/noop_webhook.py) serving, registered as prune-gate is for the
    floor setup's namespace; unregistered and stopped after."""
    port = free_port()
    cert_dir = ctx.tmp / "certs-floor"
    argv = [sys.executable, "-m", "bench.noop_webhook", f"--port={port}", f"--cert-dir={cert_dir}"]
    if ctx.client.ca is not None:
        argv.append(f"--client-ca={ctx.client.ca}")
    log = ctx.tmp / "floor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise BenchError(f"the no-op webhook exited {proc.returncode}:\n{tail(log)}")
            return (cert_dir / "ca.crt").exists()

        wait_for("the no-op webhook", ready, 60, 0.05)
        register_prune_gate(ctx.raw, port, (cert_dir / "ca.crt").read_bytes(), name, "floor")
        yield proc, log
    finally:
        with contextlib.suppress(Exception):
            api_call(ctx.raw, "DELETE", f"{VWC}/{name}")
        stop_group(proc)


# ------------------------------------------------------------------------------ Kyverno


def build_binary(name: str, timeout: float) -> tuple[str | None, str]:
    """(path, "") or (None, why not), from scripts/build-binaries (built when missing)."""
    try:
        out = subprocess.run(
            [str(BUILD_BINARIES), "path", name],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"scripts/build-binaries path {name} took over {timeout:.0f}s"
    if out.returncode:
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        return None, f"scripts/build-binaries path {name} failed: " + " | ".join(lines[-4:])
    return out.stdout.strip(), ""


@dataclass
class Kyverno:
    proc: subprocess.Popen[bytes]
    log: Path
    started: float


@contextlib.contextmanager
def kyverno_running(
    binary: str, raw: Raw, kubeconfig: str, kubectl: str, tmp: Path, own_cluster: bool
) -> Iterator[Kyverno]:
    """Kyverno's admission controller out of cluster, as its DEVELOPMENT.md and .vscode/launch.json
    run it: its CRDs (same module version) and namespace first, then the binary with --kubeconfig
    and --serverIP (it makes its CA and serving pair as Secrets and registers its webhooks with
    that URL). Its `kyverno` ConfigMap selects only the kyverno setup's namespace. Everything it
    made is removed after."""
    crds = sorted(Path(binary).parent.glob("*.yaml"))
    if not crds:
        raise BenchError(f"no CRDs beside {binary} (scripts/build-binaries copies them there)")
    status, _ = api_call(raw, "GET", f"/api/v1/namespaces/{KYVERNO_NAMESPACE}")
    if status == 200:
        raise BenchError(
            "the cluster has a kyverno namespace already: not starting a second Kyverno against it"
        )
    kube = [kubectl, f"--kubeconfig={kubeconfig}"]
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc, log, started = _start_kyverno(binary, raw, kube, crds, kubeconfig, tmp)
        yield Kyverno(proc, log, started)
    finally:
        if proc is not None:
            stop_group(proc, grace=20)
        remove_kyverno(raw, kube, crds, own_cluster)


def _start_kyverno(
    binary: str, raw: Raw, kube: list[str], crds: list[Path], kubeconfig: str, tmp: Path
) -> tuple[subprocess.Popen[bytes], Path, float]:
    files = [f"--filename={c}" for c in crds]
    subprocess.run(
        [*kube, "apply", "--server-side", "--force-conflicts", *files],
        check=True,
        capture_output=True,
        timeout=180,
    )
    subprocess.run(
        [*kube, "wait", "--for=condition=Established", "--timeout=120s", *files],
        check=True,
        capture_output=True,
        timeout=180,
    )
    raw.request("POST", "/api/v1/namespaces", {"metadata": {"name": KYVERNO_NAMESPACE}})
    selector = {"namespaceSelector": {"matchLabels": {SETUP_LABEL: "kyverno"}}}
    for name, data in (("kyverno", {"webhooks": json.dumps(selector)}), ("kyverno-metrics", {})):
        raw.request(
            "POST",
            f"/api/v1/namespaces/{KYVERNO_NAMESPACE}/configmaps",
            {"metadata": {"name": name}, "data": data},
        )
    subprocess.run(
        [*kube, "apply", f"--filename={KYVERNO_POLICY}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    port = free_port()
    env = {
        **os.environ,
        # .vscode/launch.json's "Launch Kyverno"
        "KYVERNO_NAMESPACE": KYVERNO_NAMESPACE,
        "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
        "KYVERNO_DEPLOYMENT": "dummy",
        "KYVERNO_POD_NAME": "dummy",
        "INIT_CONFIG": "kyverno",
        "METRICS_CONFIG": "kyverno-metrics",
    }
    argv = [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--serverIP=127.0.0.1:{port}",
        "--webhookServerHost=127.0.0.1",
        f"--webhookServerPort={port}",
        "--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller",
        "--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller",
        "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
        "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
        # loopback only: its metrics listener, and no controller-runtime one
        "--metricsHost=127.0.0.1",
        f"--metricsPort={free_port()}",
        "--controllerRuntimeMetricsAddress=0",
        "-v=1",
    ]
    log = tmp / "kyverno.log"
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return proc, log, started


def remove_kyverno(raw: Raw, kube: list[str], crds: list[Path], own_cluster: bool) -> None:
    """Its webhook configurations first (they would refuse with nothing behind them), then the
    policy, its namespace and, on a cluster the bench did not start, the CRDs."""
    for path in (VWC, MWC):
        with contextlib.suppress(Exception):
            for item in raw.request("GET", path)["items"]:
                meta = item["metadata"]
                labels = meta.get("labels") or {}
                if meta["name"].startswith("kyverno-") or "webhook.kyverno.io/managed-by" in labels:
                    api_call(raw, "DELETE", f"{path}/{meta['name']}")
    with contextlib.suppress(Exception):
        api_call(raw, "DELETE", f"/apis/kyverno.io/v1/clusterpolicies/{KYVERNO_POLICY_NAME}")
    with contextlib.suppress(Exception):
        api_call(raw, "DELETE", f"/api/v1/namespaces/{KYVERNO_NAMESPACE}")
    if not own_cluster:
        files = [f"--filename={c}" for c in crds]
        subprocess.run(
            [*kube, "delete", "--ignore-not-found", "--wait=false", *files],
            capture_output=True,
            timeout=120,
            check=False,
        )


# ------------------------------------------------------------------------------ the table


@dataclass
class Row:
    figure: str
    measured: str
    target: str = ""
    meets: bool | None = None


def pct(samples: list[float], q: int) -> float:
    """The q-th percentile in ms (statistics' exclusive method; the sample itself when n < 2)."""
    if len(samples) < 2:
        return samples[0] * 1000 if samples else float("nan")
    return statistics.quantiles(samples, n=100)[q - 1] * 1000


def print_table(rows: list[Row], header: str) -> None:
    say("")
    say(header)
    cols = ("figure", "measured", "target", "meets")
    cells = [
        (r.figure, r.measured, r.target, "" if r.meets is None else ("yes" if r.meets else "NO"))
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [cols, *cells]) for i in range(4)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
    say(line)
    say("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        say("| " + " | ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)) + " |")


def attack_rows(label: str, kind: str, attacks: list[Attack], max_workers: int) -> list[Row]:
    rows = []
    for a in attacks:
        if a.rate:
            target, meets = "", None
            if a.rate == 500:
                target = f"p99 <= {TARGET_P99_AT_500_MS:.0f} ms"
                meets = a.p99 <= TARGET_P99_AT_500_MS and not a.failed
            elif a.rate >= OVERLOAD_RATE:
                target = f">= {TARGET_ANSWERED_SHARE:.0%} answered within {ANSWERED_SECONDS:g} s"
                meets = a.answered_share >= TARGET_ANSWERED_SHARE
            rows.append(
                Row(
                    f"[{label}] {kind} DELETE, constant {a.rate}/s",
                    f"{a.latency()}; sent {a.achieved:.0f}/s; {a.outcome()}; "
                    f"{a.answered_share:.1%} answered within {ANSWERED_SECONDS:g} s",
                    target,
                    meets,
                )
            )
        else:
            rows.append(
                Row(
                    f"[{label}] {kind} DELETE, saturated ({max_workers} concurrent)",
                    f"{a.throughput:,.0f} req/s; {a.latency()}; {a.outcome()}; "
                    f"vegeta used {a.vegeta_cpu / a.seconds:.0%} of a core",
                    f">= {TARGET_SATURATED:,.0f} req/s, no errors",
                    a.throughput >= TARGET_SATURATED and not a.failed,
                )
            )
    return rows


# ------------------------------------------------------------------------------ main


def measure_server(
    label: str,
    started: contextlib.AbstractContextManager[Server],
    args: argparse.Namespace,
    ctx: Context,
    full: bool,
) -> tuple[list[Row], list[str]]:
    """Everything for one server and worker count: the load figures for every server; for the
    project's own (`full`), the change-to-decision trials too, and the end-to-end part when it
    is ctx.e2e_label."""
    rows: list[Row] = []
    notes: list[str] = []
    say(f"\n-- {label}: starting")
    with started as server:
        idle = memory_of(server.proc.pid)
        say(f"ready in {server.ready_seconds:.1f}s; {idle.text()}")
        rows.append(
            Row(
                f"[{label}] start to ready ({ctx.lay.pods:,} pods + {ctx.lay.claims:,} claims)",
                f"{server.ready_seconds:.1f} s",
            )
        )
        targets = write_all_targets(label, server, ctx)
        attack(ctx.vegeta, server, targets["refused"], 100, 1, 1, ctx.tmp)  # warm-up
        peak, peak_conns = idle, 0
        protocols = [p for p in args.protocols if p == "http/1.1" or label_speaks_h2(label)]
        attacks: dict[tuple[str, str], list[Attack]] = {
            (kind, p): [] for p in protocols for kind in targets
        }
        # The lowest rate, then saturated, then the higher rates: a rate above what the server
        # can answer piles up connections and memory that would colour the saturated figure.
        rates = sorted(args.rates)
        for protocol, rate in [(p, r) for p in protocols for r in [rates[0], 0, *rates[1:]]]:
            for kind, target in targets.items():
                wait_for(
                    "the last run's connections to close",
                    lambda: connections_to(server.port) == 0,
                    60,
                )
                a = attack(
                    ctx.vegeta,
                    server,
                    target,
                    rate,
                    args.duration,
                    args.max_workers,
                    ctx.tmp,
                    http2=protocol == "h2",
                )
                say(
                    f"{protocol} {kind} @{rate or 'max'}: {a.latency()}, "
                    f"{a.throughput:.0f} right/s, {a.outcome()}; "
                    f"{a.answered_share:.1%} answered within {ANSWERED_SECONDS:g} s; "
                    f"server {a.peak.text()}, {a.connections} connections"
                )
                for e in a.errors[:3]:
                    say(f"   {e}")
                if a.errors:
                    notes.append(
                        f"{label} {protocol} {kind} @{rate or 'max'}: " + "; ".join(a.errors[:3])
                    )
                if a.peak.rss > peak.rss:
                    peak, peak_conns = a.peak, a.connections
                attacks[(kind, protocol)].append(a)
        # Memory apart: PSS is read from smaps_rollup, which stalls the server (`rss_of`), so
        # one more run at the highest rate samples it and gives no latency figure.
        wait_for("the connections to close", lambda: connections_to(server.port) == 0, 60)
        top = rates[-1]
        mem_run = attack(
            ctx.vegeta,
            server,
            targets["refused"],
            top,
            args.duration,
            args.max_workers,
            ctx.tmp,
            pss=True,
            http2=protocols[0] == "h2",
        )
        say(
            f"memory @{top} over {protocols[0]} (PSS sampled): {mem_run.peak.text()}, "
            f"{mem_run.connections} conns"
        )
        wait_for("the connections to close", lambda: connections_to(server.port) == 0, 60)
        if server.proc.poll() is not None:
            raise BenchError(f"{label} exited {server.proc.returncode} under load")
        settled = memory_of(server.proc.pid)
        if args.slowloris:
            probe = json.dumps(review(ctx.free_claims[0], f"slowloris-{uuid.uuid4().hex}"))
            held = slowloris_probe(server, probe.encode())
            say(f"slowloris: {held}")
            rows.append(
                Row(
                    f"[{label}] {SLOWLORIS_CONNECTIONS:,} half-sent request heads held (slowloris)",
                    held,
                    "a new review answered",
                    "NOT answered" not in held,
                )
            )
        for (kind, protocol), done in attacks.items():
            done.sort(key=lambda a: (a.rate == 0, a.rate))
            rows += attack_rows(f"{label} {protocol}", kind, done, args.max_workers)
        rows.append(
            Row(
                f"[{label}] server memory, ready / peak under {top}/s over {protocols[0]}",
                f"{idle.text()} / {mem_run.peak.text()} ({mem_run.connections} connections "
                f"open); peak RSS over the runs above {peak.rss:.0f} MiB ({peak_conns} open)",
                f"<= {TARGET_MEMORY_MB:.0f} MB PSS at peak",
                mem_run.peak.pss * 1.048576 <= TARGET_MEMORY_MB,
            )
        )
        rows.append(
            Row(
                f"[{label}] after the overload, its connections closed: alive, memory",
                f"{settled.text()} ({settled.pss - idle.pss:+.0f} MiB PSS since ready)",
            )
        )
        if full:
            rows += change_rows(label, ctx, server)
        bad = [
            ln for ln in server.log.read_text(errors="replace").splitlines() if "Traceback" in ln
        ]
        if bad:
            notes.append(f"{label}: the server log has {len(bad)} tracebacks ({server.log})")
        if full and ctx.e2e_label == label:
            e2e_rows, e2e_notes = end_to_end(ctx, server, args)
            rows += e2e_rows
            notes += e2e_notes
    return rows, notes


def write_all_targets(label: str, server: Server, ctx: Context) -> dict[str, Targets]:
    """The refused and the allowed reviews as vegeta targets, each kind checked once first."""
    url = f"https://127.0.0.1:{server.port}/validate"
    caller = WebhookCaller(server.port, server.tls)
    targets: dict[str, Targets] = {}
    tag = re.sub(r"[^a-z0-9]+", "-", label)
    try:
        for kind, claims, allowed in (
            ("refused", ctx.mounted_claims, False),
            ("allowed", ctx.free_claims, True),
        ):
            uids = {f"{kind}-{tag}-{i}-{uuid.uuid4().hex[:6]}" for i in range(len(claims))}
            bodies = [
                json.dumps(review(c, u)).encode() for c, u in zip(claims, sorted(uids), strict=True)
            ]
            for b in bodies[:3]:
                if caller.allowed(b) is not allowed:
                    raise BenchError(f"a {kind} review was answered allowed={not allowed}")
            path = ctx.tmp / f"targets-{kind}-{tag}.jsonl"
            write_targets(path, url, bodies)
            targets[kind] = Targets(path, uids, allowed)
    finally:
        caller.close()
    return targets


def change_rows(label: str, ctx: Context, server: Server) -> list[Row]:
    change = change_trials(ctx.raw, ctx.lay, server, ctx.change_claims, re.sub(r"\W+", "-", label))
    n = len(change.mount_first)
    rows = []
    for what, first, settled in (
        ("a pod mounting a free claim -> refused", change.mount_first, change.mount_settled),
        ("its only pod deleted -> allowed", change.unmount_first, change.unmount_settled),
    ):
        rows.append(
            Row(
                f"[{label}] change to decision: {what}",
                f"p50 {statistics.median(first) * 1000:.0f} ms (first changed answer), "
                f"{statistics.median(settled) * 1000:.0f} ms ({SETTLED_STREAK} in a row); "
                f"max {max(settled) * 1000:.0f} ms; n={n}",
            )
        )
    say(f"change to decision: {rows[-2].measured} | {rows[-1].measured}")
    return rows


# ------------------------------------------------------------------------------ other servers


#: The production WSGI servers bench_load runs the same app behind (bench/wsgi_app.py), each with
#: the worker model its documentation recommends for an app of inline CPU work.
WSGI_SERVERS = ("granian", "gunicorn")


def label_speaks_h2(label: str) -> bool:
    """Whether the server a label names offers HTTP/2: gunicorn does not."""
    return not label.startswith("gunicorn")


def wsgi_server_argv(
    name: str, w: int, port: int, certs: Path, client_ca: Path | None
) -> list[str]:
    exe = str(Path(sys.executable).with_name(name))
    if name == "granian":
        # Rust (hyper, rustls): TLS, HTTP/1.1 and HTTP/2 off the interpreter; the app on one
        # blocking thread per worker (more would only take turns on the interpreter lock).
        argv = [
            exe,
            "--interface=wsgi",
            "--factory",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--workers={w}",
            "--blocking-threads=1",
            f"--ssl-certificate={certs / 'tls.crt'}",
            f"--ssl-keyfile={certs / 'tls.key'}",
        ]
        if client_ca is not None:
            argv += [f"--ssl-ca={client_ca}", "--ssl-client-verify"]
        return [*argv, "bench.wsgi_app:create"]
    if name == "gunicorn":
        # Its threaded worker, as this webhook was served before its own server (issue 13).
        argv = [
            exe,
            f"--workers={w}",
            "--worker-class=gthread",
            "--threads=8",
            f"--bind=127.0.0.1:{port}",
            f"--certfile={certs / 'tls.crt'}",
            f"--keyfile={certs / 'tls.key'}",
            "--keep-alive=30",
            "--backlog=1024",
        ]
        if client_ca is not None:
            argv += [f"--ca-certs={client_ca}", "--cert-reqs=2"]
        return [*argv, "bench.wsgi_app:create()"]
    raise ValueError(f"unknown server {name}")


@contextlib.contextmanager
def wsgi_server(name: str, w: int, ctx: Context, policy: Path) -> Iterator[Server]:
    """`name` serving the webhook's app (bench.wsgi_app) with `w` workers, each with its own
    watch cache as `gate webhook serve`'s; timed to its /readyz 200 over TLS."""
    from bench.wsgi_app import SERVE_ARGS
    from webhook import tls as certs

    port = free_port()
    cert_dir = ctx.tmp / f"certs-{name}-{w}"
    cert_dir.mkdir()
    ca = certs.make_ca(f"bench {name} CA")
    (cert_dir / "ca.crt").write_bytes(ca.cert_pem)
    certs.write_pair(
        certs.make_serving_cert(ca, ["127.0.0.1"]), cert_dir / "tls.crt", cert_dir / "tls.key"
    )
    serve_args = [
        f"--cert-file={cert_dir / 'tls.crt'}",
        f"--key-file={cert_dir / 'tls.key'}",
        f"--listen=127.0.0.1:{port}",
        f"--config={policy}",
        f"--kubeconfig={ctx.kubeconfig}",
        "--stuck-interval=0s",
    ]
    if ctx.client.ca is not None:
        serve_args.append(f"--client-ca={ctx.client.ca}")
    argv = wsgi_server_argv(name, w, port, cert_dir, ctx.client.ca)
    log = ctx.tmp / f"{name}-{w}.log"
    tls_ = Tls(cert_dir / "ca.crt", ctx.client.cert, ctx.client.key)
    with log.open("wb") as out:
        began = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**os.environ, **MALLOC_ENV, SERVE_ARGS: json.dumps(serve_args)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        streak = 0

        def ready() -> bool:
            # Each new connection goes to any worker: every one must be ready.
            nonlocal streak
            if proc.poll() is not None:
                raise BenchError(f"{name} exited {proc.returncode}:\n{tail(log)}")
            streak = streak + 1 if health_status(port, "/readyz", tls_) == 200 else 0
            return streak >= ENFORCED_STREAK

        wait_for(f"{name}'s /readyz", ready, 300, 0.05)
        yield Server(proc, port, 0, tls_, log, time.monotonic() - began, ca.cert_pem)
    finally:
        stop_group(proc)


@dataclass
class Context:
    raw: Raw
    lay: Layout
    kubeconfig: str
    tmp: Path
    client: WebhookClientPair
    vegeta: str
    kyverno: str | None
    kyverno_reason: str
    own_cluster: bool
    #: The server whose end-to-end figures are measured: the project's, with the most workers.
    e2e_label: str
    mounted_claims: list[dict[str, Any]] = field(default_factory=list)
    free_claims: list[dict[str, Any]] = field(default_factory=list)
    change_claims: list[dict[str, Any]] = field(default_factory=list)


def end_to_end(
    ctx: Context, server: Server, args: argparse.Namespace
) -> tuple[list[Row], list[str]]:
    lay, raw = ctx.lay, ctx.raw
    setups = [
        Setup(
            name,
            lay.ns(k),
            f"data-{k}",
            f"data-{lay.free_claim_in(k)}",
            {
                "none": None,
                "prune-gate": "prune-gate.prune-gate.io",
                "kyverno": "kyverno",
                "floor": None,
            }[name],
        )
        for k, name in enumerate(SETUPS)
    ]
    by_name = {s.name: s for s in setups}
    notes: list[str] = []
    registration = f"bench-load-{lay.run}"
    say(f"\n-- end to end through kube-apiserver ({ctx.e2e_label})")
    register_prune_gate(raw, server.port, server.ca_pem, registration)
    kyverno_rows: list[Row] = []
    measured = [by_name["none"], by_name["prune-gate"], by_name["floor"]]
    reason = ctx.kyverno_reason
    try:
        wait_enforced(raw, by_name["prune-gate"], None, server.log)
        with contextlib.ExitStack() as stack:
            floor, floor_log = stack.enter_context(floor_webhook(ctx, f"{registration}-floor"))
            wait_enforced(raw, by_name["floor"], floor, floor_log)
            ky: Kyverno | None = None
            ky_stack = stack.enter_context(contextlib.ExitStack())
            if ctx.kyverno is not None:
                try:
                    ky = ky_stack.enter_context(
                        kyverno_running(
                            ctx.kyverno,
                            raw,
                            ctx.kubeconfig,
                            kubectl_path(),
                            ctx.tmp,
                            ctx.own_cluster,
                        )
                    )
                    wait_enforced(raw, by_name["kyverno"], ky.proc, ky.log)
                    took = time.monotonic() - ky.started
                    measured = list(setups)
                    kyverno_rows.append(
                        Row("Kyverno: start to enforcing the policy", f"{took:.1f} s")
                    )
                    say(f"Kyverno enforcing after {took:.1f}s")
                except (BenchError, subprocess.SubprocessError, OSError, RuntimeError) as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                    if ky is not None:
                        reason += f"\n{tail(ky.log, 25)}"
                    say(f"Kyverno not measured: {reason}")
                    ky_stack.close()  # stopped and removed before the rounds
                    ky = None
            samples, wrong = e2e_rounds(raw, measured, args.rounds, 10, notes)
            kept = connections_to(server.port)  # the API server's, kept alive between calls
            if ky is not None and len(measured) == len(setups):
                kyverno_rows.append(
                    Row("Kyverno: memory after the rounds", memory_of(ky.proc.pid).text())
                )
    finally:
        with contextlib.suppress(Exception):
            api_call(raw, "DELETE", f"{VWC}/{registration}")
    rows: list[Row] = []
    for s in measured:
        for mounted in (True, False):
            got = samples[(s.name, mounted)]
            verdict = "refused" if s.refuser and mounted else "allowed"
            bad = wrong[(s.name, mounted)]
            rows.append(
                Row(
                    f"API DELETE dryRun=All, {s.name}, {'mounted' if mounted else 'free'} claim",
                    f"p50 {pct(got, 50):.1f} / p99 {pct(got, 99):.1f} ms; "
                    f"{len(got) - bad}/{len(got)} {verdict} as expected",
                    "",
                    None if not bad else False,
                )
            )
    base = {m: statistics.median(samples[("none", m)]) * 1000 for m in (True, False)}
    added: dict[str, dict[bool, float]] = {}
    for s in measured[1:]:
        added[s.name] = {
            m: statistics.median(samples[(s.name, m)]) * 1000 - base[m] for m in (True, False)
        }
        rows.append(
            Row(
                f"added p50 over no webhook, {s.name}",
                f"refused {added[s.name][True]:+.1f} ms, allowed {added[s.name][False]:+.1f} ms"
                + (
                    f" (the API server kept {kept} connection(s) open to it)"
                    if s.name == "prune-gate"
                    else ""
                ),
                f"<= {TARGET_ADDED_P50_MS:.0f} ms" if s.name == "prune-gate" else "",
                max(added[s.name].values()) <= TARGET_ADDED_P50_MS
                if s.name == "prune-gate"
                else None,
            )
        )
    if "floor" in added:
        above = {m: added["prune-gate"][m] - added["floor"][m] for m in (True, False)}
        rows.append(
            Row(
                "prune-gate's added p50 above the floor (a webhook that decides nothing)",
                f"refused {above[True]:+.1f} ms, allowed {above[False]:+.1f} ms",
            )
        )
    if "kyverno" in added:
        pg, ky_added = added["prune-gate"], added["kyverno"]
        ratio = [
            f"{'refused' if m else 'allowed'} {ky_added[m] / pg[m]:.1f}x" if pg[m] > 0 else "n/a"
            for m in (True, False)
        ]
        totals = [
            statistics.median(samples[("kyverno", m)])
            / statistics.median(samples[("prune-gate", m)])
            for m in (True, False)
        ]
        rows.append(
            Row(
                "Kyverno's added p50 / prune-gate's (whole DELETE: Kyverno / prune-gate)",
                f"{', '.join(ratio)} ({totals[0]:.2f}x, {totals[1]:.2f}x)",
                "prune-gate ahead",
                all(ky_added[m] > pg[m] for m in (True, False)),
            )
        )
        rows += kyverno_rows
    else:
        why = reason.splitlines()[0] if reason else "off"
        rows.append(Row("end to end, Kyverno", f"Kyverno: not measured ({why})"))
        if reason:
            notes.append("Kyverno not measured: " + reason)
    return rows, notes


def fetch_claims(raw: Raw, lay: Layout, indices: list[int]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=16) as pool:
        got = list(pool.map(lambda j: raw.request("GET", lay.claim_path(j)), indices))
    for c in got:
        c.pop("apiVersion", None)
        c.pop("kind", None)
        (c.get("metadata") or {}).pop("managedFields", None)
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--workers", default="2", help="worker counts (the chart's default is 2), e.g. 1,2"
    )
    parser.add_argument(
        "--servers",
        default="prune-gate,granian,gunicorn",
        help="the servers to run the webhook's app behind: prune-gate (gate webhook serve), "
        "granian, gunicorn (pip install '.[bench]')",
    )
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=5_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--rates", default="100,500,1000,4000", help="constant rates, requests/s")
    parser.add_argument(
        "--protocols",
        default="h2,http/1.1",
        help="what vegeta speaks, each a run of every rate: h2 (offered in ALPN as the API "
        "server offers it; gunicorn has none, so it is measured over http/1.1 only), http/1.1",
    )
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument of `gate webhook serve` (repeatable), "
        "e.g. --serve-arg=--queue-timeout=0s",
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per vegeta run")
    parser.add_argument("--max-workers", type=int, default=64, help="concurrency when saturated")
    parser.add_argument("--rounds", type=int, default=100, help="end-to-end rounds")
    parser.add_argument("--trials", type=int, default=5, help="change-to-decision trials")
    parser.add_argument("--no-kyverno", action="store_true", help="leave Kyverno out")
    parser.add_argument(
        "--no-slowloris",
        dest="slowloris",
        action="store_false",
        help="leave out the probe that holds half-sent request heads against each server",
    )
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    args = parser.parse_args(argv)
    try:
        return run(parser, args)
    except BenchError as exc:
        say(f"bench_load: error: {exc}")
        return 1


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The whole bench; BenchError when something it needs fails."""
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
        args.rates = [int(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error("--workers and --rates take comma-separated integers")
    args.protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    if not args.protocols or set(args.protocols) - {"h2", "http/1.1"}:
        parser.error("--protocols takes h2, http/1.1")
    if not workers or min(workers) < 1 or not args.rates or min(args.rates) < 1:
        parser.error("--workers and --rates need positive integers")
    if args.namespaces <= CHANGE_NS or args.pods < args.claims // 2:
        parser.error(f"need --namespaces > {CHANGE_NS} and --pods >= --claims / 2")
    if args.claims < 2 * args.namespaces * (args.trials + 1):
        parser.error("need --claims >= 2 * --namespaces * (--trials + 1)")
    gate = shutil.which("gate") or str(Path(sys.executable).with_name("gate"))
    if not Path(gate).exists():
        parser.error("gate is not on PATH: run it from the project's virtualenv (make bench)")

    notes: list[str] = []
    supported = accepts_workers(gate)
    measured_ws = []
    for w in workers:
        if supported or w == 1:
            measured_ws.append(w)
        else:
            say(f"note: skipping --workers {w}: `gate webhook serve --help` has no --workers")
            notes.append(f"--workers {w} not measured: the installed CLI has no --workers option")
    if not measured_ws:
        parser.error("no --workers value the installed CLI accepts")
    servers = [x.strip() for x in args.servers.split(",") if x.strip()]
    unknown = set(servers) - {"prune-gate", *WSGI_SERVERS}
    if unknown or not servers:
        parser.error(f"--servers takes prune-gate, {', '.join(WSGI_SERVERS)}; not {unknown}")
    for name in servers:
        if name != "prune-gate" and not Path(sys.executable).with_name(name).exists():
            parser.error(f"{name} is not installed: pip install '.[bench]'")

    say("vegeta: scripts/build-binaries path vegeta (built on first use)")
    vegeta, why = build_binary("vegeta", 1800)
    if vegeta is None:
        raise SystemExit(f"cannot measure load without vegeta: {why}")
    kyverno: str | None = None
    kyverno_reason = "--no-kyverno"
    if not args.no_kyverno:
        say("kyverno: scripts/build-binaries path kyverno (built on first use: many minutes)")
        kyverno, kyverno_reason = build_binary("kyverno", 3600)

    lay = Layout(uuid.uuid4().hex[:6], args.pods, args.claims, args.namespaces)
    lay.nodes = [f"bench-load-{lay.run}-node-{i}" for i in range(2)]
    rows: list[Row] = []
    with (
        cluster(args.kubeconfig) as kubeconfig,
        tempfile.TemporaryDirectory(prefix="prune-gate-bench-load-") as tmpdir,
    ):
        tmp = Path(tmpdir)
        raw = Raw(kubeconfig, pool=16)
        try:
            say(
                f"creating {lay.pods:,} pods and {lay.claims:,} claims "
                f"in {lay.namespaces} namespaces"
            )
            took = populate(raw, lay)
            say(f"created in {took:.0f}s")
            ctx = Context(
                raw,
                lay,
                kubeconfig,
                tmp,
                webhook_client_of(kubeconfig),
                vegeta,
                kyverno,
                kyverno_reason,
                own_cluster=not args.kubeconfig,
                e2e_label=f"prune-gate w={measured_ws[-1]}",
            )
            step = max(1, lay.mounted // 200)
            ctx.mounted_claims = fetch_claims(raw, lay, list(range(0, lay.mounted, step))[:200])
            ctx.free_claims = fetch_claims(
                raw, lay, list(range(lay.mounted, lay.claims, step))[:200]
            )
            ctx.change_claims = fetch_claims(
                raw, lay, [lay.free_claim_in(CHANGE_NS, m) for m in range(args.trials)]
            )
            policy = tmp / "prune-gate.json"
            policy.write_text(json.dumps(POLICY))
            for name in servers:
                for w in measured_ws:
                    label = f"{name} w={w}"
                    started: contextlib.AbstractContextManager[Server]
                    if name == "prune-gate":
                        port, health = free_port(), free_port()
                        argv_w = serve_argv(
                            gate, kubeconfig, port, health, tmp / f"certs-{w}", policy
                        )
                        if ctx.client.ca is not None:
                            argv_w += ["--client-ca", str(ctx.client.ca)]
                        if supported:
                            argv_w += ["--workers", str(w)]
                        argv_w += args.serve_arg
                        started = webhook_server(argv_w, ctx.tmp, ctx.client)
                    else:
                        started = wsgi_server(name, w, ctx, policy)
                    got_rows, got_notes = measure_server(
                        label, started, args, ctx, full=name == "prune-gate"
                    )
                    rows += got_rows
                    notes += got_notes
        finally:
            if args.kubeconfig:  # a cluster of our own goes down whole
                cleanup(raw, lay)
            raw.close()
    pinned = subprocess.run(
        [str(BUILD_BINARIES), "versions"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.splitlines()
    tools = ", ".join(ln.split(" (")[0] for ln in pinned if ln.startswith(("vegeta", "kyverno")))
    header = (
        f"bench_load: {lay.pods:,} pods + {lay.claims:,} claims in {lay.namespaces} namespaces; "
        f"{tools}; "
        f"vegeta {args.duration:g} s per rate over kept-alive TLS; "
        f"{args.rounds} end-to-end rounds; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}"
    )
    print_table(rows, header)
    for note in notes:
        say(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
