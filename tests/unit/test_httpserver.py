"""The HTTPS server (`webhook.httpserver`) on loopback, serving the real app over real TLS.

What the API server needs from it, under what a stranger or a burst can do: idle and half-open
connections cost no capacity, every answer carries its own request's uid, a burst is answered,
malformed HTTP and oversized bodies are JSON errors, slow senders are cut off, and a stop lets
the request in flight finish. No test times the server: deadlines are generous, and each wait is
for a condition (an answer, a closed socket), never a sleep. What a burst of connections leaves
in the server's memory is a figure, not a test: `python -m bench.bench_internals` prints it.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_webhook_app import claim, make_app, pod, review
from webhook import tls
from webhook.httpbase import Limits
from webhook.httpserver import HttpsServer
from webhook.serve import CertReloader, health_only, listen_socket

#: A client's patience: far beyond any answer on a loaded machine, far below a hung test.
PATIENCE = 30.0


@dataclass
class Served:
    port: int
    context: ssl.SSLContext
    server: HttpsServer
    #: The plain-HTTP health listener's port (0: none).
    health_port: int = 0

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=PATIENCE
        )

    def tls_socket(self) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=PATIENCE)
        return self.context.wrap_socket(raw, server_hostname="127.0.0.1")

    def probe(self, path: str = "/healthz") -> int:
        """GET `path` on the health port over a new connection, as kubelet probes: the status."""
        conn = http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=PATIENCE)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()


@contextmanager
def serving(
    tmp_path: Path,
    limits: Limits | None = None,
    app: Any = None,
    health: Limits | bool = False,
    client_ca: bool = False,
    alpn: tuple[str, ...] = ("http/1.1",),
) -> Iterator[Served]:
    """The server on loopback. `health`: also the plain-HTTP health listener, as `gate webhook
    serve --health-port` adds it (True: with its default limits). `client_ca`: the TLS port
    requires a client certificate, and `Served.context` presents one, as the API server does.
    `alpn`: what the TLS port offers (`webhook.http2.ALPN_PROTOCOLS`: HTTP/2 too)."""
    ca = tls.make_ca()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls.write_pair(tls.make_serving_cert(ca, ["127.0.0.1"]), cert, key)
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    ca_file: Path | None = None
    if client_ca:
        callers = tls.make_ca("webhook client CA")
        ca_file = tmp_path / "client-ca.crt"
        ca_file.write_bytes(callers.cert_pem)
        presented = tls.make_client_cert(callers, "kube-apiserver")
        tls.write_pair(presented, tmp_path / "client.crt", tmp_path / "client.key")
        context.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
    if app is None:
        app, _ = make_app(claim("data"), claim("free"), pod("web-0", "data"), max_bytes=64 * 1024)
    server = HttpsServer(
        app,
        CertReloader(cert, key, client_ca_file=ca_file, alpn=alpn).context,
        # Requests are not shed unless a test asks: its client threads share this process's
        # interpreter lock with the server, and a turn of the lock is not a server behind.
        limits or Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None),
    )
    sock = listen_socket("127.0.0.1", 0)
    health_sock: socket.socket | None = None
    if health is not False:
        health_sock = listen_socket("127.0.0.1", 0)
        if health is True:
            server.add_plain(health_sock, health_only(app))
        else:
            server.add_plain(health_sock, health_only(app), health)
    up = threading.Event()
    thread = threading.Thread(target=server.run, args=(sock, up.set), daemon=True)
    thread.start()
    assert up.wait(PATIENCE), "the server did not start"
    health_port = health_sock.getsockname()[1] if health_sock is not None else 0
    try:
        yield Served(sock.getsockname()[1], context, server, health_port)
    finally:
        server.stop()
        thread.join(PATIENCE)
        sock.close()
        if health_sock is not None:
            health_sock.close()
        assert not thread.is_alive(), "the server did not stop"


def delete(conn: http.client.HTTPSConnection, name: str, uid: str) -> dict[str, Any]:
    """POST the review of a DELETE of claim `name`; the response's `response` object."""
    body = json.dumps(review(claim(name), uid=uid)).encode()
    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status == 200, data
    answer: dict[str, Any] = json.loads(data)["response"]
    return answer


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes `sock` (EOF or reset) before the client's patience runs out."""
    sock.settimeout(PATIENCE)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True


