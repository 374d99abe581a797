"""HTTP/2 on the webhook's TLS port (`webhook.http2`), against the real server over real TLS.

kube-apiserver speaks HTTP/2 to a webhook that offers it, sending its calls as streams over one
connection; these tests are that client, written with the h2 library (the server's own parser is
h2 too, so the frames are checked on both sides). What they hold: every stream gets the answer
to its own review over one connection; the bounds the HTTP/1.1 path has (body size, deadlines,
the queue deadline) hold per stream; and what HTTP/2 adds (streams reset before their answer,
bodies held across streams, oversized header blocks) is bounded, with a GOAWAY saying why.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest

from tests.unit.test_httpserver import PATIENCE, Served, delete, serving
from tests.unit.test_overload import SlowApp
from tests.unit.test_webhook_app import claim, review
from webhook.http2 import ALPN_PROTOCOLS, RESETS_ALLOWED
from webhook.httpbase import Limits

LIMITS = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None)


@dataclass
class Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ended: bool = False
    reset: int | None = None

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Client:
    """A blocking HTTP/2 client on one TLS connection."""

    sock: ssl.SSLSocket
    conn: h2.connection.H2Connection
    answers: dict[int, Answer] = field(default_factory=dict)
    #: The server's GOAWAY error code, once it sent one.
    goaway: int | None = None
    closed: bool = False
    sent_after_close: bool = False
    last_stream_id: int | None = None
    pongs: int = 0
    settings: dict[int, int] = field(default_factory=dict)

    def flush(self) -> None:
        """Send what is queued; a server that closed meanwhile (its GOAWAY is still there to
        read) ends sending."""
        try:
            self.sock.sendall(self.conn.data_to_send())
        except (OSError, ssl.SSLError):
            self.sent_after_close = True

    def post(
        self,
        body: bytes,
        end: bool = True,
        content_length: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", "webhook"),
            (":path", "/validate"),
            ("content-type", "application/json"),
            ("content-length", content_length or str(len(body))),
            *(extra or {}).items(),
        ]
        self.conn.send_headers(stream_id, headers, end_stream=end and not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=end)
        self.answers[stream_id] = Answer()
        self.flush()
        return stream_id

    def review(self, name: str, uid: str) -> int:
        return self.post(json.dumps(review(claim(name), uid=uid)).encode())

    def receive(self) -> None:
        """Read once (blocking) and take what came."""
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return
        for event in self.conn.receive_data(data):
            self._take(event)
        out = self.conn.data_to_send()
        if out:
            try:
                self.sock.sendall(out)
            except OSError:
                self.closed = True

    def _take(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            answer = self.answers[event.stream_id]
            headers = {k.decode(): v.decode() for k, v in event.headers or []}
            answer.status = int(headers.pop(":status"))
            answer.headers = headers
        elif isinstance(event, h2.events.DataReceived):
            self.answers[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.answers[event.stream_id].ended = True
        elif isinstance(event, h2.events.StreamReset):
            self.answers[event.stream_id].reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event.error_code
            self.last_stream_id = event.last_stream_id
        elif isinstance(event, h2.events.PingAckReceived):
            self.pongs += 1
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.settings.update({k: v.new_value for k, v in event.changed_settings.items()})

    def wait(self, *stream_ids: int) -> list[Answer]:
        """Read until every stream in `stream_ids` ended or was reset (or the server closed)."""
        wanted = [self.answers[s] for s in stream_ids]
        while not self.closed and not all(a.ended or a.reset is not None for a in wanted):
            self.receive()
        return wanted

    def wait_closed(self) -> None:
        """Read until the server says GOAWAY (the connection takes no new stream: Go's
        client stops there) or closes."""
        while not self.closed and self.goaway is None:
            self.receive()

    def sync(self) -> None:
        """A PING, read until its ACK: the server has taken every frame sent before it."""
        want = self.pongs + 1
        self.conn.ping(b"syncsync")
        self.flush()
        while not self.closed and self.pongs < want:
            self.receive()


@contextmanager
def h2_client(served: Served) -> Iterator[Client]:
    context = served.context
    context.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's clients do
    sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
    with closing(sock):
        assert sock.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        client = Client(sock, conn)
        client.flush()
        while not client.settings:  # the server's windows, before anything is sent
            client.receive()
        yield client


@contextmanager
def h2_serving(tmp_path: Path, limits: Limits = LIMITS, app: Any = None) -> Iterator[Served]:
    with serving(tmp_path, limits, app=app, alpn=ALPN_PROTOCOLS) as served:
        yield served


def test_many_reviews_over_one_connection_each_get_their_own_answer(tmp_path: Path) -> None:
    """64 reviews in flight at once on one connection: each stream's answer is its own review's
    verdict and uid, and the server served one connection, over h2."""
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        streams = {client.review("data" if i % 2 else "free", f"uid-{i}"): i for i in range(64)}
        answers = client.wait(*streams)
        for (_stream, i), answer in zip(streams.items(), answers, strict=True):
            assert answer.status == 200, answer
            response = answer.json()["response"]
            assert response["uid"] == f"uid-{i}"
            assert response["allowed"] is (i % 2 == 0), response
        assert client.settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == (
            LIMITS.max_streams
        )
        [stats] = served.server.stats()
        assert dict(stats.served) == {"h2": 1}


def test_http1_clients_are_still_served_beside_http2(tmp_path: Path) -> None:
    """Offering h2 keeps HTTP/1.1 for a client that does not ask for it (curl --http1.1, an
    older API server with DISABLE_HTTP2)."""
    with h2_serving(tmp_path) as served:
        conn = served.connect()
        assert delete(conn, "data", "h1")["uid"] == "h1"
        conn.close()
        with h2_client(served) as client:
            [answer] = client.wait(client.review("free", "h2"))
            assert answer.json()["response"]["allowed"] is True
        [stats] = served.server.stats()
        assert dict(stats.served) == {"h2": 1, "http/1.1": 1}


def test_a_review_in_many_data_frames_is_decided(tmp_path: Path) -> None:
    body = json.dumps(review(claim("data"), uid="pieces")).encode()
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        stream = client.post(body[:100], end=False, content_length=str(len(body)))
        for at in range(100, len(body), 333):
            client.conn.send_data(stream, body[at : at + 333])
            client.flush()
        client.conn.end_stream(stream)
        client.flush()
        [answer] = client.wait(stream)
        assert answer.status == 200
        assert answer.json()["response"] == {
            **answer.json()["response"],
            "uid": "pieces",
            "allowed": False,
        }


def test_a_declared_body_over_the_limit_is_a_413_and_the_stream_is_stopped(
    tmp_path: Path,
) -> None:
    """The app's 413 comes before the body; RST_STREAM NO_ERROR then asks the client to stop
    sending it, and the connection serves the next review."""
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        stream = client.post(b"", end=False, content_length=str(10 * 1024 * 1024))
        [answer] = client.wait(stream)
        assert answer.status == 413, answer
        assert "too large" in answer.json()["reason"] or answer.json()["reason"]
        [after] = client.wait(client.review("free", "after"))
        assert after.json()["response"]["uid"] == "after"


def test_a_body_growing_past_the_limit_is_a_413(tmp_path: Path) -> None:
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        stream = client.post(b"x" * 16000, end=False, content_length="999999")
        for _ in range(5):
            client.conn.send_data(stream, b"x" * 16000)
        client.flush()
        [answer] = client.wait(stream)
        assert answer.status == 413, answer
        assert not client.closed


def test_a_stream_whose_body_never_comes_closes_the_connection_at_its_deadline(
    tmp_path: Path,
) -> None:
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, request_seconds=0.5)
    with h2_serving(tmp_path, limits) as served, h2_client(served) as client:
        client.post(b'{"kind":', end=False, content_length="100")
        client.wait_closed()
        assert client.goaway == h2.errors.ErrorCodes.CANCEL


def test_an_idle_connection_is_closed_with_a_clean_goaway(tmp_path: Path) -> None:
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, idle_seconds=0.5)
    with h2_serving(tmp_path, limits) as served, h2_client(served) as client:
        [answer] = client.wait(client.review("free", "one"))
        assert answer.status == 200
        client.wait_closed()
        assert client.goaway == h2.errors.ErrorCodes.NO_ERROR


def test_a_connection_that_never_sends_a_request_is_closed(tmp_path: Path) -> None:
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, header_seconds=0.5)
    with h2_serving(tmp_path, limits) as served, h2_client(served) as client:
        client.wait_closed()
        assert client.goaway == h2.errors.ErrorCodes.CANCEL


def test_streams_reset_before_their_answer_past_the_allowance_close_the_connection(
    tmp_path: Path,
) -> None:
    """The "rapid reset" pattern: open a stream, reset it, again. Past RESETS_ALLOWED more
    than were answered, the server says ENHANCE_YOUR_CALM and closes."""
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        for _ in range(RESETS_ALLOWED + 50):
            stream = client.post(b"{", end=False, content_length="100")
            client.conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
            client.flush()
            if client.sent_after_close:
                break
        client.wait_closed()
        assert client.goaway == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def test_a_client_that_resets_now_and_then_is_served(tmp_path: Path) -> None:
    """A reset per answered review (the API server cancelling calls it gave up on) is not an
    attack: the allowance grows with what was answered."""
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        for i in range(RESETS_ALLOWED + 50):
            stream = client.post(b"{", end=False, content_length="100")
            client.conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
            [answer] = client.wait(client.review("free", f"r{i}"))
            assert answer.status == 200
        assert client.goaway is None


def test_bodies_held_across_streams_past_twice_the_limit_close_the_connection(
    tmp_path: Path,
) -> None:
    """Each stream under the body limit, together over twice it: the connection goes."""
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        for _ in range(4):
            stream = client.post(b"x" * 16000, end=False, content_length="60000")
            for _ in range(3):
                client.conn.send_data(stream, b"x" * 14000)
            client.flush()
        client.wait_closed()
        assert client.goaway == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def test_a_header_block_over_the_limit_closes_the_connection(tmp_path: Path) -> None:
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, max_header_bytes=4096)
    with h2_serving(tmp_path, limits) as served, h2_client(served) as client:
        client.wait(client.review("free", "settled"))  # the server's SETTINGS are acknowledged
        client.post(b"{}", extra={"x-big": "y" * 8000})
        client.wait_closed()
        assert client.goaway in (
            h2.errors.ErrorCodes.ENHANCE_YOUR_CALM,
            h2.errors.ErrorCodes.PROTOCOL_ERROR,
        )


def test_garbage_after_the_handshake_is_a_goaway(tmp_path: Path) -> None:
    with h2_serving(tmp_path) as served:
        context = served.context
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
        with closing(context.wrap_socket(raw, server_hostname="127.0.0.1")) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            # The server's SETTINGS, then a GOAWAY frame (type 7) with PROTOCOL_ERROR (1).
            assert b"\x07\x00\x00\x00\x00\x00" in data
            assert data.endswith(b"\x00\x00\x00\x01")


QUEUED = 20


def test_streams_that_waited_past_the_queue_limit_are_answered_429(tmp_path: Path) -> None:
    """As over HTTP/1.1, but the queue is one connection's streams: 20 reviews sent while the
    worker is busy, each served one taking 0.25 s, a review may wait 1 s. Each stream's wait
    is from its own bytes' arrival: the first few are decided, the rest shed."""
    app = SlowApp(work=0.25)
    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=1.0)
    with h2_serving(tmp_path, limits, app=app) as served, h2_client(served) as client:
        busy = client.review("data", "busy")
        assert app.entered.wait(PATIENCE), "the first review never reached the app"
        queued = [client.review("free", f"queued-{i}") for i in range(QUEUED)]
        app.release.set()
        [first] = client.wait(busy)
        assert (first.status, first.json()["response"]["allowed"]) == (200, False)
        answers = client.wait(*queued)
        decided = [a for a in answers if a.status == 200]
        shed = [a for a in answers if a.status == 429]
        assert len(decided) + len(shed) == QUEUED, [a.status for a in answers]
        assert len(decided) <= 5
        assert len(shed) >= QUEUED - 5
        assert app.calls == 1 + len(decided), "a shed review reached the app"
        assert shed[0].json()["error"] == "overloaded"
        assert served.server.stats()[0].shed == len(shed)


