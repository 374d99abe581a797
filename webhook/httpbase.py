"""What the webhook's HTTP/1.1 and HTTP/2 paths share: a listener's limits, a request as the
app is given it, the end of a connection, and a connection's phases for its listener's budget."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable
from dataclasses import dataclass

from webhook.review import DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Limits:
    """What one listener holds and what one of its connections may take, in time and bytes."""

    #: From accept to a finished TLS handshake. The API server's handshake takes milliseconds,
    #: and its whole call has at most the webhook's timeoutSeconds (1-30, the chart's 5).
    handshake_seconds: float = 5.0
    #: Until a request's head (request line and headers) is whole: from the handshake (plain
    #: HTTP: the accept) for a connection's first request, from the first byte for a later one.
    #: A slowloris-style half-sent head is closed at this deadline.
    header_seconds: float = 5.0
    #: After the head: until the body's last byte; and, for writing the answer, until the client
    #: has taken it. A slow sender or a client that reads nothing is cut off.
    request_seconds: float = 10.0
    #: How long a kept-alive connection may wait for its next request. The API server keeps its
    #: connections to webhooks for reuse; 30 s is gunicorn's keepalive that it was served with.
    idle_seconds: float = 30.0
    #: The listener's connection budget (each costs a file descriptor); a new connection beyond
    #: it closes the listener's oldest (see `webhook.httpserver` for which).
    max_connections: int = 1024
    #: How long a whole request may wait in this process before it is served: from its last
    #: bytes reaching the process to the app's call. Older, it is answered 429 at once, without
    #: a decision (`shed`): the worker is behind, and the API server, which gives the whole
    #: call the webhook's timeoutSeconds (1-30 s, the chart's 5), applies its failurePolicy to
    #: the 429 at once instead of waiting out its timeout. None: never shed (the health port).
    queue_seconds: float | None = 0.5
    #: TLS handshakes in progress at once from one peer address; a new connection from an
    #: address at it is closed at once (`turned_away`). A handshake costs about 1.8 ms of CPU
    #: with a client certificate (five decisions' worth), and a caller whose calls wait opens
    #: more connections, each a handshake that slows every call further: past saturation,
    #: 2,500 of them took the worker's core for seconds. 256 is about half a second of
    #: handshakes (`queue_seconds`' worth), and more than a namespace deletion's burst of 100
    #: new connections. Per address, so that a stranger who starts handshakes and never ends
    #: them holds back only its own. None: no bound.
    max_handshakes: int | None = 256
    #: HTTP/2 streams a client may have open at once on one connection (its
    #: SETTINGS_MAX_CONCURRENT_STREAMS; see `webhook.http2`).
    max_streams: int = 250
    #: Request line and headers together.
    max_header_bytes: int = 16 * 1024
    #: Body bytes read at most; one past the app's own limit (`webhook.review.DEFAULT_MAX_BYTES`
    #: unless `--max-body-bytes` says otherwise), so the app can tell "too large".
    max_body_bytes: int = DEFAULT_MAX_BYTES + 1
    #: After an answer that leaves a body unread, how long and how much more is read and
    #: dropped before the connection closes (see `HttpsServer._linger`).
    linger_seconds: float = 2.0
    linger_bytes: int = 4 * 1024 * 1024
    #: How long a stop waits for requests in flight before closing their connections (the
    #: server's own limits only: the first argument of `HttpsServer`).
    graceful_seconds: float = 10.0

    def __post_init__(self) -> None:
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, not {self.max_streams}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")
        for name in ("queue_seconds", "max_handshakes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be more than 0 or None, not {value}")
        for name in ("handshake_seconds", "header_seconds", "request_seconds", "idle_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0, not {getattr(self, name)}")

    @property
    def accept_batch(self) -> int:
        """How many connections one turn of the event loop accepts at most: a quarter of the
        budget (1-256). A client that sends its request at once has it read within a turn or
        two of its accept; fewer newer connections than the budget can arrive meanwhile, so a
        flood of new connections cannot make it the oldest and close it first."""
        return max(1, min(256, self.max_connections // 4))


class ClosedError(Exception):
    """The connection is over (peer gone, deadline passed)."""


@dataclass
class Request:
    """One request, its body read whole (or not at all, over the limit)."""

    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    #: The body was not read: its declared length is over the limit.
    unread_length: int | None = None
    #: WSGI's SERVER_PROTOCOL.
    protocol: str = "HTTP/1.1"


#: A connection's phases, in the order in which a listener at its budget closes them: not yet
#: a whole request head (a handshake, a half-sent head), idle between requests, in a request.
OPENING, IDLE, ACTIVE = "opening", "idle", "active"


async def linger(reader: asyncio.StreamReader, limits: Limits) -> None:
    """Read and drop what the client still sends, briefly, before closing: closing a socket
    with unread bytes resets it, and a reset can destroy what was just sent (a 413 of a body
    still arriving, a GOAWAY) before the client reads it."""
    dropped = 0
    with contextlib.suppress(TimeoutError, ConnectionError, ssl.SSLError, OSError):
        async with asyncio.timeout(limits.linger_seconds):
            while dropped < limits.linger_bytes:
                data = await reader.read(65536)
                if not data:
                    return
                dropped += len(data)


def content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The declared Content-Length (names lower-case, as h11 and h2 give them), if a number."""
    for key, value in headers:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the parser refuses the body against it
    return None
