"""The HTTP server of the webhook: one asyncio event loop, the WSGI app called inline.

It serves /validate over TLS and, on listeners of their own, the plain-HTTP health paths
(`webhook.serve.health_only`); a pre-forking master (`webhook.workers`) runs it for its
aggregated health port too, with no TLS listener at all.

Why not gunicorn's threaded worker, which served it before (bench/bench_load.py measures it):
it runs the TLS handshake and every read in a worker thread, so a client that connects and sends
nothing pins a thread until the worker's timeout, and as many idle clients as threads stall every
API-server call; and its threads take turns on one interpreter lock, so more threads bought no
throughput. Here the handshake and every read are non-blocking in the loop: an idle or slow
client costs a socket and a few KB, and every phase has a deadline (handshake, request head,
body, idle keep-alive) after which it is closed. The app is called inline: a decision is well
under a millisecond of CPU work on the in-memory cache, with no I/O to wait for, so handing it to
a thread would only add the lock's hand-off.

Each listener has limits of its own (`Limits`): its connection budget and its deadlines. The
health port needs no client certificate, so anyone who reaches it can hold connections there;
its budget is small and it is its own, so it cannot use up the TLS port's, where the API server
calls /validate (with one budget for both, 1,100 half-sent requests to the health port reset
every new TLS connection). A new connection to a listener at its budget is taken, and the
listener closes the oldest of its own connections that has not sent a whole request head (a
stalled handshake, a half-sent request); failing that, the one idle longest between requests;
failing that, its oldest. Refusing the new one instead would let whoever holds the budget keep
it, by opening a connection again as each deadline closes one (1,024 held 10 s costs about 100
connections a second); closing the oldest, a client is cut off only if more new connections
than the budget arrive while it sends its request head, which for the API server is a few
milliseconds. A connection in the middle of a request goes last: it has shown a whole head.

HTTP/1.1 parsing is h11's (a strict, sans-I/O parser: no request smuggling through a lenient
hand-written one). Bodies are bounded before they are read: a Content-Length over the limit is
passed on unread (the app answers 413), a chunked body stops being read one byte past it. The
app gets the body whole, with its length, however it was framed.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import collections
import contextlib
import io
import json
import logging
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from wsgiref.types import WSGIApplication

import h11

from webhook.http2 import Http2Session, read_buffer
from webhook.httpbase import (
    ACTIVE,
    IDLE,
    OPENING,
    ClosedError,
    Limits,
    Request,
    content_length,
    linger,
)

log = logging.getLogger("prune_gate.webhook.server")

#: asyncio's TLS protocol reads a connection's bytes into a buffer of `SSLProtocol.max_size`,
#: 256 KiB, zero-filled when the connection is made: 250 MiB for 1,000 open connections, most
#: of a worker's memory under load. A TLS record is at most 16 KiB and some bytes; a larger
#: body is read in more turns of the loop.
TLS_READ_BUFFER = 32 * 1024
asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


#: The plain-HTTP health listener's limits: kubelet's probes open a connection each (a few per
#: period) and send their request at once (their timeout is seconds); a metrics scraper keeps
#: one or two. A small budget, and a short head deadline, for a port anyone who reaches it may
#: fill: whatever it holds is its own, never the TLS port's.
HEALTH_LIMITS = Limits(
    max_connections=32,
    queue_seconds=None,
    max_handshakes=None,
    header_seconds=3.0,
    request_seconds=5.0,
    idle_seconds=10.0,
    max_body_bytes=16 * 1024,
)


class _MalformedError(Exception):
    """Not HTTP/1.1 that h11 accepts: answered with its status (400, 431) and closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


#: A coroutine run beside the listeners for as long as the server serves (a supervisor, a
#: parent-death check); its end or failure stops the server.
Background = Callable[[], Coroutine[Any, Any, None]]