@pytest.mark.parametrize("idle", [8, 16, 200])
def test_idle_connections_do_not_stall_a_review(tmp_path: Path, idle: int) -> None:
    """gunicorn's threaded worker did the TLS handshake in its threads: 8 clients that connect
    and say nothing stalled every review until it timed out. Here they cost a socket each:
    half-open (no handshake) and handshaken-then-silent ones both."""
    with serving(tmp_path) as served, ExitStack() as held:
        for i in range(idle):
            raw = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
            held.callback(raw.close)
            if i % 2:
                held.callback(served.tls_socket().close)
        conn = served.connect()
        try:
            assert delete(conn, "data", "after-idle")["allowed"] is False
            assert delete(conn, "free", "after-idle-2")["allowed"] is True
        finally:
            conn.close()


def test_sixty_four_clients_each_get_the_answer_to_their_own_review(tmp_path: Path) -> None:
    def client(n: int) -> list[tuple[str, str, bool]]:
        conn = served.connect()
        try:
            out = []
            for i in range(25):
                name = "data" if (n + i) % 2 else "free"
                uid = f"client-{n}-request-{i}"
                answer = delete(conn, name, uid)
                out.append((uid, answer["uid"], (name == "free") == answer["allowed"]))
            return out
        finally:
            conn.close()

    with serving(tmp_path) as served, ThreadPoolExecutor(64) as pool:
        results = [r for batch in pool.map(client, range(64)) for r in batch]
    assert len(results) == 64 * 25
    assert [(sent, got) for sent, got, _ in results if sent != got] == []
    assert all(right for *_, right in results)


def test_a_namespace_deletion_burst_is_answered(tmp_path: Path) -> None:
    """A namespace deletion sends the DELETE of every claim in it at once, each on whatever
    connection the API server has: 400 new connections, 100 at a time."""

    def one(i: int) -> tuple[str, str, bool]:
        conn = served.connect()
        try:
            answer = delete(conn, "data", f"burst-{i}")
            return f"burst-{i}", answer["uid"], answer["allowed"]
        finally:
            conn.close()

    with serving(tmp_path) as served, ThreadPoolExecutor(100) as pool:
        results = list(pool.map(one, range(400)))
    assert [(sent, got) for sent, got, _ in results if sent != got] == []
    assert not any(allowed for *_, allowed in results)


def test_malformed_http_is_a_json_400_and_the_connection_closes(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        sock = served.tls_socket()
        try:
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
            head, _, body = _read_all(sock).partition(b"\r\n\r\n")
        finally:
            sock.close()
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"Content-Type: application/json" in head
    assert json.loads(body)["error"] == "bad request"


def test_headers_over_the_limit_are_a_json_431(tmp_path: Path) -> None:
    with serving(tmp_path, Limits(max_header_bytes=2048, queue_seconds=None)) as served:
        sock = served.tls_socket()
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8192 + b"\r\n\r\n")
            head, _, body = _read_all(sock).partition(b"\r\n\r\n")
        finally:
            sock.close()
    assert head.startswith(b"HTTP/1.1 431 ")
    assert json.loads(body)["error"] == "bad request"


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        sock = served.tls_socket()
        try:
            sock.sendall(
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 500000000\r\n\r\n"
            )
            head, _, body = _read_all(sock).partition(b"\r\n\r\n")
        finally:
            sock.close()
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in head  # the unread body is still on the wire
    assert "500000000 bytes exceeds the limit" in json.loads(body)["reason"]