@pytest.mark.parametrize("offered", [("http/1.1",)])
def test_without_http2_the_port_does_not_offer_it(tmp_path: Path, offered: tuple[str]) -> None:
    """`--no-http2`: ALPN offers HTTP/1.1 alone, and a client asking for h2 gets HTTP/1.1."""
    with serving(tmp_path, LIMITS, alpn=offered) as served:
        context = served.context
        context.set_alpn_protocols(["h2", "http/1.1"])
        raw = socket.create_connection(("127.0.0.1", served.port), timeout=PATIENCE)
        with closing(context.wrap_socket(raw, server_hostname="127.0.0.1")) as sock:
            assert sock.selected_alpn_protocol() == "http/1.1"


@pytest.mark.parametrize(
    ("flag", "offered"), [([], ALPN_PROTOCOLS), (["--no-http2"], ("http/1.1",))]
)
def test_the_command_line_chooses_what_the_tls_port_offers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: list[str], offered: tuple[str, ...]
) -> None:
    """`gate webhook serve` offers h2 unless --no-http2: what its certificate reloader's
    context negotiates with a client that asks for h2 first."""
    from click.testing import CliRunner

    from gate.cli import main
    from tests.unit.test_webhook_hardening import KUBECONFIG
    from webhook import cli, tls

    seen: list[Any] = []
    monkeypatch.setattr(cli, "_serve", seen.append)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    serve = ["webhook", "serve", "--self-signed", "--kubeconfig", str(kubeconfig), *flag]
    result = CliRunner().invoke(main, serve)
    assert result.exit_code == 0, result.output
    ca = tls.make_ca()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls.write_pair(tls.make_serving_cert(ca, ["127.0.0.1"]), cert, key)
    reloader = cli._reloader(seen[0], cli.Certificates(str(cert), str(key), ca.cert_pem))
    assert reloader.alpn == offered
    server_side = reloader.context()
    client_side = ssl.create_default_context(cadata=ca.cert_pem.decode())
    client_side.set_alpn_protocols(["h2", "http/1.1"])
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(PATIENCE)
        b.settimeout(PATIENCE)
        server_tls = server_side.wrap_socket(a, server_side=True, do_handshake_on_connect=False)
        client_tls = client_side.wrap_socket(
            b, server_hostname="127.0.0.1", do_handshake_on_connect=False
        )
        with server_tls, client_tls:
            done = threading.Thread(target=server_tls.do_handshake)
            done.start()
            client_tls.do_handshake()
            done.join(PATIENCE)
            assert client_tls.selected_alpn_protocol() == offered[0]


