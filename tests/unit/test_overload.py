"""The webhook past what it can serve (issue 40): it sheds, it does not collapse.

Two bounds of `webhook.httpserver`, each against the real server on loopback over real TLS: a
request that waited in the worker past `queue_seconds` is answered 429 at once without a decision
(the API server applies its failurePolicy now, not at its timeout), and an address with
`max_handshakes` TLS handshakes in progress has its next connection closed at once, so a caller
that opens connection after connection cannot spend the worker's core on handshakes, and a
stranger who never finishes its handshakes holds back only its own address. Waits are for
conditions (the app entered, an answer, a handshake that succeeds); the only sleeps are the
app's own work, which is what makes a queue. The figures under load are bench/bench_load.py's.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.unit.test_httpserver import PATIENCE, Served, serving
from tests.unit.test_webhook_app import claim, make_app, pod, review
from tests.unit.test_webhook_hardening import KUBECONFIG
from webhook.httpbase import Limits

# --- shedding -------------------------------------------------------------------------------------


def request_bytes(name: str, uid: str) -> bytes:
    body = json.dumps(review(claim(name), uid=uid)).encode()
    return (
        b"POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def answer_of(sock: ssl.SSLSocket) -> tuple[int, dict[str, str], dict[str, Any]]:
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    return resp.status, dict(resp.getheaders()), json.loads(resp.read())


class SlowApp:
    """The real app, with work to do: the first review waits until the test lets it go (the
    worker is busy, the others queue behind it), each later one takes `work` seconds."""

    def __init__(self, work: float) -> None:
        self.app, _ = make_app(claim("data"), claim("free"), pod("web-0", "data"))
        self.work = work
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ["PATH_INFO"] == "/validate":
            self.calls += 1
            if self.calls == 1:
                self.entered.set()
                assert self.release.wait(PATIENCE)
            else:
                time.sleep(self.work)
        result: Iterable[bytes] = self.app(environ, start_response)
        return result


QUEUED = 20


def test_requests_that_waited_past_the_queue_limit_are_answered_429_at_once(
    tmp_path: Path,
) -> None:
    """20 reviews queue behind a busy worker; each one served takes 0.25 s, and a review may
    wait 1 s: the first few are decided, every later one is answered 429 without a decision (the
    app is not called for it), with the reason, on a connection that stays usable."""
    app = SlowApp(work=0.25)
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=1.0)
    with serving(tmp_path, limits, app=app) as served, ExitStack() as held:
        busy, *queued = socks = [served.tls_socket() for _ in range(QUEUED + 1)]
        for s in socks:
            held.callback(s.close)
        busy.sendall(request_bytes("data", "busy"))
        assert app.entered.wait(PATIENCE), "the first review never reached the app"
        for i, s in enumerate(queued):
            s.sendall(request_bytes("free", f"queued-{i}"))
        app.release.set()
        status, _, body = answer_of(busy)
        assert (status, body["response"]["allowed"]) == (200, False)
        answers = [answer_of(s) for s in queued]
        decided = [a for a in answers if a[0] == 200]
        shed = [a for a in answers if a[0] == 429]
        assert len(decided) + len(shed) == QUEUED, [a[0] for a in answers]
        # 1 s of waiting holds at most 4 reviews of 0.25 s (and the one in hand): the rest shed.
        assert len(decided) <= 5
        assert len(shed) >= QUEUED - 5
        assert app.calls == 1 + len(decided), "a shed review reached the app"
        status, headers, body = shed[0]
        assert "Retry-After" not in headers  # client-go would retry into the same queue
        assert body["error"] == "overloaded"
        assert "--queue-timeout of 1 s" in body["reason"]
        stats = {s.name: s for s in served.server.stats()}
        assert stats["tls"].shed == len(shed)
        # The shed connection is kept: its next review, with no queue, is decided.
        again = next(s for s, a in zip(queued, answers, strict=True) if a[0] == 429)
        app.work = 0.0
        again.sendall(request_bytes("data", "again"))
        status, _, body = answer_of(again)
        assert (status, body["response"]["uid"]) == (200, "again")


def test_with_no_queue_limit_every_queued_request_is_decided(tmp_path: Path) -> None:
    """`--queue-timeout 0s` turns shedding off: the same queue is decided whole, late."""
    app = SlowApp(work=0.1)
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None)
    with serving(tmp_path, limits, app=app) as served, ExitStack() as held:
        busy, *queued = socks = [served.tls_socket() for _ in range(6)]
        for s in socks:
            held.callback(s.close)
        busy.sendall(request_bytes("data", "busy"))
        assert app.entered.wait(PATIENCE)
        for i, s in enumerate(queued):
            s.sendall(request_bytes("free", f"queued-{i}"))
        app.release.set()
        answers = [answer_of(s) for s in socks]
        assert [a[0] for a in answers] == [200] * 6
        assert served.server.stats()[0].shed == 0


# --- handshakes in progress, per address ---------------------------------------------------------


def tls_from(served: Served, source: str) -> ssl.SSLSocket:
    """A TLS connection to the server from the loopback address `source` (127.0.0.0/8 are all
    this machine's: each is a peer address of its own to the server)."""
    raw = socket.create_connection(
        ("127.0.0.1", served.port), timeout=PATIENCE, source_address=(source, 0)
    )
    return served.context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_an_address_at_its_handshakes_in_progress_is_turned_away_and_others_are_not(
    tmp_path: Path,
) -> None:
    """Two handshakes at once per address: two connections that never finish theirs hold
    127.0.0.3's, whose next connection is closed before its handshake; another address
    handshakes and is served, and a connection the server has already is served too."""
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, max_handshakes=2)
    half_a_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
    with serving(tmp_path, limits) as served, ExitStack() as held:
        kept = tls_from(served, "127.0.0.3")
        held.callback(kept.close)
        stalled = []
        for _ in range(2):
            sock = socket.create_connection(
                ("127.0.0.1", served.port), timeout=PATIENCE, source_address=("127.0.0.3", 0)
            )
            held.callback(sock.close)
            sock.sendall(half_a_hello)
            stalled.append(sock)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            held.callback(tls_from(served, "127.0.0.3").close)
        assert served.server.stats()[0].turned_away >= 1
        other = tls_from(served, "127.0.0.4")
        held.callback(other.close)
        for sock, uid in ((other, "other"), (kept, "kept")):
            sock.sendall(request_bytes("free", uid))
            status, _, body = answer_of(sock)
            assert (status, body["response"]["uid"]) == (200, uid)
        # One stalled handshake gone, 127.0.0.3 may handshake again.
        stalled[0].close()

        def handshakes() -> ssl.SSLSocket | None:
            try:
                return tls_from(served, "127.0.0.3")
            except (ssl.SSLError, ConnectionError):
                return None

        deadline = time.monotonic() + PATIENCE
        again = handshakes()
        while again is None and time.monotonic() < deadline:
            again = handshakes()
        assert again is not None, "127.0.0.3 never got its handshake back"
        held.callback(again.close)


