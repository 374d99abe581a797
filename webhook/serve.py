"""Serve the app with gunicorn over TLS, picking up rotated certificate files without a restart.

gunicorn is the production WSGI server (Flask's own server is for development). One worker
process with threads: the watch cache lives in that worker, built after the fork (threads do not
survive a fork) and stopped when the worker exits. Scale out with replicas, not workers: every
replica keeps its own cache from the API server, and no replica holds state of its own.

Rotation: gunicorn wraps every accepted connection with the SSLContext its `ssl_context` hook
returns. The hook returns `CertReloader.context()`, which reads the certificate and key files (a
few KB) and loads a new context when either changed (a failed load, e.g. a half-rotated pair,
keeps the old context and is logged). cert-manager and kubelet secret updates replace the files
atomically, so new connections get the new certificate and established ones keep theirs.

Client certificates: with a client CA (`--client-ca`) the context requires every caller to present
a certificate that CA signed (the API server's, from its AdmissionConfiguration kubeconfig); a
caller without one fails the TLS handshake and never reaches /validate. The CA file is reloaded
with the serving pair. kubelet probes and Prometheus, which have no such certificate, use the
plain-HTTP health listener (`HealthServer`), which serves only /healthz, /readyz and /metrics.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from cryptography import x509
from flask import Flask
from gunicorn.app.base import BaseApplication

from webhook.tls import CertificateError, check_client_ca, check_pair, validity_problem

log = logging.getLogger("prune_gate.webhook.serve")


_JSON_HANDLER = {
    "class": "logging.StreamHandler",
    "formatter": "json",
    "stream": "ext://sys.stderr",
}
#: gunicorn's own log lines in the same JSON shape as ours (`webhook.jsonlog`).
LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "webhook.jsonlog.JsonFormatter"}},
    "handlers": {"console": _JSON_HANDLER, "error_console": _JSON_HANDLER},
    "root": {"level": "INFO", "handlers": ["console"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": False},
    },
}


#: How often files that were rejected are tried again (a certificate not valid yet becomes valid).
RETRY_SECONDS = 10.0


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CertReloader:
    """An SSLContext for a certificate and key file pair (and the client CA, when one is given),
    reloaded when the files change.

    The first load raises `CertificateError` (naming the file) instead of serving without a
    certificate or with an expired one. A rejected reload (garbage, a mismatched key, an expired
    or not yet valid certificate) keeps the loaded context, is logged, and makes `problem()` say
    why until a good pair is in place: the rotation is broken and the old certificate runs out,
    so /readyz answers 503 with that reason rather than 200.
    """

    def __init__(
        self,
        cert_file: str | Path,
        key_file: str | Path,
        now: Callable[[], dt.datetime] = _utcnow,
        client_ca_file: str | Path | None = None,
    ) -> None:
        self.cert_file = str(cert_file)
        self.key_file = str(key_file)
        self.client_ca_file = str(client_ca_file) if client_ca_file is not None else None
        self.now = now
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._rejected: str | None = None
        self._rejected_stamp = b""
        self._rejected_at = 0.0
        self._context, self._cert = self._load()
        self.reloads = 0

    def _files_stamp(self) -> bytes:
        """A digest of both files' contents: a rewrite within one clock tick, or one that keeps
        the size, still counts as a change (mtime and size would miss it)."""
        digest = hashlib.sha256()
        files = [(self.cert_file, "serving certificate"), (self.key_file, "private key")]
        if self.client_ca_file is not None:
            files.append((self.client_ca_file, "client CA"))
        for path, what in files:
            try:
                digest.update(Path(path).read_bytes())
            except OSError as exc:
                raise CertificateError(
                    f"cannot read the {what} {path}: {exc.strerror or exc}"
                ) from None
            digest.update(b"\0")
        return digest.digest()

    def _load(self) -> tuple[ssl.SSLContext, x509.Certificate]:
        cert = check_pair(self.cert_file, self.key_file, self.now())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise CertificateError(
                f"cannot load the certificate {self.cert_file} with the key {self.key_file}: {exc}"
            ) from None
        if self.client_ca_file is not None:
            check_client_ca(self.client_ca_file)
            try:
                ctx.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise CertificateError(
                    f"cannot load the client CA {self.client_ca_file}: {exc}"
                ) from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx, cert

    def context(self) -> ssl.SSLContext:
        """The current context; reloads first when the files changed since the last load."""
        try:
            stamp = self._files_stamp()
        except CertificateError as exc:
            self._rejected = str(exc)
            log.error("cannot read certificate files, keeping the loaded ones", extra={"err": exc})
            return self._context
        if stamp == self._stamp:
            self._rejected = None
            return self._context
        if stamp == self._rejected_stamp and time.monotonic() - self._rejected_at < RETRY_SECONDS:
            return self._context  # the same rejected files: not again on every connection
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._context, self._cert = self._load()
                except CertificateError as exc:
                    self._rejected, self._rejected_stamp = str(exc), stamp
                    self._rejected_at = time.monotonic()
                    log.error(
                        "cannot load rotated certificate, keeping the previous one",
                        extra={"cert": self.cert_file, "error": str(exc)},
                    )
                    return self._context
                self._stamp = stamp
                self._rejected = None
                self.reloads += 1
                log.info(
                    "serving certificate reloaded",
                    extra={"cert": self.cert_file, "notAfter": self._cert.not_valid_after_utc},
                )
        return self._context

    def problem(self) -> str | None:
        """Why serving is not healthy (a rejected rotation, or the served certificate is no
        longer valid), or None. Looks at the files first, as a new connection would."""
        self.context()
        if self._rejected is not None:
            return f"certificate rotation rejected, serving the previous one: {self._rejected}"
        return validity_problem(self._cert, self.cert_file, self.now())

    def not_after(self) -> float:
        """When the served certificate expires, in Unix seconds (for the expiry gauge)."""
        return self._cert.not_valid_after_utc.timestamp()


class WebhookServer(BaseApplication):  # type: ignore[misc]
    """gunicorn running one app, built in the worker by `app_factory`."""

    def __init__(
        self,
        app_factory: Callable[[], Flask],
        listen: str,
        reloader: CertReloader,
        threads: int = 8,
        on_worker_exit: Callable[[], None] | None = None,
        timeout: int = 30,
    ) -> None:
        self.app_factory = app_factory
        self.listen = listen
        self.reloader = reloader
        self.threads = threads
        self.on_worker_exit = on_worker_exit
        self.timeout = timeout
        super().__init__()

    def load_config(self) -> None:
        reloader = self.reloader
        on_exit = self.on_worker_exit

        def ssl_context(_config: Any, _default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
            return reloader.context()

        def worker_exit(_server: Any, _worker: Any) -> None:
            if on_exit is not None:
                on_exit()

        settings: dict[str, Any] = {
            "bind": [self.listen],
            "workers": 1,
            "worker_class": "gthread",
            "threads": self.threads,
            "certfile": reloader.cert_file,
            "keyfile": reloader.key_file,
            "ssl_context": ssl_context,
            "worker_exit": worker_exit,
            "timeout": self.timeout,
            "graceful_timeout": 10,
            "keepalive": 30,
            "accesslog": None,
            "loglevel": "info",
            "logconfig_dict": LOG_CONFIG,
            "proc_name": "prune-gate-webhook",
            # gunicorn's control socket is a fixed path under $HOME: state on the host that two
            # servers (replicas, tests) would fight over, and nothing here needs it.
            "control_socket_disable": True,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self.app_factory()


#: What the plain-HTTP health listener serves: nothing that decides or reads a review.
HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds are no news; gunicorn's access log is off too."""