def read_frames(sock: ssl.SSLSocket, buffered: bytearray) -> list[tuple[int, int, int, bytes]]:
    """The whole frames (type, flags, stream, payload) that can be read now, read by hand:
    h2's own client state machine takes nothing after a GOAWAY. [] once the server closed."""
    while True:
        frames = []
        while len(buffered) >= 9:
            length = int.from_bytes(buffered[:3], "big")
            if len(buffered) < 9 + length:
                break
            kind, flags = buffered[3], buffered[4]
            stream = int.from_bytes(buffered[5:9], "big") & 0x7FFFFFFF
            frames.append((kind, flags, stream, bytes(buffered[9 : 9 + length])))
            del buffered[: 9 + length]
        if frames:
            return frames
        chunk = sock.recv(65536)
        if not chunk:
            return []
        buffered += chunk


def test_a_stop_says_goaway_at_once_and_answers_the_open_stream(tmp_path: Path) -> None:
    """A rollout's SIGTERM while a review is half sent: the server says GOAWAY (NO_ERROR, the
    open stream named as the last it answers) at once, so that the API server sends its next
    calls to another pod; the open review is still answered, then the connection closes."""
    body = json.dumps(review(claim("data"), uid="in-flight")).encode()
    goaway, headers, data = 7, 1, 0
    with h2_serving(tmp_path) as served, h2_client(served) as client:
        stream = client.post(body[:50], end=False, content_length=str(len(body)))
        client.sync()
        served.server.stop()
        buffered = bytearray()
        [(kind, _flags, on, payload)] = read_frames(client.sock, buffered)
        assert (kind, on) == (goaway, 0)
        assert (int.from_bytes(payload[:4], "big"), int.from_bytes(payload[4:8], "big")) == (
            stream,
            h2.errors.ErrorCodes.NO_ERROR,
        )
        # A stream the GOAWAY names may still be sent (RFC 9113 6.8), as Go's client does.
        rest = body[50:]
        frame = len(rest).to_bytes(3, "big") + b"\x00\x01" + stream.to_bytes(4, "big") + rest
        client.sock.sendall(frame)
        answer: dict[str, Any] = {"body": b""}
        while frames := read_frames(client.sock, buffered):
            for kind, _flags, on, payload in frames:
                if kind == headers and on == stream:
                    answer["headers"] = dict(client.conn.decoder.decode(payload))
                elif kind == data and on == stream:
                    answer["body"] += payload
        assert answer["headers"][":status"] == "200"
        assert json.loads(answer["body"])["response"]["uid"] == "in-flight"


def test_a_ping_flood_from_a_client_that_reads_nothing_is_cut_off(tmp_path: Path) -> None:
    """PINGs each get an ACK; a client that sends them and never reads fills the server's
    write buffer, and the write's deadline (`request_seconds`) closes the connection instead
    of the ACKs piling up in the worker."""
    from tests.unit.test_httpserver import closed_by_server

    limits = Limits(max_body_bytes=64 * 1024 + 1, queue_seconds=None, request_seconds=1.0)
    ping = (8).to_bytes(3, "big") + b"\x06\x00" + bytes(4) + b"floodpng"
    with h2_serving(tmp_path, limits) as served, h2_client(served) as client:
        sent = 0
        try:
            for _ in range(20_000):
                client.sock.sendall(ping * 64)
                sent += 64
        except OSError:
            pass  # the server closed (a write blocked past PATIENCE would fail the test below)
        assert sent >= 1000, "the flood never got going"
        assert closed_by_server(client.sock)
        [stats] = served.server.stats()
        assert stats.open == 0