def test_without_a_bound_handshakes_are_not_counted(tmp_path: Path) -> None:
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, max_handshakes=None)
    with serving(tmp_path, limits) as served, ExitStack() as held:
        for _ in range(4):
            silent = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
            held.callback(silent.close)
        conn = served.tls_socket()
        held.callback(conn.close)
        conn.sendall(request_bytes("free", "unbounded"))
        assert answer_of(conn)[0] == 200
        assert served.server.stats()[0].turned_away == 0


# --- the settings -------------------------------------------------------------------------------


def test_the_command_lines_overload_bounds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gate.cli import main
    from webhook import cli

    seen: list[Any] = []
    monkeypatch.setattr(cli, "_serve", seen.append)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    serve = ["webhook", "serve", "--self-signed", "--kubeconfig", str(kubeconfig)]
    result = CliRunner().invoke(main, [*serve, "--queue-timeout", "0s", "--max-handshakes", "0"])
    assert result.exit_code == 0, result.output
    assert (seen[0].limits.queue_seconds, seen[0].limits.max_handshakes) == (None, None)
    result = CliRunner().invoke(main, serve)
    assert (seen[1].limits.queue_seconds, seen[1].limits.max_handshakes) == (0.5, 256)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--queue-timeout", "1"], "--queue-timeout: '1' is not a duration"),
        (["--max-handshakes", "-1"], "--max-handshakes"),
    ],
)
def test_a_bad_overload_bound_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    from gate.cli import main
    from webhook import cli

    monkeypatch.setattr(cli, "_serve", lambda _o: pytest.fail("served"))
    result = CliRunner().invoke(main, ["webhook", "serve", "--self-signed", *args])
    assert result.exit_code == 2, result.output
    assert said in result.output


def test_the_charts_defaults_are_the_command_lines() -> None:
    import yaml

    from tests.unit.test_body_limit import VALUES
    from webhook.cli import serve

    tls_values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))["server"]["tls"]
    defaults = {p.name: p.default for p in serve.params}
    assert tls_values["queueTimeout"] == defaults["queue_timeout"]
    assert tls_values["maxHandshakes"] == defaults["max_handshakes"]
    assert tls_values["http2"] is defaults["http2"] is True
    assert tls_values["http2MaxStreams"] == defaults["http2_max_streams"]