class _HealthWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host's FQDN up in DNS; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()


class _HealthWSGIServer6(_HealthWSGIServer):
    address_family = socket.AF_INET6


def health_only(app: WSGIApplication) -> WSGIApplication:
    """`app` answering only HEALTH_PATHS; anything else (/validate above all) is a JSON 404."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in HEALTH_PATHS:
            return app(environ, start_response)
        body = json.dumps(
            {
                "error": "not found",
                "reason": f"{path}: the health port serves only "
                f"{', '.join(sorted(HEALTH_PATHS))}; /validate is on the TLS port",
            }
        ).encode()
        start_response(
            "404 Not Found",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return wsgi


class HealthServer:
    """Plain HTTP for kubelet probes and Prometheus, which have no client certificate once the
    TLS port requires one (`--client-ca`): /healthz, /readyz and /metrics of the same app.

    Bound in gunicorn's master, so a busy port fails at start (OSError) and not in a worker;
    served by a thread in the worker, where the app and its cache live.
    """

    def __init__(self, host: str, port: int) -> None:
        server_class = _HealthWSGIServer6 if ":" in host else _HealthWSGIServer
        self._server = server_class((host, port), _QuietHandler)
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    def start(self, app: WSGIApplication) -> None:
        """Serve `app`'s health paths from a thread (in the worker)."""
        self._server.set_app(health_only(app))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health", daemon=True
        )
        self._thread.start()
        log.info("health listener started", extra={"url": f"http://{self.host}:{self.port}"})

    def stop(self) -> None:
        """End the serving thread (when this process started one) and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()


def host_of(listen: str) -> tuple[str, int]:
    """`127.0.0.1:8443` -> ("127.0.0.1", 8443); `[::1]:8443` -> ("::1", 8443)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, like 127.0.0.1:8443")
    return host.strip("[]"), int(port)


def check_can_listen(host: str, port: int) -> None:
    """Raise OSError when host:port cannot be bound (taken, or not an address of this host), so
    that is a clear error before anything is registered, not gunicorn's retries and a log line.
    gunicorn binds it again just after (both with SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        probe.listen()


def answers_tls(host: str, port: int, ca_pem: bytes, timeout: float = 2.0) -> bool:
    """Whether a TLS server with a certificate from `ca_pem` answers on host:port: a completed
    handshake (or a TLS alert, as when the server requires a client certificate) proves that
    gunicorn's worker is taking connections, since it does the handshake; a refused, reset or
    silent port does not, nor does a certificate from another CA."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    context.check_hostname = False  # the listen address need not be a name in the certificate
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw) as conn,
        ):
            conn.getpeercert()
    except ssl.SSLCertVerificationError:
        return False
    except ssl.SSLError:
        return True
    except OSError:
        return False
    return True
