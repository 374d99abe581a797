"""`webhook.workers.Supervisor`: several worker processes behind one health port.

A real master forks real workers (trivial ones: tests/unit/workers_child.py) in a process of its
own; the tests talk to it over HTTP on loopback and with signals, and wait for conditions with a
deadline, never for time to pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
PATIENCE = 60.0
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Master:
    proc: subprocess.Popen[str]
    port: int
    folder: Path

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def doc(self, path: str) -> tuple[int, dict[str, Any]]:
        status, body = self.get(path)
        return status, json.loads(body)

    def worker_pids(self) -> dict[str, int]:
        _, doc = self.doc("/healthz")
        return {i: a["pid"] for i, a in doc["workers"].items() if "pid" in a}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill 0: it is dead once its state says so.
    status = Path(f"/proc/{pid}/status")
    try:
        return "\nState:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.unit.workers_child", "2", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        port = json.loads(proc.stdout.readline())["health"]
        m = Master(proc, port, tmp_path)
        wait_for(lambda: len(m.worker_pids()) == 2, "both workers to answer")
        yield m
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=PATIENCE)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_the_pod_is_ready_and_alive_only_when_every_worker_is(master: Master) -> None:
    status, doc = master.doc("/readyz")
    assert (status, doc["ready"]) == (200, True)
    (master.folder / "not-ready-1").touch()
    status, doc = master.doc("/readyz")
    assert (status, doc["ready"]) == (503, False)
    assert doc["reason"] == "worker 1: told not to be"
    (master.folder / "not-ready-1").unlink()
    assert master.doc("/readyz")[0] == 200


def test_metrics_carry_every_worker_with_its_label(master: Master) -> None:
    status, text = master.get("/metrics")
    assert status == 200
    lines = set(text.splitlines())
    assert 'test_answers_total{worker="0"} 1.0' in lines
    assert 'test_answers_total{worker="1"} 2.0' in lines
    assert 'prune_gate_webhook_workers{state="running"} 2.0' in lines
    assert 'prune_gate_webhook_worker_restarts_total{worker="1"} 0.0' in lines


def test_the_health_port_serves_nothing_else(master: Master) -> None:
    status, doc = master.doc("/validate")
    assert status == 404 and "/validate is on the TLS port" in doc["reason"]


def test_a_worker_that_dies_is_started_again(master: Master) -> None:
    before = master.worker_pids()
    os.kill(before["1"], signal.SIGKILL)
    restarted = 'prune_gate_webhook_worker_restarts_total{worker="1"} 1.0'
    wait_for(lambda: restarted in master.get("/metrics")[1], "worker 1 to be started again")

    def two_workers() -> dict[str, int] | None:
        pids = master.worker_pids()
        return pids if len(pids) == 2 else None

    after = wait_for(two_workers, "two workers")
    assert after["0"] == before["0"] and after["1"] != before["1"]
    assert master.doc("/readyz")[0] == 200


def test_sigterm_stops_every_worker_and_the_master(master: Master) -> None:
    pids = master.worker_pids()
    master.proc.send_signal(signal.SIGTERM)
    assert master.proc.wait(timeout=PATIENCE) == 0
    for pid in pids.values():
        wait_for(lambda pid=pid: not alive(pid), f"worker {pid} to exit")  # type: ignore[misc]


def test_workers_stop_when_their_master_is_killed(master: Master) -> None:
    pids = master.worker_pids()
    os.kill(master.proc.pid, signal.SIGKILL)
    master.proc.wait(timeout=PATIENCE)
    for pid in pids.values():
        wait_for(lambda pid=pid: not alive(pid), f"worker {pid} to exit")  # type: ignore[misc]


def test_a_signal_to_the_whole_group_stops_everything_quietly(master: Master) -> None:
    """Ctrl-C reaches the master and every worker at once, and the master then signals the
    workers again: a stop already under way takes the second signal as a no-op."""
    pids = master.worker_pids()
    os.killpg(master.proc.pid, signal.SIGTERM)
    assert master.proc.wait(timeout=PATIENCE) == 0
    for pid in pids.values():
        wait_for(lambda pid=pid: not alive(pid), f"worker {pid} to exit")  # type: ignore[misc]
    assert master.proc.stderr is not None
    errors = master.proc.stderr.read()
    assert "Traceback" not in errors and "Exception ignored" not in errors, errors


def test_the_master_imports_what_a_worker_imports_before_it_forks() -> None:
    """`gate webhook serve --workers N` imports the workers' modules in the master
    (`WORKER_MODULES`) so that their pages are shared, not loaded again in each worker: every
    module a worker's start imports (the imports inside `_work`, `_start_worker` and the
    functions they call) is loaded once the master has preloaded, in a fresh interpreter."""
    import ast

    source = (REPO / "webhook" / "cli.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    worker_side = {
        "_work",
        "_start_worker",
        "_start_stuck",
        "_start_registration_watch",
    }
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in worker_side:
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    imported.add(inner.module)
                elif isinstance(inner, ast.Import):
                    imported.update(alias.name for alias in inner.names)
    assert {"webhook.app", "webhook.cache", "webhook.httpserver"} <= imported, imported
    script = (
        "import sys, json\n"
        "from webhook import cli\n"
        "cli._preload_worker_modules()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert imported - loaded == set(), "imported by a worker after the fork, not preloaded"
    assert {"prometheus_client", "kubernetes.client"} <= loaded