def test_a_chunked_body_over_the_limit_stops_being_read(tmp_path: Path) -> None:
    chunk = b"[" * 4096
    with serving(tmp_path) as served:
        sock = served.tls_socket()
        try:
            sock.sendall(
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            with pytest.raises(OSError):  # the server answers and closes while we still send
                for _ in range(10_000):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            head, _, body = _read_all(sock).partition(b"\r\n\r\n")
        finally:
            sock.close()
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(body)["error"] == "payload too large"


def test_a_chunked_review_within_the_limit_is_decided(tmp_path: Path) -> None:
    body = json.dumps(review(claim("data"), uid="chunked")).encode()
    with serving(tmp_path) as served:
        conn = served.connect()
        try:
            conn.request(
                "POST",
                "/validate",
                iter([body[:100], body[100:]]),
                {"Content-Type": "application/json"},
                encode_chunked=True,
            )
            resp = conn.getresponse()
            answer = json.loads(resp.read())["response"]
        finally:
            conn.close()
    assert answer["uid"] == "chunked"
    assert answer["allowed"] is False


def test_slow_and_silent_clients_are_cut_off(tmp_path: Path) -> None:
    # Deadlines long enough that the well-behaved client (handshake, then a whole request) is
    # never cut off by a stall of the shared machine; the test waits them out once.
    limits = Limits(
        handshake_seconds=5.0, request_seconds=5.0, idle_seconds=5.0, queue_seconds=None
    )
    with serving(tmp_path, limits) as served:
        no_handshake = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
        half_a_request = served.tls_socket()
        half_a_request.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
        kept_alive = served.connect()
        try:
            assert delete(kept_alive, "free", "then-silent")["allowed"] is True
            assert kept_alive.sock is not None
            assert closed_by_server(no_handshake)
            assert closed_by_server(half_a_request)
            assert closed_by_server(kept_alive.sock)
        finally:
            no_handshake.close()
            half_a_request.close()
            kept_alive.close()


def test_a_connection_past_the_budget_closes_the_one_idle_longest(tmp_path: Path) -> None:
    """At its budget a listener takes the new connection and closes the oldest that is not in a
    request: refusing the new one would leave the budget to whoever holds it."""
    with serving(tmp_path, Limits(max_connections=3, queue_seconds=None)) as served:
        held = [served.connect() for _ in range(3)]
        try:
            for i, conn in enumerate(held):
                assert delete(conn, "free", f"held-{i}")["allowed"] is True
            extra = served.connect()
            held.append(extra)
            assert delete(extra, "data", "the-new-one")["allowed"] is False
            assert held[0].sock is not None
            assert closed_by_server(held[0].sock)
            (tls_stats,) = served.server.stats()
            assert (tls_stats.name, tls_stats.closed_over_budget) == ("tls", 1)
            assert delete(held[1], "data", "still-served")["allowed"] is False
            assert delete(held[2], "data", "still-served-2")["allowed"] is False
        finally:
            for conn in held:
                conn.close()


def test_a_stop_lets_the_request_in_flight_finish(tmp_path: Path) -> None:
    """Kubelet's SIGTERM during a review: it is answered, then the connection is closed."""
    entered, release = threading.Event(), threading.Event()

    def slow_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        entered.set()
        release.wait(PATIENCE)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"answered": true}']

    with serving(tmp_path, app=slow_app) as served:
        conn = served.connect()
        try:
            conn.request("POST", "/validate", b"{}", {"Content-Type": "application/json"})
            assert entered.wait(PATIENCE)
            served.server.stop()
            release.set()
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read()) == {"answered": True}
            assert conn.sock is not None
            assert closed_by_server(conn.sock)
        finally:
            conn.close()


def _read_all(sock: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(PATIENCE)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    return data


def test_status_lines_carry_their_reason_phrase(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        conn = served.connect()
        try:
            conn.request("GET", "/healthz")
            ok = conn.getresponse()
            ok.read()
            conn.request("GET", "/nowhere")
            missing = conn.getresponse()
            missing.read()
        finally:
            conn.close()
    assert (ok.status, ok.reason) == (200, "OK")
    assert (missing.status, missing.reason) == (404, "Not Found")
