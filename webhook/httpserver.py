"""The HTTP server of the webhook: one asyncio event loop, the WSGI app called inline.

It serves /validate over TLS and, on listeners of their own, the plain-HTTP health paths
(`webhook.serve.health_only`); a pre-forking master (`webhook.workers`) runs it for its
aggregated health port too, with no TLS listener at all.

Why not gunicorn's threaded worker, which served it before (bench/bench_load.py measures it):
it runs the TLS handshake and every read in a worker thread, so a client that connects and sends
nothing pins a thread until the worker's timeout, and as many idle clients as threads stall every
API-server call; and its threads take turns on one interpreter lock, so more threads bought no
throughput. Here the handshake and every read are non-blocking in the loop: an idle or slow
client costs a socket and a few KB, and every phase has a deadline (handshake, request, idle
keep-alive) after which it is closed. The app is called inline: a decision is well under a
millisecond of CPU work on the in-memory cache, with no I/O to wait for, so handing it to a thread
would only add the lock's hand-off.

HTTP/1.1 parsing is h11's (a strict, sans-I/O parser: no request smuggling through a lenient
hand-written one). Bodies are bounded before they are read: a Content-Length over the limit is
passed on unread (the app answers 413), a chunked body stops being read one byte past it. The
app gets the body whole, with its length, however it was framed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from wsgiref.types import WSGIApplication

import h11

log = logging.getLogger("prune_gate.webhook.server")


@dataclass(frozen=True)
class Limits:
    """What one connection may take, in time and bytes."""

    #: From accept to a finished TLS handshake.
    handshake_seconds: float = 10.0
    #: From a request's first byte to its last (headers and body): a slow sender is cut off.
    request_seconds: float = 10.0
    #: How long a kept-alive connection may wait for its next request. The API server keeps its
    #: connections to webhooks for reuse; 30 s is gunicorn's keepalive that it was served with.
    idle_seconds: float = 30.0
    #: Open connections beyond this are closed at accept (each costs a file descriptor).
    max_connections: int = 1024
    #: Request line and headers together.
    max_header_bytes: int = 16 * 1024
    #: Body bytes read at most; one past the app's own limit, so the app can tell "too large".
    max_body_bytes: int = 3 * 1024 * 1024 + 1
    #: After an answer that leaves a body unread, how long and how much more is read and
    #: dropped before the connection closes (see `HttpsServer._linger`).
    linger_seconds: float = 2.0
    linger_bytes: int = 4 * 1024 * 1024
    #: How long a stop waits for requests in flight before closing their connections.
    graceful_seconds: float = 10.0


class _ClosedError(Exception):
    """The connection is over (peer gone, deadline passed)."""


class _MalformedError(Exception):
    """Not HTTP/1.1 that h11 accepts: answered with its status (400, 431) and closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class _Request:
    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    #: The body was not read: its declared length is over the limit.
    unread_length: int | None = None


#: A coroutine run beside the listeners for as long as the server serves (a supervisor, a
#: parent-death check); its end or failure stops the server.
Background = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class _Listener:
    sock: socket.socket
    app: WSGIApplication
    #: None: plain HTTP.
    contexts: Callable[[], ssl.SSLContext] | None


