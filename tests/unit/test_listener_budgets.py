"""Each listener of the server has its own connection budget and deadlines (issue 32, item 6).

The attack: the TLS port (/validate) and the plain-HTTP health port shared one budget of 1,024
connections, so about 1,100 half-sent requests to the health port, which needs no client
certificate, made the server reset every new TLS connection, the API server's included. Here
the attacks run against the real server on loopback (the real app, real TLS with a client
certificate as the API server presents): half-sent requests on the health port, half-sent TLS
handshakes and idle keep-alive connections on the TLS port, one client connecting as fast as it
can. Every count is bounded; every wait is for a condition (an answer, a socket the server
closes) with a generous patience, never a sleep; no test times the server.
"""

from __future__ import annotations

import contextlib
import http.client
import resource
import socket
import ssl
import threading
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.unit.test_httpserver import PATIENCE, closed_by_server, delete, serving
from webhook.httpbase import Limits
from webhook.httpserver import HEALTH_LIMITS

#: More half-sent requests than the one budget the two listeners shared (1,024).
ATTACK = 1_100

#: The start of a request whose head never ends.
HALF_A_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


def enough_descriptors(count: int) -> None:
    """Let this process hold `count` more sockets (the attacker's and the server's ends)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 512
    if soft != resource.RLIM_INFINITY and soft < wanted:
        assert hard == resource.RLIM_INFINITY or hard >= wanted, (
            f"this test holds {count} sockets; the descriptor limit is {hard}"
        )
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _hold_half_sent(held: ExitStack, port: int, count: int) -> None:
    """Open `count` connections to `port`, each sending the start of a request and no more."""
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
        held.callback(sock.close)
        # The server may already have closed an older one of ours: that is what it should do.
        with contextlib.suppress(ConnectionError):
            sock.sendall(HALF_A_HEAD)


def test_half_sent_requests_to_the_health_port_leave_validate_served(tmp_path: Path) -> None:
    """The attack, with the limits `gate webhook serve` uses by default: 1,100 half-sent
    requests to the health port. New TLS connections with the API server's client certificate
    are still answered, and so is a probe (the oldest half-sent request makes room for it)."""
    enough_descriptors(2 * ATTACK)
    with serving(tmp_path, health=True, client_ca=True) as served, ExitStack() as held:
        _hold_half_sent(held, served.health_port, ATTACK)
        for i in range(8):  # new connections, as the API server opens them
            conn = served.connect()
            try:
                assert delete(conn, "data", f"during-{i}")["allowed"] is False
                assert delete(conn, "free", f"during-{i}-again")["allowed"] is True
            finally:
                conn.close()
        assert served.probe("/readyz") == 200


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends on `sock` until it closes it."""
    sock.settimeout(PATIENCE)
    data = b""
    with contextlib.suppress(ConnectionResetError, ssl.SSLError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


#: Deadlines no test waits out: whatever is closed under them was closed by something else.
NEVER = PATIENCE * 10


def test_a_half_sent_head_is_closed_at_its_own_listeners_header_deadline(tmp_path: Path) -> None:
    """Slowloris: a request head that never ends is closed at its listener's header deadline,
    a small one on the health port, while the TLS port's (long here) leaves its own half-sent
    head alone until it ends and is answered."""
    quick = replace(HEALTH_LIMITS, header_seconds=0.2, idle_seconds=NEVER)
    tls_limits = Limits(
        handshake_seconds=NEVER, header_seconds=NEVER, request_seconds=NEVER, queue_seconds=None
    )
    with serving(tmp_path, tls_limits, health=quick) as served:
        on_tls = served.tls_socket()
        on_health = socket.create_connection(("127.0.0.1", served.health_port), timeout=PATIENCE)
        kept = http.client.HTTPConnection("127.0.0.1", served.health_port, timeout=PATIENCE)
        try:
            on_tls.sendall(HALF_A_HEAD)
            on_health.sendall(HALF_A_HEAD)
            assert closed_by_server(on_health)
            # A kept-alive connection's next head is held to the deadline too, from its first
            # byte (before it, the idle limit applies).
            kept.request("GET", "/healthz")
            assert kept.getresponse().read()
            assert kept.sock is not None
            kept.sock.sendall(HALF_A_HEAD)
            assert closed_by_server(kept.sock)
            on_tls.sendall(b"Connection: close\r\n\r\n")
            assert _answer(on_tls).startswith(b"HTTP/1.1 200 ")
        finally:
            on_tls.close()
            on_health.close()
            kept.close()


def test_the_health_ports_budget_is_its_own(tmp_path: Path) -> None:
    """Half-sent requests fill the health port's budget (4 here, deadlines never reached): a
    probe still gets in, closing the oldest of them, and the TLS port closes nothing."""
    small = replace(HEALTH_LIMITS, max_connections=4, header_seconds=NEVER)
    with serving(tmp_path, health=small, client_ca=True) as served, ExitStack() as held:
        first = socket.create_connection(("127.0.0.1", served.health_port), timeout=PATIENCE)
        held.callback(first.close)
        first.sendall(HALF_A_HEAD)
        _hold_half_sent(held, served.health_port, 3)
        assert served.probe() == 200
        assert closed_by_server(first)
        conn = served.connect()
        try:
            assert delete(conn, "data", "beside-a-full-health-port")["allowed"] is False
        finally:
            conn.close()
        stats = {s.name: s for s in served.server.stats()}
        assert stats["health"].closed_over_budget >= 1
        assert stats["health"].max_connections == 4
        assert stats["tls"].closed_over_budget == 0


#: The first bytes of a TLS ClientHello whose record says 512 bytes follow (they never do).
HALF_A_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


def test_half_sent_handshakes_do_not_cut_off_the_api_servers_connections(tmp_path: Path) -> None:
    """Who cannot present the client certificate can still start handshakes on the TLS port.
    64 stalled ones against a budget of 16 (handshake deadline never reached): the API server's
    kept-alive connection is never the one closed, its new connections are answered, and the
    stalled ones are closed oldest first."""
    limits = Limits(
        max_connections=16,
        handshake_seconds=NEVER,
        header_seconds=NEVER,
        max_body_bytes=64 * 1024 + 1,
        queue_seconds=None,
    )
    with serving(tmp_path, limits, client_ca=True) as served, ExitStack() as held:
        api = served.connect()
        held.callback(api.close)
        assert delete(api, "free", "before")["allowed"] is True
        stalled = []
        for _ in range(64):
            sock = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
            held.callback(sock.close)
            with contextlib.suppress(ConnectionError):
                sock.sendall(HALF_A_HELLO)
            stalled.append(sock)
        assert delete(api, "data", "kept-alive")["allowed"] is False
        for i in range(4):
            conn = served.connect()
            try:
                assert delete(conn, "data", f"new-{i}")["allowed"] is False
            finally:
                conn.close()
        assert closed_by_server(stalled[0])
        assert delete(api, "free", "after")["allowed"] is True


def test_idle_keep_alive_connections_make_room_for_new_ones(tmp_path: Path) -> None:
    """48 clients that each send one request and keep the connection, against a budget of 16
    (idle limit never reached): each new one is served, and those idle longest are closed."""
    limits = Limits(
        max_connections=16, idle_seconds=NEVER, max_body_bytes=64 * 1024 + 1, queue_seconds=None
    )
    with serving(tmp_path, limits) as served, ExitStack() as held:
        conns = []
        for i in range(48):
            conn = served.connect()
            held.callback(conn.close)
            assert delete(conn, "free", f"idle-{i}")["allowed"] is True
            conns.append(conn)
        assert conns[0].sock is not None
        assert closed_by_server(conns[0].sock)
        assert delete(conns[-1], "data", "the-newest")["allowed"] is False
        (tls_stats,) = served.server.stats()
        assert tls_stats.open <= 16
        assert tls_stats.closed_over_budget >= 48 - 16


def test_one_client_connecting_as_fast_as_it_can_to_the_health_port(tmp_path: Path) -> None:
    """A client opens (and holds) 3,000 connections to the health port as fast as it can, each
    with half a request, while new TLS connections ask for decisions: every one is answered,
    and once it stops a probe is too."""
    flood = 3_000
    enough_descriptors(flood + 64)
    with serving(tmp_path, health=True, client_ca=True) as served, ExitStack() as held:
        started = threading.Event()

        def attack() -> None:
            for i in range(flood):
                with contextlib.suppress(OSError):
                    sock = socket.create_connection(("127.0.0.1", served.health_port), 30)
                    held.callback(sock.close)
                    sock.sendall(HALF_A_HEAD)
                if i == 100:
                    started.set()
            started.set()

        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        assert started.wait(PATIENCE)
        answered = 0
        for i in range(20):
            conn = served.connect()
            try:
                answered += delete(conn, "data", f"under-flood-{i}")["allowed"] is False
            finally:
                conn.close()
        attacker.join(PATIENCE * 4)
        assert not attacker.is_alive()
        assert answered == 20
        assert served.probe("/readyz") == 200


# --- the settings -------------------------------------------------------------------------------


def test_the_command_lines_defaults_are_the_servers() -> None:
    """`gate webhook serve` without the options serves with `Limits()` on the TLS port and
    `HEALTH_LIMITS` on the health port."""
    from webhook.cli import _listener_limits, serve
    from webhook.review import DEFAULT_MAX_BYTES

    defaults: dict[str, Any] = {p.name: p.default for p in serve.params}
    tls_limits, health = _listener_limits(
        DEFAULT_MAX_BYTES,
        defaults["max_connections"],
        {k: defaults[k] for k in ("handshake_timeout", "header_timeout", "idle_timeout")},
        defaults["health_max_connections"],
        {k: defaults[k] for k in ("health_header_timeout", "health_idle_timeout")},
    )
    assert tls_limits == Limits(max_body_bytes=DEFAULT_MAX_BYTES + 1)
    assert health == HEALTH_LIMITS
    assert health.max_connections < tls_limits.max_connections


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--header-timeout", "5"], "--header-timeout: '5' is not a duration"),
        (["--health-idle-timeout", "0s"], "--health-idle-timeout 0s: must be more than 0"),
        (["--health-max-connections", "0"], "--health-max-connections"),
    ],
)
def test_a_bad_budget_or_deadline_is_a_usage_error_before_serving(
    monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    from gate.cli import main
    from webhook import httpserver

    monkeypatch.setattr(httpserver.HttpsServer, "run", lambda *_a: pytest.fail("served"))
    result = CliRunner().invoke(main, ["webhook", "serve", "--self-signed", *args])
    assert result.exit_code == 2, result.output
    assert said in result.output


_RAISE = """
import resource, sys
from webhook.serve import raise_descriptor_limit
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
try:
    raise_descriptor_limit(int(sys.argv[3]))
except OSError as exc:
    print("error:", exc)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _raised(soft: int, hard: int, need: int) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _RAISE, str(soft), str(hard), str(need)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,  # a hang guard
    )
    return done.stdout


def test_the_descriptor_limit_is_raised_to_fit_every_budget() -> None:
    """A soft limit below what the budgets need is raised (up to the hard one); a hard limit
    below it is an error that says which options to lower."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    need = min(2000, cap)
    assert _raised(256, cap, need).split() == [str(need)]
    out = _raised(256, 300, 2000)
    assert "error: the connection budgets (--max-connections, --health-max-connections)" in out
    assert "need about 2000 file descriptors, and this process may open 300" in out
