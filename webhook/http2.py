"""HTTP/2 on the TLS listener: a caller's reviews share a connection instead of each wanting one.

kube-apiserver's webhook client (client-go's transport) speaks HTTP/2 when the server offers it
in the TLS handshake (ALPN), and then sends every call to this webhook over one connection, as
concurrent streams, opening another only past the server's MAX_CONCURRENT_STREAMS. Over
HTTP/1.1 it needs a connection for each call in flight: when the webhook falls behind, calls
wait, and the client opens a new connection, with a TLS handshake (1.8 ms of this worker's
CPU with a client certificate), for each new call; past saturation thousands of handshakes took
the worker's core from the reviews (bench/bench_load.py). Over HTTP/2 the connection count
stays flat however far behind the worker is, and what is behind is answered by the listener's
queue deadline (a 429) instead of a handshake storm.

The framing, HPACK and flow control are the h2 library's (sans-I/O, with HPACK and
CONTINUATION bounds of its own); this module keeps what the HTTP/1.1 path keeps: the
listener's deadlines and body bound, the queue deadline, the connection's phase for the
budget, and the WSGI call (the server's `respond`). What HTTP/2 adds is bounded too:
concurrent streams (MAX_CONCURRENT_STREAMS), body bytes held across a connection's streams,
and streams the client resets before their answer (the 2023 "rapid reset" pattern) beyond
RESETS_ALLOWED and the number answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from webhook.httpbase import ACTIVE, IDLE, ClosedError, Limits, Request, content_length, linger

#: What the TLS listener offers in ALPN, most preferred first.
ALPN_PROTOCOLS = ("h2", "http/1.1")

#: Streams the client may reset before their answer, beyond as many as were answered, before
#: the connection is closed: a reset costs a stream's HEADERS parse and nothing more here (the
#: answer is made inline), but a connection that mostly resets is not the API server.
RESETS_ALLOWED = 100

#: Each stream's flow-control window offered to the client: a review (a few KiB, at most the
#: body limit of some MiB) arrives in one or two round trips instead of 64 KiB ones.
STREAM_WINDOW = 1024 * 1024

#: A review's size, about (a DELETE's carries the object once): what `read_buffer` sizes for.
REVIEW_BYTES = 4 * 1024


def read_buffer(limits: Limits) -> int:
    """The limit of an HTTP/2 connection's reader, which pauses its transport past twice it:
    a full `max_streams` of reviews, 512 KiB at least. The default (the head limit) would leave
    a backlog in the kernel, where no arrival time is known and nothing is shed; here it waits
    where `_StampedProtocol` has noted when each chunk came."""
    return max(512 * 1024, limits.max_streams * REVIEW_BYTES // 2)


#: Bytes consumed from the reader per turn of the event loop: a few reviews, then the loop's
#: other connections and the transport's reads (which stamp what arrives) have their turn.
SLICE_BYTES = 16 * 1024

#: (status, headers, body) for a request whose last bytes arrived at the given loop time: the
#: server's shed-or-call-the-app answer.
Respond = Callable[[Request, float], tuple[int, list[tuple[str, str]], bytes]]

#: When the bytes up to an offset of the connection's decrypted stream arrived (loop time):
#: `_StampedProtocol.arrival_of`.
Arrival = Callable[[int], float]


class _H2Connection(h2.connection.H2Connection):
    #: Closed streams h2 remembers, to answer a late frame on one with a stream error: 65,536
    #: by default, a few MiB for each long-lived connection (the API server's live for days).
    MAX_CLOSED_STREAMS = 1024


class _GoingAwayError(Exception):
    """The connection is to close: what was queued to send is flushed first."""


@dataclass
class _Stream:
    headers: list[tuple[bytes, bytes]]
    #: Loop time of its HEADERS: the body must be whole within `request_seconds` of it.
    started: float
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0


@dataclass
class Http2Session:
    """One HTTP/2 connection, after its TLS handshake, until it closes.

    `phase(name)` moves the connection in its listener's budget (`httpserver.OPENING`, `IDLE`,
    `ACTIVE`); `stopping()` says the server is stopping (answer what is open, then GOAWAY).
    """

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    limits: Limits
    respond: Respond
    arrival: Arrival
    phase: Callable[[str], None]
    stopping: Callable[[], bool]
    #: Deadline (loop time) for the first request's HEADERS: the handshake's end plus
    #: `header_seconds`, as for an HTTP/1.1 connection's first request head.
    first_deadline: float
    streams: dict[int, _Stream] = field(default_factory=dict)
    #: Body bytes this connection sends that are waiting for the client's flow-control window.
    pending: dict[int, bytes] = field(default_factory=dict)
    answered: int = 0
    resets: int = 0
    #: Body bytes of the open streams together (bounded at twice --max-body-bytes).
    held: int = 0
    #: Any request's HEADERS seen: after it, no stream open means idle.
    requested: bool = False
    idle_since: float | None = None
    #: Decrypted bytes read so far (`arrival`'s offset), and when the latest read's arrived.
    consumed: int = 0
    arrived: float = 0.0
    current_phase: str = ""
    #: A stop's GOAWAY was written (`announce_stop`).
    announced: bool = False
    conn: _H2Connection = field(init=False)

    def __post_init__(self) -> None:
        # What the client sends is checked (illegal characters, connection headers, pseudo
        # headers); what this module sends is its own, lower-case and fixed, and not checked
        # again for every answer.
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self.conn = _H2Connection(config)
        self.conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.limits.max_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.limits.max_header_bytes,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        # Values given here are in force at once, with no ACK to wait for: h2 moves its HPACK
        # decoder's bound only on an ACK of a change, so set it too.
        self.conn.decoder.max_header_list_size = self.limits.max_header_bytes

    async def run(self) -> None:
        """Serve until the client goes, a deadline passes, a bound is crossed or the server
        stops; a GOAWAY says which streams were answered, so a client resends the rest."""
        loop = asyncio.get_running_loop()
        self.conn.initiate_connection()
        # The connection's flow-control window, beyond the default 64 KiB: what the client may
        # send ahead of this process's reads, so that a backlog arrives here (stamped, shed by
        # age) instead of waiting in the client.
        self.conn.increment_flow_control_window(2 * read_buffer(self.limits))
        try:
            await self._flush()
            while True:
                if self.stopping() and not self.streams:
                    raise _GoingAwayError(h2.errors.ErrorCodes.NO_ERROR)
                try:
                    async with asyncio.timeout_at(self._deadline()):
                        data = await self.reader.read(SLICE_BYTES)
                except TimeoutError:
                    # Idle past idle_seconds: a clean GOAWAY. A stream or a first request
                    # late: the client is too slow for the deadlines; say so and close.
                    late = bool(self.streams) or not self.requested
                    code = h2.errors.ErrorCodes.CANCEL if late else h2.errors.ErrorCodes.NO_ERROR
                    raise _GoingAwayError(code) from None
                if not data:
                    raise ClosedError
                self.consumed += len(data)
                self.arrived = self.arrival(self.consumed)
                try:
                    events = self.conn.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    code = getattr(exc, "error_code", h2.errors.ErrorCodes.PROTOCOL_ERROR)
                    raise _GoingAwayError(code) from None
                for event in events:
                    self._handle(event, loop.time())
                await self._flush()
                self._set_phase(loop.time())
                await asyncio.sleep(0)  # a read of buffered bytes does not yield
        except _GoingAwayError as closing:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.conn.close_connection(error_code=closing.args[0])
            with contextlib.suppress(TimeoutError, ConnectionError, OSError):
                await self._flush()
            await linger(self.reader, self.limits)
        except asyncio.CancelledError:
            # A stop's deadline or a listener making room: tell the client which streams were
            # answered, so it resends the others elsewhere, then let the task end.
            with contextlib.suppress(h2.exceptions.ProtocolError, RuntimeError, OSError):
                self.conn.close_connection()
                self.writer.write(self.conn.data_to_send())
            raise

    def announce_stop(self) -> None:
        """The server is stopping: a GOAWAY (NO_ERROR) now, naming the last stream this
        connection will answer, so that the client opens its next calls on another connection
        (another pod) while the open ones are answered; the connection closes once they are.
        Written as a frame of its own: h2's `close_connection` would end the connection's state
        machine, and the open streams could not be answered. Called between turns of the
        session's loop, when h2 has nothing of its own waiting to be written."""
        if self.announced:
            return
        self.announced = True
        # RFC 9113 6.8: length 8, type GOAWAY (7), no flags, stream 0; last stream, error code.
        last = self.conn.highest_inbound_stream_id & 0x7FFFFFFF
        payload = struct.pack(">II", last, h2.errors.ErrorCodes.NO_ERROR)
        self.writer.write(struct.pack(">I", len(payload))[1:] + b"\x07\x00" + bytes(4) + payload)

    def _deadline(self) -> float:
        """When the wait for the next bytes ends: the oldest open stream's body deadline, the
        first request's head deadline, or the idle deadline."""
        if self.streams:  # in the order their HEADERS came: the first is the oldest
            oldest = next(iter(self.streams.values()))
            return oldest.started + self.limits.request_seconds
        if not self.requested or self.idle_since is None:
            return self.first_deadline
        return self.idle_since + self.limits.idle_seconds

    def _set_phase(self, now: float) -> None:
        if self.streams:
            self.idle_since = None
            phase = ACTIVE
        elif self.requested:
            if self.idle_since is None:
                self.idle_since = now
            phase = IDLE
        else:
            return
        if phase != self.current_phase:
            self.current_phase = phase
            self.phase(phase)

    async def _flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.writer.write(out)
            async with asyncio.timeout(self.limits.request_seconds):
                await self.writer.drain()

    # -- events -----------------------------------------------------------------------------

    def _handle(self, event: h2.events.Event, now: float) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._headers(event, now)
        elif isinstance(event, h2.events.DataReceived):
            self._data(event)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self._close_stream(event.stream_id)
            if stream is not None:
                self._answer(event.stream_id, stream, unread_length=None)
        elif isinstance(event, h2.events.StreamReset):
            if self._close_stream(event.stream_id) is not None:
                self.resets += 1
                if self.resets > RESETS_ALLOWED + self.answered:
                    raise _GoingAwayError(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            self.pending.pop(event.stream_id, None)
        elif isinstance(event, h2.events.WindowUpdated):
            for stream_id in list(self.pending):
                self._send_body(stream_id, self.pending.pop(stream_id))
        elif isinstance(event, h2.events.ConnectionTerminated):
            raise _GoingAwayError(h2.errors.ErrorCodes.NO_ERROR)

    def _headers(self, event: h2.events.RequestReceived, now: float) -> None:
        headers = [(bytes(k), bytes(v)) for k, v in event.headers or []]
        stream = _Stream(headers, now)
        self.requested = True
        self.streams[event.stream_id] = stream
        length = content_length(headers)
        if length is not None and length > self.limits.max_body_bytes:
            # Answered before its body is sent (the app's 413); RST_STREAM NO_ERROR after a
            # whole answer asks the client to stop sending without failing it (RFC 9113 8.1).
            self._close_stream(event.stream_id)
            self._answer(event.stream_id, stream, unread_length=length)
            self.conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)

    def _data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            self.conn.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
        stream = self.streams.get(stream_id)
        if stream is None or not event.data:
            return  # a stream answered already (over the limit) or reset
        stream.chunks.append(event.data)
        stream.size += len(event.data)
        self.held += len(event.data)
        if stream.size > self.limits.max_body_bytes:
            self._close_stream(stream_id)
            self._answer(stream_id, stream, unread_length=stream.size)
            self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
        elif self.held > 2 * self.limits.max_body_bytes:
            # Many streams' bodies at once, each under the limit: more than a caller that sends
            # its reviews whole has in flight.
            raise _GoingAwayError(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)

    def _close_stream(self, stream_id: int) -> _Stream | None:
        """Take an open stream out (answered, reset or over the limit), with its body bytes."""
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self.held -= stream.size
        return stream

    def _answer(self, stream_id: int, stream: _Stream, unread_length: int | None) -> None:
        pseudo = dict(h for h in stream.headers if h[0].startswith(b":"))
        regular = [h for h in stream.headers if not h[0].startswith(b":")]
        authority = pseudo.get(b":authority")
        if authority is not None and not any(k == b"host" for k, _ in regular):
            regular.append((b"host", authority))
        body = b"".join(stream.chunks)[: self.limits.max_body_bytes]
        req = Request(
            pseudo.get(b":method", b"GET").decode("ascii", "replace"),
            pseudo.get(b":path", b"/").decode("ascii", "replace"),
            regular,
            body,
            unread_length=unread_length,
            protocol="HTTP/2",
        )
        status, headers, payload = self.respond(req, self.arrived)
        self.answered += 1
        response = [(b":status", str(status).encode())]
        response += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        try:
            self.conn.send_headers(stream_id, response, end_stream=not payload)
            if payload:
                self._send_body(stream_id, payload)
        except h2.exceptions.StreamClosedError:
            pass  # the client reset it meanwhile

    def _send_body(self, stream_id: int, body: bytes) -> None:
        """Send what the client's windows let through now; keep the rest for its WINDOW_UPDATE."""
        try:
            while body:
                room = min(
                    self.conn.local_flow_control_window(stream_id),
                    self.conn.max_outbound_frame_size,
                )
                if room <= 0:
                    self.pending[stream_id] = body
                    return
                chunk, body = body[:room], body[room:]
                self.conn.send_data(stream_id, chunk, end_stream=not body)
        except h2.exceptions.StreamClosedError:
            self.pending.pop(stream_id, None)
