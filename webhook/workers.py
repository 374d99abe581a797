"""Several worker processes behind one port (`gate webhook serve --workers N`).

Why processes: a decision is pure Python on the in-memory cache, so one process uses one core at
most (the interpreter lock), and threads add no throughput. N workers, each with its own watch
cache, share the listening TLS socket; the kernel hands each new connection to one of them.

The master is small and single-threaded, like gunicorn's arbiter: it binds the sockets, forks
the workers, forks a new one when one dies (backing off when they keep dying), stops them on
SIGTERM, and serves the health port for the whole pod. Each worker serves its own /healthz,
/readyz and /metrics on a Unix socket in a private directory; the master asks every worker and
answers for the pod: alive when every worker is, ready when every worker is (a worker whose
cache is not ready would answer its share of reviews with 503s), and the metrics of all workers
with a `worker` label, so counters add up with `sum without (worker)`.

A worker that finds its master gone (SIGKILL, OOM) stops too: nothing would restart or
unregister it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from webhook.httpbase import Limits
from webhook.httpserver import HEALTH_LIMITS, HttpsServer
from webhook.metrics import ConnectionsCollector

log = logging.getLogger("prune_gate.webhook.workers")

#: How long the master waits for one worker's health answer.
ASK_SECONDS = 2.0
#: How often the master looks for dead workers, and a worker for a dead master.
REAP_SECONDS = 0.2
#: A worker that lived this long before dying is restarted at once; sooner, after a back-off
#: that doubles up to MAX_BACKOFF_SECONDS.
STEADY_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 30.0


def unix_listener(path: Path) -> socket.socket:
    """A listening Unix socket at `path`, readable by this user only (the directory is ours)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("worker", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def ask(path: str, target: str, timeout: float = ASK_SECONDS) -> tuple[int, bytes]:
    """GET `target` from the worker serving on the Unix socket `path`: (status, body); a worker
    that does not answer is (0, why)."""
    conn = _UnixConnection(path, timeout)
    try:
        conn.request("GET", target)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as exc:
        return 0, f"no answer: {exc}".encode()
    finally:
        conn.close()


@dataclass
class _Worker:
    index: int
    socket_path: str
    pid: int | None = None
    started: float = 0.0
    restarts: int = 0
    #: When it may be started again (monotonic seconds), after a death.
    not_before: float = 0.0
    backoff: float = 1.0


@dataclass
class Supervisor:
    """The master of `workers` worker processes, each running `work(index, health_socket)`
    (which serves until SIGTERM and returns) in a fork."""

    workers: int
    work: Callable[[int, socket.socket], None]
    health: socket.socket | None
    #: The workers' TLS limits (the master waits their `graceful_seconds` for a stop).
    limits: Limits = field(default_factory=Limits)
    #: The pod's health port's: a budget and deadlines of its own.
    health_limits: Limits = HEALTH_LIMITS
    #: Called in the master once every worker has been started.
    ready: Callable[[], None] | None = None
    _dir: Path | None = None
    _sockets: dict[int, socket.socket] = field(default_factory=dict)
    _table: list[_Worker] = field(default_factory=list)
    _server: HttpsServer | None = None

    def run(self) -> None:
        """Fork the workers and supervise them until SIGTERM or SIGINT; then stop them, waiting
        for requests in flight (each worker's graceful stop), and return."""
        self._dir = Path(tempfile.mkdtemp(prefix="prune-gate-workers-"))
        try:
            for i in range(self.workers):
                path = self._dir / f"worker-{i}.sock"
                self._sockets[i] = unix_listener(path)
                self._table.append(_Worker(i, str(path)))
            # What the master holds now (the modules the workers run) is shared with them page
            # for page until written; the cyclic collector writes to every object it walks, so
            # the objects of now are left out of its walks, in the master and in each fork.
            gc.collect()
            gc.freeze()
            for worker in self._table:  # before the loop and its handlers exist
                self._fork(worker)
            server = self._server = HttpsServer(None, None, self.limits)
            if self.health is not None:
                server.add_plain(self.health, self.health_app, self.health_limits)
            server.add_background(self._supervise)
            server.run(None, ready=self.ready)
        finally:
            self._stop_workers()
            for sock in self._sockets.values():
                sock.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- processes ---------------------------------------------------------------------------

    def _fork(self, worker: _Worker) -> None:
        master = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                signal.set_wakeup_fd(-1)
                for i, sock in self._sockets.items():
                    if i != worker.index:
                        sock.close()
                if self.health is not None:
                    self.health.close()
                global _MASTER
                _MASTER = master
                self.work(worker.index, self._sockets[worker.index])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("worker failed", extra={"worker": worker.index})
                code = 1
            finally:
                logging.shutdown()
                os._exit(code)
        worker.pid, worker.started = pid, time.monotonic()
        log.info("worker started", extra={"worker": worker.index, "pid": pid})

    async def _supervise(self) -> None:
        while True:
            self._reap()
            now = time.monotonic()
            for worker in self._table:
                if worker.pid is None and now >= worker.not_before:
                    worker.restarts += 1
                    self._fork(worker)
            await asyncio.sleep(REAP_SECONDS)

    def _reap(self) -> None:
        for worker in self._table:
            if worker.pid is None:
                continue
            try:
                pid, status = os.waitpid(worker.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = worker.pid, 0
            if pid == 0:
                continue
            lived = time.monotonic() - worker.started
            worker.backoff = (
                1.0 if lived >= STEADY_SECONDS else min(worker.backoff * 2, MAX_BACKOFF_SECONDS)
            )
            delay = 0.0 if lived >= STEADY_SECONDS else worker.backoff
            worker.pid, worker.not_before = None, time.monotonic() + delay
            log.error(
                "worker died; starting another",
                extra={
                    "worker": worker.index,
                    "pid": pid,
                    "status": _status_text(status),
                    "lived_seconds": round(lived, 1),
                    "restart_in_seconds": delay,
                },
            )

    def _stop_workers(self) -> None:
        live = [w for w in self._table if w.pid is not None]
        for worker in live:
            _signal(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.limits.graceful_seconds + 5.0
        for worker in live:
            assert worker.pid is not None
            while True:
                try:
                    pid, _ = os.waitpid(worker.pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid:
                    break
                if time.monotonic() > deadline:
                    log.error("worker did not stop; killed", extra={"worker": worker.index})
                    _signal(worker.pid, signal.SIGKILL)
                    os.waitpid(worker.pid, 0)
                    break
                time.sleep(0.05)
            worker.pid = None

    # -- the pod's health port -----------------------------------------------------------------

    def health_app(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """/healthz, /readyz and /metrics of the whole pod, from every worker's answer."""
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body = generate_latest(self._metrics_registry())
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [body]
        if path in ("/healthz", "/readyz"):
            ok, doc = self._ask_all(path)
            status = "200 OK" if ok else "503 Service Unavailable"
        else:
            status = "404 Not Found"
            doc = {
                "error": "not found",
                "reason": f"{path}: the health port serves only /healthz, /metrics, /readyz; "
                "/validate is on the TLS port",
            }
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(doc).encode()]

    def _ask_all(self, path: str) -> tuple[bool, dict[str, Any]]:
        """Every worker's answer to `path`; ok when every one is a 200."""
        answers: dict[str, Any] = {}
        reasons: list[str] = []
        for worker in self._table:
            if worker.pid is None:
                answers[str(worker.index)] = {"reason": "not running (restarting)"}
                reasons.append(f"worker {worker.index}: not running (restarting)")
                continue
            status, body = ask(worker.socket_path, path)
            try:
                answer = json.loads(body)
            except ValueError:
                answer = {"reason": body.decode(errors="replace")}
            answers[str(worker.index)] = answer
            if status != 200:
                reasons.append(f"worker {worker.index}: {answer.get('reason', status)}")
        ok = not reasons
        doc: dict[str, Any] = (
            {"ready": ok} if path == "/readyz" else {"status": "alive" if ok else "unhealthy"}
        )
        if reasons:
            doc["reason"] = "; ".join(reasons)
        doc["workers"] = answers
        return ok, doc

    def _metrics_registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_WorkersCollector(self))
        return registry


class _WorkersCollector(Collector):
    """Every worker's metrics with a `worker` label, and the master's own."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        table = self._supervisor._table
        merged: dict[str, Metric] = {}
        for worker in table:
            if worker.pid is None:
                continue
            status, body = ask(worker.socket_path, "/metrics")
            if status != 200:
                continue
            for family in text_string_to_metric_families(body.decode()):
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for sample in family.samples:
                    labels = {**sample.labels, "worker": str(worker.index)}
                    into.add_sample(sample.name, labels, sample.value, sample.timestamp)
        server = self._supervisor._server
        if server is not None:  # the master's own listener: the pod's health port
            for family in ConnectionsCollector(server.stats).collect():
                into = merged.setdefault(
                    family.name,
                    Metric(family.name, family.documentation, family.type, family.unit),
                )
                for sample in family.samples:
                    labels = {**sample.labels, "worker": "master"}
                    into.add_sample(sample.name, labels, sample.value, sample.timestamp)
        yield from merged.values()
        running = GaugeMetricFamily(
            "prune_gate_webhook_workers", "Worker processes, by state", labels=["state"]
        )
        up = sum(1 for w in table if w.pid is not None)
        running.add_metric(["running"], up)
        running.add_metric(["restarting"], len(table) - up)
        yield running
        restarts = Metric(
            "prune_gate_webhook_worker_restarts",
            "Worker processes started again after one died, by worker",
            "counter",
        )
        for worker in table:
            restarts.add_sample(
                "prune_gate_webhook_worker_restarts_total",
                {"worker": str(worker.index)},
                worker.restarts,
            )
        yield restarts


#: In a worker: its master's pid (None in a process that is no worker).
_MASTER: int | None = None


def master_gone() -> bool:
    """In a worker: whether its master died (the worker was re-parented)."""
    return _MASTER is not None and os.getppid() != _MASTER


async def stop_when_master_gone() -> None:
    """A worker's background task: returns (which stops the worker) once its master is gone."""
    while not master_gone():
        await asyncio.sleep(REAP_SECONDS * 5)
    log.error("the master process is gone; this worker stops")


def _signal(pid: int | None, sig: signal.Signals) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"