class HttpsServer:
    """Serve `app` over TLS on a bound, listening socket until `stop()`.

    `contexts` is asked for the SSLContext of each new connection (`CertReloader.context`), so a
    rotated certificate is used from the next connection on. `add_plain` serves another app
    over plain HTTP on another socket (the health port) in the same loop; with `app` None there
    is no TLS listener.
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
        self._plain: list[tuple[socket.socket, WSGIApplication]] = []
        self._background: list[Background] = []
        self._connections: dict[asyncio.Task[None], bool] = {}  # task -> busy with a request
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.refused_connections = 0

    def add_plain(self, sock: socket.socket, app: WSGIApplication) -> None:
        """Also serve `app` over plain HTTP on `sock` (bound and listening, TCP or Unix)."""
        self._plain.append((sock, app))

    def add_background(self, task: Background) -> None:
        """Run `task()` while serving; when it returns or fails, the server stops."""
        self._background.append(task)

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
        listeners = [_Listener(s, app, None) for s, app in self._plain]
        if sock is not None:
            assert self.app is not None and self.contexts is not None
            listeners.insert(0, _Listener(sock, self.app, self.contexts))
        servers = [await self._start(listener) for listener in listeners]
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
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accepted(reader, writer, listener)

        start = (
            asyncio.start_unix_server
            if listener.sock.family == socket.AF_UNIX
            else asyncio.start_server
        )
        return await start(
            accepted, sock=listener.sock, limit=self.limits.max_header_bytes, backlog=1024
        )

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
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()  # waiting for a request that is not coming
        pending = list(self._connections)
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
        if len(self._connections) >= self.limits.max_connections or (
            stopping is not None and stopping.is_set()
        ):
            self.refused_connections += 1
            writer.transport.abort()
            return
        self._connections[task] = False
        try:
            await self._connection(task, reader, writer, listener)
        except (_ClosedError, ConnectionError, TimeoutError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection failed")
        finally:
            del self._connections[task]
            await self._close(writer)

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Close cleanly (what was written is sent, then TLS close_notify); abort when that
        cannot be done quickly, or when the task was cancelled (a stop's deadline)."""
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
            writer.transport.abort()
            raise

    async def _connection(
        self,
        task: asyncio.Task[None],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: _Listener,
    ) -> None:
        peer = writer.get_extra_info("peername")
        if listener.contexts is not None:
            async with asyncio.timeout(self.limits.handshake_seconds):
                await writer.start_tls(listener.contexts())
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        first = True
        while True:
            try:
                req = await self._read_request(conn, reader, idle=not first)
            except _MalformedError as exc:
                await self._refuse(conn, writer, exc)
                await self._linger(reader)
                return
            first = False
            self._connections[task] = True
            status, headers, body = self._call_app(listener, req, peer)
            close = self._stopping is not None and self._stopping.is_set()
            if req.unread_length is not None or conn.their_state is h11.MUST_CLOSE:
                close = True  # the unread body is still on the wire
            if close:
                headers.append(("Connection", "close"))
            response = h11.Response(status_code=status, headers=headers, reason=_phrase(status))
            out = conn.send(response) or b""
            out += conn.send(h11.Data(data=body)) or b""
            out += conn.send(h11.EndOfMessage()) or b""
            writer.write(out)
            async with asyncio.timeout(self.limits.request_seconds):
                await writer.drain()
            self._connections[task] = False
            if req.unread_length is not None:
                await self._linger(reader)
            if close or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _linger(self, reader: asyncio.StreamReader) -> None:
        """Read and drop what the client still sends, briefly, before closing: closing a socket
        with unread bytes resets it, and a reset can destroy the answer just sent (the 413 of
        a body still arriving) before the client reads it."""
        dropped = 0
        with contextlib.suppress(TimeoutError, ConnectionError, ssl.SSLError, OSError):
            async with asyncio.timeout(self.limits.linger_seconds):
                while dropped < self.limits.linger_bytes:
                    data = await reader.read(65536)
                    if not data:
                        return
                    dropped += len(data)

    async def _refuse(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, exc: _MalformedError
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
        async with asyncio.timeout(self.limits.request_seconds):
            await writer.drain()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader, idle: bool
    ) -> _Request:
        """The next request; waits up to `idle_seconds` for its first byte, then
        `request_seconds` for the rest."""
        limits = self.limits
        if idle and not self._has_buffered(conn):
            async with asyncio.timeout(limits.idle_seconds):
                data = await reader.read(65536)
            if not data:
                raise _ClosedError
            conn.receive_data(data)
        async with asyncio.timeout(limits.request_seconds):
            try:
                return await self._parse(conn, reader)
            except h11.RemoteProtocolError as exc:
                raise _MalformedError(exc.error_status_hint, str(exc)) from None

    @staticmethod
    def _has_buffered(conn: h11.Connection) -> bool:
        return bool(conn.trailing_data[0])

    async def _parse(self, conn: h11.Connection, reader: asyncio.StreamReader) -> _Request:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    raise _ClosedError
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                head = event
                size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                if size > self.limits.max_header_bytes:  # h11 bounds only a head in pieces
                    raise _MalformedError(
                        431, f"request line and headers over {self.limits.max_header_bytes} bytes"
                    )
                size = 0
                length = _content_length(event.headers)
                if length is not None and length > self.limits.max_body_bytes:
                    return _Request(
                        event.method.decode("ascii"),
                        event.target.decode("ascii", "replace"),
                        list(event.headers),
                        b"",
                        unread_length=length,
                    )
            elif isinstance(event, h11.Data):
                size += len(event.data)
                chunks.append(event.data)
                if size > self.limits.max_body_bytes:
                    assert head is not None
                    return _Request(
                        head.method.decode("ascii"),
                        head.target.decode("ascii", "replace"),
                        [(k, v) for k, v in head.headers if k != b"content-length"],
                        b"".join(chunks)[: self.limits.max_body_bytes],
                        unread_length=size,
                    )
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return _Request(
                    head.method.decode("ascii"),
                    head.target.decode("ascii", "replace"),
                    list(head.headers),
                    b"".join(chunks),
                )
            elif isinstance(event, h11.ConnectionClosed):
                raise _ClosedError

    # -- the app ----------------------------------------------------------------------------

    def _call_app(
        self, listener: _Listener, req: _Request, peer: Any
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


def _phrase(status: int) -> bytes:
    """The reason phrase of `status` (`OK`, `Forbidden`), or none for a code without one."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_INTERNAL = b'{"error": "internal error", "reason": "unhandled error, see the log"}\n'


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    for key, value in headers:
        if key == b"content-length":
            return int(value)  # h11 has checked it is a number
    return None


def _environ(req: _Request, peer: Any, tls: bool) -> dict[str, Any]:
    path, _, query = req.target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": req.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "prune-gate",
        "SERVER_PORT": "443" if tls else "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
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