@dataclass(eq=False)
class _Connection:
    task: asyncio.Task[None]
    writer: asyncio.StreamWriter
    phase: str = OPENING
    #: Called when the server stops while the connection is in a request: HTTP/2's says so
    #: to the client at once (a GOAWAY), so that it sends its next calls elsewhere.
    on_stop: Callable[[], None] | None = None


class _Budget:
    """A listener's open connections by phase, each phase oldest first (dicts keep their
    insertion order): which one makes room for a new connection, in O(1)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._phases: dict[str, dict[_Connection, None]] = {OPENING: {}, IDLE: {}, ACTIVE: {}}
        #: Connections closed to make room for a new one, since the start.
        self.closed_over_budget = 0

    def __len__(self) -> int:
        return sum(len(conns) for conns in self._phases.values())

    def connections(self) -> list[_Connection]:
        return [c for conns in self._phases.values() for c in conns]

    def add(self, conn: _Connection) -> None:
        self._phases[conn.phase][conn] = None

    def move(self, conn: _Connection, phase: str) -> None:
        """`conn` enters `phase` (as its newest); no-op for one closed already."""
        if conn in self._phases[conn.phase]:
            del self._phases[conn.phase][conn]
            conn.phase = phase
            self._phases[phase][conn] = None

    def discard(self, conn: _Connection) -> None:
        self._phases[conn.phase].pop(conn, None)

    def make_room(self) -> _Connection | None:
        """At the budget: take out and return the connection to close for a new one (the oldest
        opening one, else the one idle longest, else the oldest in a request); else None."""
        if len(self) < self.limit:
            return None
        for phase in (OPENING, IDLE, ACTIVE):
            conns = self._phases[phase]
            if conns:
                victim = next(iter(conns))
                del conns[victim]
                return victim
        return None


class _StampedProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, noting when the latest bytes reached this process (loop
    time): once a request is whole, how long it has waited to be served (a slow sender is cut
    off by its deadlines, not counted as waiting). With TLS, decrypted data arrives here too."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(reader, connected, loop=loop)
        self._now = loop.time
        self.arrived: float | None = None
        #: Bytes received so far, and (`track`) when each chunk came: (offset of its end, time).
        self.received = 0
        self._chunks: collections.deque[tuple[int, float]] | None = None

    def data_received(self, data: bytes) -> None:
        self.arrived = self._now()
        self.received += len(data)
        if self._chunks is not None:
            self._chunks.append((self.received, self.arrived))
        super().data_received(data)

    def track(self) -> None:
        """From now on, note each chunk's arrival: one connection carries many requests at
        once (HTTP/2), and each one's wait is from its own bytes, not the latest's."""
        self._chunks = collections.deque()
        if self.received and self.arrived is not None:
            self._chunks.append((self.received, self.arrived))

    def arrival_of(self, offset: int) -> float:
        """When the byte at `offset` (counted from the connection's first) arrived; the chunks
        before it are forgotten (bytes are read in order)."""
        chunks = self._chunks
        if chunks is not None:
            while len(chunks) > 1 and chunks[0][0] < offset:
                chunks.popleft()
            if chunks and chunks[0][0] >= offset:
                return chunks[0][1]
        return self.arrived if self.arrived is not None else self._now()


@dataclass(eq=False)
class _Listener:
    #: What the log and the metrics call it: "tls", "health".
    name: str
    sock: socket.socket
    app: WSGIApplication
    #: None: plain HTTP.
    contexts: Callable[[], ssl.SSLContext] | None
    limits: Limits
    budget: _Budget = field(init=False)
    #: When (loop time) the next warning of each kind may be logged (`warn_due`).
    quiet_until: dict[str, float] = field(default_factory=dict)
    #: Requests answered 429 for waiting past `queue_seconds`, since the start.
    shed: int = 0
    #: New TLS connections closed at once: their address had `max_handshakes` in progress.
    turned_away: int = 0
    #: Handshakes in progress, by peer address (an address with none is not kept).
    handshaking: dict[str, int] = field(init=False, default_factory=dict)
    #: Connections served, by protocol ("http/1.1", "h2"), since the start.
    served: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.budget = _Budget(self.limits.max_connections)

    def warn_due(self, kind: str, now: float) -> bool:
        """Whether a warning of `kind` may be logged now: at most one every
        WARN_EVERY_SECONDS per listener and kind (a flood would flood the log)."""
        if now < self.quiet_until.get(kind, 0.0):
            return False
        self.quiet_until[kind] = now + WARN_EVERY_SECONDS
        return True


@dataclass(frozen=True)
class ListenerStats:
    """One listener's connections now and closed for its budget so far (for /metrics)."""

    name: str
    open: int
    max_connections: int
    closed_over_budget: int
    shed: int = 0
    turned_away: int = 0
    #: Connections served since the start, by protocol: ("h2", 3), ("http/1.1", 1200).
    served: tuple[tuple[str, int], ...] = ()


#: The kernel's queue of connections not yet accepted, on every listener.
LISTEN_QUEUE = 1024

#: At most one over-budget warning per listener in this many seconds (a flood would flood the log).
WARN_EVERY_SECONDS = 60.0


class HttpsServer:
    """Serve `app` over TLS on a bound, listening socket until `stop()`.

    `contexts` is asked for the SSLContext of each new connection (`CertReloader.context`), so a
    rotated certificate is used from the next connection on. `add_plain` serves another app
    over plain HTTP on another socket (the health port) in the same loop, with limits of its
    own; with `app` None there is no TLS listener. `limits` are the TLS listener's, and their
    `graceful_seconds` the whole server's.
    """

    def __init__(
        self,
        app: WSGIApplication | None,
        contexts: Callable[[], ssl.SSLContext] | None,
        limits: Limits | None = None,
    ) -> None:
        self.app = app
        self.contexts = contexts
        self.limits = limits or Limits()
        self._listeners: list[_Listener] = []
        self._background: list[Background] = []
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Every connection's task, from accept until it is closed (a stop waits for them).
        self._tasks: set[asyncio.Task[None]] = set()
        #: Connections refused because the server was stopping.
        self.refused_connections = 0

    def add_plain(
        self,
        sock: socket.socket,
        app: WSGIApplication,
        limits: Limits = HEALTH_LIMITS,
        name: str = "health",
    ) -> None:
        """Also serve `app` over plain HTTP on `sock` (bound and listening, TCP or Unix), with
        its own connection budget and deadlines (by default the health port's)."""
        self._listeners.append(_Listener(name, sock, app, None, limits))

    def add_background(self, task: Background) -> None:
        """Run `task()` while serving; when it returns or fails, the server stops."""
        self._background.append(task)

    def stats(self) -> list[ListenerStats]:
        """Every listener's connections (read in the loop's thread, as the app is called)."""
        return [
            ListenerStats(
                lst.name,
                len(lst.budget),
                lst.budget.limit,
                lst.budget.closed_over_budget,
                lst.shed,
                lst.turned_away,
                tuple(sorted(lst.served.items())),
            )
            for lst in self._listeners
        ]

    # -- lifecycle -------------------------------------------------------------------------

    def run(self, sock: socket.socket | None, ready: Callable[[], None] | None = None) -> None:
        """Serve in this thread until `stop()`, or SIGTERM or SIGINT when this is the main
        thread (kubelet's SIGTERM, a person's Ctrl-C: both end in a graceful stop)."""
        asyncio.run(self.serve(sock, ready))

    async def serve(
        self, sock: socket.socket | None, ready: Callable[[], None] | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        handles_signals = threading.current_thread() is threading.main_thread()
        if handles_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._signalled, signum)
        if sock is not None:
            assert self.app is not None and self.contexts is not None
            self._listeners.insert(0, _Listener("tls", sock, self.app, self.contexts, self.limits))
        servers = [await self._start(listener) for listener in self._listeners]
        tasks = [asyncio.create_task(self._guard(b)) for b in self._background]
        if ready is not None:
            ready()
        try:
            await self._stopping.wait()
        finally:
            for task in tasks:
                task.cancel()
            for server in servers:
                server.close()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._drain()
            if handles_signals:
                # Stopping already: a second SIGTERM or SIGINT (a process group's, then the
                # master's) is a no-op from here. asyncio closes its wake-up pipe before it
                # removes its handlers, and a signal in between writes to a closed descriptor.
                signal.set_wakeup_fd(-1)

    async def _start(self, listener: _Listener) -> asyncio.AbstractServer:
        loop = asyncio.get_running_loop()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accepted(reader, writer, listener)

        def protocol() -> _StampedProtocol:  # asyncio.start_server's, stamped
            reader = asyncio.StreamReader(limit=listener.limits.max_header_bytes, loop=loop)
            return _StampedProtocol(reader, accepted, loop)

        batch = listener.limits.accept_batch
        server: asyncio.AbstractServer
        if listener.sock.family == socket.AF_UNIX:
            server = await loop.create_unix_server(protocol, sock=listener.sock, backlog=batch)
        else:
            server = await loop.create_server(protocol, sock=listener.sock, backlog=batch)
        # asyncio's backlog is both the accept batch and the kernel's queue of connections not
        # yet accepted: keep the batch, and a long queue, so that a burst waits in the queue
        # instead of having its SYNs dropped (each drop costs a client a second or more).
        listener.sock.listen(LISTEN_QUEUE)
        return server

    async def _guard(self, task: Background) -> None:
        try:
            await task()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a background task failed; stopping")
        assert self._stopping is not None
        self._stopping.set()

    def _signalled(self, signum: int) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        assert self._stopping is not None
        self._stopping.set()

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (up to `graceful_seconds`), close the
        rest. Safe from another thread."""
        loop, stopping = self._loop, self._stopping
        if loop is None or stopping is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(stopping.set)

    async def _drain(self) -> None:
        for listener in self._listeners:
            for conn in listener.budget.connections():
                if conn.phase != ACTIVE:
                    conn.task.cancel()  # waiting for a request that is not coming
                elif conn.on_stop is not None:
                    conn.on_stop()
        pending = list(self._tasks)  # with the ones closing already
        if pending:
            _done, late = await asyncio.wait(pending, timeout=self.limits.graceful_seconds)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)

    # -- one connection ---------------------------------------------------------------------

    async def _accepted(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: _Listener
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        stopping = self._stopping
        if stopping is not None and stopping.is_set():
            self.refused_connections += 1
            writer.transport.abort()
            return
        address = _address(writer.get_extra_info("peername"))
        if self._turn_away(listener, address):
            writer.transport.abort()
            return
        victim = listener.budget.make_room()
        if victim is not None:
            self._close_over_budget(listener, victim)
        conn = _Connection(task, writer)
        listener.budget.add(conn)
        self._tasks.add(task)
        try:
            await self._connection(conn, reader, writer, listener)
        except (ClosedError, ConnectionError, TimeoutError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection failed")
        finally:
            listener.budget.discard(conn)
            await self._close(writer)
            self._tasks.discard(task)

    def _turn_away(self, listener: _Listener, address: str) -> bool:
        """Whether to close a new TLS connection at once, before its handshake, because its
        address has `max_handshakes` in progress: its CPU would come out of the requests of
        the connections the worker has, whose callers then open more. The caller sees the
        connection closed at once and, for the API server, applies the failurePolicy."""
        limit = listener.limits.max_handshakes
        if listener.contexts is None or limit is None:
            return False
        if listener.handshaking.get(address, 0) < limit:
            return False
        listener.turned_away += 1
        assert self._loop is not None
        if listener.warn_due("turned away", self._loop.time()):
            log.warning(
                f"the {listener.name} listener has {limit} TLS handshakes in progress from "
                f"{address} (--max-handshakes): closing its new connections until they end. "
                "A caller opens connection after connection when its calls wait: if it is the "
                "API server, the webhook is behind; add workers or replicas "
                "(prune_gate_webhook_connections_turned_away_total)",
                extra={
                    "listener": listener.name,
                    "peer": address,
                    "turned_away_total": listener.turned_away,
                },
            )
        return True

    def _close_over_budget(self, listener: _Listener, victim: _Connection) -> None:
        """Close `victim` (already out of the budget) at once, to make room for a new one."""
        victim.writer.transport.abort()
        victim.task.cancel()
        budget = listener.budget
        budget.closed_over_budget += 1
        assert self._loop is not None
        if listener.warn_due("over budget", self._loop.time()):
            log.warning(
                f"the {listener.name} listener is at its budget of {budget.limit} connections: "
                f"closing its oldest {victim.phase} connection for each new one. Something holds "
                "connections open without finishing requests; if it is not a burst of the API "
                "server's, find who (the pod's connections), restrict who may reach this port "
                "(the chart's networkPolicy), or raise the budget (--max-connections, "
                "--health-max-connections)",
                extra={
                    "listener": listener.name,
                    "max_connections": budget.limit,
                    "closed_over_budget_total": budget.closed_over_budget,
                },
            )

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Close cleanly (what was written is sent, then TLS close_notify); abort when that
        cannot be done quickly, or when the task was cancelled (a stop's deadline, a listener
        making room)."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            writer.transport.abort()
            return
        try:
            writer.close()
            async with asyncio.timeout(1.0):
                await writer.wait_closed()
        except (TimeoutError, ConnectionError, ssl.SSLError, OSError):
            writer.transport.abort()
        except asyncio.CancelledError:
            # The connection's task ends here anyway: a cancel (the end of a stop) has nothing
            # left to interrupt, and a task that ends cancelled is logged by asyncio's streams.
            writer.transport.abort()

    async def _connection(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: _Listener,
    ) -> None:
        limits = listener.limits
        budget = listener.budget
        peer = writer.get_extra_info("peername")
        protocol = writer.transport.get_protocol()
        stamped = protocol if isinstance(protocol, _StampedProtocol) else None
        loop = asyncio.get_running_loop()
        if listener.contexts is not None:
            address = _address(peer)
            counts = listener.handshaking
            counts[address] = counts.get(address, 0) + 1
            try:
                async with asyncio.timeout(limits.handshake_seconds):
                    await writer.start_tls(listener.contexts())
            finally:
                counts[address] -= 1
                if not counts[address]:
                    del counts[address]
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
                listener.served["h2"] = listener.served.get("h2", 0) + 1
                await self._http2(conn, reader, writer, listener, stamped)
                return
        listener.served["http/1.1"] = listener.served.get("http/1.1", 0) + 1
        h11_conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        first = True
        while True:
            try:
                req = await self._read_request(
                    h11_conn,
                    reader,
                    limits,
                    idle=not first,
                    headed=lambda: budget.move(conn, ACTIVE),
                )
            except _MalformedError as exc:
                await self._refuse(h11_conn, writer, exc, limits)
                await linger(reader, limits)
                return
            first = False
            now = loop.time()
            arrived = now if stamped is None or stamped.arrived is None else stamped.arrived
            status, headers, body = self._answer(listener, req, peer, arrived)
            close = self._stopping is not None and self._stopping.is_set()
            if req.unread_length is not None or h11_conn.their_state is h11.MUST_CLOSE:
                close = True  # the unread body is still on the wire
            if close:
                headers.append(("Connection", "close"))
            response = h11.Response(status_code=status, headers=headers, reason=_phrase(status))
            out = h11_conn.send(response) or b""
            out += h11_conn.send(h11.Data(data=body)) or b""
            out += h11_conn.send(h11.EndOfMessage()) or b""
            writer.write(out)
            async with asyncio.timeout(limits.request_seconds):
                await writer.drain()
            budget.move(conn, IDLE)
            if req.unread_length is not None:
                await linger(reader, limits)
            if close or h11_conn.our_state is not h11.DONE or h11_conn.their_state is not h11.DONE:
                return
            h11_conn.start_next_cycle()

    async def _http2(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: _Listener,
        stamped: _StampedProtocol | None,
    ) -> None:
        """Serve an HTTP/2 connection (`webhook.http2`) with this listener's limits."""
        loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        if stamped is not None:
            stamped.track()
        # asyncio keeps this private: the reader pauses its transport past twice its limit.
        reader._limit = read_buffer(listener.limits)  # type: ignore[attr-defined]
        session = Http2Session(
            reader,
            writer,
            listener.limits,
            respond=lambda req, arrived: self._answer(listener, req, peer, arrived),
            arrival=stamped.arrival_of if stamped is not None else lambda _offset: loop.time(),
            phase=lambda phase: listener.budget.move(conn, phase),
            stopping=lambda: self._stopping is not None and self._stopping.is_set(),
            first_deadline=loop.time() + listener.limits.header_seconds,
        )
        conn.on_stop = session.announce_stop
        await session.run()

    def _answer(
        self, listener: _Listener, req: Request, peer: Any, arrived: float
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """The app's answer to `req`, whose last bytes arrived at `arrived` (loop time); a 429
        without calling it when that is over the listener's `queue_seconds` ago."""
        assert self._loop is not None
        waited = self._loop.time() - arrived
        queue = listener.limits.queue_seconds
        if queue is not None and waited > queue:
            return self._shed(listener, waited)
        return self._call_app(listener, req, peer)

    def _shed(self, listener: _Listener, waited: float) -> tuple[int, list[tuple[str, str]], bytes]:
        """The 429 of a request that waited too long, answered without calling the app."""
        listener.shed += 1
        limit = listener.limits.queue_seconds
        assert self._loop is not None
        if listener.warn_due("shed", self._loop.time()):
            log.warning(
                f"the {listener.name} listener is behind: answering 429 to requests that waited "
                f"over {limit:g} s (--queue-timeout). The API server applies the webhook's "
                "failurePolicy to each. If this lasts, add workers or replicas (the chart's "
                "workers, replicaCount) or find what calls this often "
                "(prune_gate_webhook_requests_shed_total)",
                extra={
                    "listener": listener.name,
                    "waited_seconds": round(waited, 3),
                    "shed_total": listener.shed,
                },
            )
        body = json.dumps(
            {
                "error": "overloaded",
                "reason": f"this request waited {waited:.2f} s in the webhook, over its "
                f"--queue-timeout of {limit:g} s: the webhook is behind; retry",
            }
        ).encode()
        # No Retry-After: client-go, which the API server calls webhooks with, would wait and
        # send it again, to a worker that is behind, until the webhook's timeout.
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        return 429, headers, body

    async def _refuse(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        exc: _MalformedError,
        limits: Limits,
    ) -> None:
        """Answer a request h11 could not parse, as JSON like every other answer, and close."""
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = json.dumps({"error": "bad request", "reason": f"malformed HTTP: {exc}"}).encode()
        phrase = HTTPStatus(exc.status).phrase
        out = (
            f"HTTP/1.1 {exc.status} {phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        writer.write(out)
        async with asyncio.timeout(limits.request_seconds):
            await writer.drain()

    async def _read_request(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        limits: Limits,
        idle: bool,
        headed: Callable[[], None],
    ) -> Request:
        """The next request: waits up to `idle_seconds` for the first byte of a kept-alive
        connection's next one, then `header_seconds` for the whole head, then (`headed` is
        called) `request_seconds` for the body."""
        if idle and not self._has_buffered(conn):
            async with asyncio.timeout(limits.idle_seconds):
                data = await reader.read(65536)
            if not data:
                raise ClosedError
            conn.receive_data(data)
        async with asyncio.timeout(limits.header_seconds) as deadline:

            def head_done() -> None:
                deadline.reschedule(asyncio.get_running_loop().time() + limits.request_seconds)
                headed()

            try:
                return await self._parse(conn, reader, limits, head_done)
            except h11.RemoteProtocolError as exc:
                raise _MalformedError(exc.error_status_hint, str(exc)) from None

    @staticmethod
    def _has_buffered(conn: h11.Connection) -> bool:
        return bool(conn.trailing_data[0])

    async def _parse(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        limits: Limits,
        head_done: Callable[[], None],
    ) -> Request:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    raise ClosedError
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                head = event
                size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                if size > limits.max_header_bytes:  # h11 bounds only a head in pieces
                    raise _MalformedError(
                        431, f"request line and headers over {limits.max_header_bytes} bytes"
                    )
                head_done()
                size = 0
                length = content_length(event.headers)
                if length is not None and length > limits.max_body_bytes:
                    return Request(
                        event.method.decode("ascii"),
                        event.target.decode("ascii", "replace"),
                        list(event.headers),
                        b"",
                        unread_length=length,
                    )
            elif isinstance(event, h11.Data):
                size += len(event.data)
                chunks.append(event.data)
                if size > limits.max_body_bytes:
                    assert head is not None
                    return Request(
                        head.method.decode("ascii"),
                        head.target.decode("ascii", "replace"),
                        [(k, v) for k, v in head.headers if k != b"content-length"],
                        b"".join(chunks)[: limits.max_body_bytes],
                        unread_length=size,
                    )
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Request(
                    head.method.decode("ascii"),
                    head.target.decode("ascii", "replace"),
                    list(head.headers),
                    b"".join(chunks),
                )
            elif isinstance(event, h11.ConnectionClosed):
                raise ClosedError

    # -- the app ----------------------------------------------------------------------------

    def _call_app(
        self, listener: _Listener, req: Request, peer: Any
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        environ = _environ(req, peer, tls=listener.contexts is not None)
        answer: dict[str, Any] = {}

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            answer["status"] = int(status.split(" ", 1)[0])
            answer["headers"] = headers
            return lambda _data: None

        try:
            result: Iterable[bytes] = listener.app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception:
            log.exception("the app failed", extra={"path": environ.get("PATH_INFO")})
            return 500, [("Content-Type", "application/json")], _INTERNAL
        framing = ("content-length", "connection", "transfer-encoding")  # the server's to say
        headers = [(k, v) for k, v in answer["headers"] if k.lower() not in framing]
        headers.append(("Content-Length", str(len(body))))
        return answer["status"], headers, body


def _address(peer: Any) -> str:
    """The address of a TCP peer (what `getpeername` gives), "" for a Unix socket's."""
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _phrase(status: int) -> bytes:
    """The reason phrase of `status` (`OK`, `Forbidden`), or none for a code without one."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_INTERNAL = b'{"error": "internal error", "reason": "unhandled error, see the log"}\n'


def _environ(req: Request, peer: Any, tls: bool) -> dict[str, Any]:
    path, _, query = req.target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": req.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "prune-gate",
        "SERVER_PORT": "443" if tls else "80",
        "SERVER_PROTOCOL": req.protocol,
        "REMOTE_ADDR": str(peer[0]) if isinstance(peer, tuple) and peer else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https" if tls else "http",
        "wsgi.input": io.BytesIO(req.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for key, value in req.headers:
        name = key.decode("latin-1").upper().replace("-", "_")
        text = value.decode("latin-1")
        if name == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = text
        elif name in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
            continue  # the body is read whole (de-chunked): its length is said below
        else:
            wsgi_name = f"HTTP_{name}"
            environ[wsgi_name] = f"{environ[wsgi_name]},{text}" if wsgi_name in environ else text
    if req.unread_length is not None:
        environ["CONTENT_LENGTH"] = str(req.unread_length)
    else:
        environ["CONTENT_LENGTH"] = str(len(req.body))
    return environ
