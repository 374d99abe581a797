"""A `webhook.workers.Supervisor` around trivial workers, for tests/unit/test_workers.py.

usage: python -m tests.unit.workers_child WORKERS DIR

Prints one JSON line, {"health": PORT}, once the health port is bound, then supervises until
SIGTERM. Each worker answers /healthz with its pid, /readyz 200 unless DIR/not-ready-INDEX
exists, and /metrics with one counter whose value is INDEX + 1.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterable
from pathlib import Path
from wsgiref.types import StartResponse, WSGIEnvironment

from webhook.httpserver import HttpsServer
from webhook.serve import listen_socket
from webhook.workers import Supervisor, stop_when_master_gone


def main() -> None:
    workers, folder = int(sys.argv[1]), Path(sys.argv[2])

    def work(index: int, health: socket.socket) -> None:
        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            path = environ["PATH_INFO"]
            if path == "/metrics":
                text = (
                    "# HELP test_answers Answers.\n# TYPE test_answers counter\n"
                    f"test_answers_total {index + 1}\n"
                )
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [text.encode()]
            if path == "/readyz" and (folder / f"not-ready-{index}").exists():
                start_response("503 Service Unavailable", [("Content-Type", "application/json")])
                return [json.dumps({"ready": False, "reason": "told not to be"}).encode()]
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"status": "alive", "pid": os.getpid(), "ready": True}).encode()]

        server = HttpsServer(None, None)
        server.add_plain(health, app)
        server.add_background(stop_when_master_gone)
        server.run(None)

    health = listen_socket("127.0.0.1", 0)
    print(json.dumps({"health": health.getsockname()[1]}), flush=True)
    Supervisor(workers, work, health).run()


if __name__ == "__main__":
    main()
