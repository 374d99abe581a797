"""What serving needs around the HTTPS server (`webhook.httpserver`): the TLS context, reloaded
when the certificate files rotate; the listening socket; the plain-HTTP health listener; and the
check that the port answers TLS.

Rotation: the server asks `CertReloader.context()` for the context of every new connection. It
reads the certificate and key files (a few KB) and loads a new context when either changed (a
failed load, e.g. a half-rotated pair, keeps the old context and is logged). cert-manager and
kubelet secret updates replace the files atomically, so new connections get the new certificate
and established ones keep theirs.

Client certificates: with a client CA (`--client-ca`) the context requires every caller to present
a certificate that CA signed (the API server's, from its AdmissionConfiguration kubeconfig); a
caller without one fails the TLS handshake and never reaches /validate. The CA file is reloaded
with the serving pair. kubelet probes and Prometheus, which have no such certificate, use the
plain-HTTP health listener (`health_only` on --health-port, served by the same event loop), which
serves only /healthz, /readyz and /metrics.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from cryptography import x509

from webhook.tls import CertificateError, check_client_ca, check_pair, validity_problem

log = logging.getLogger("prune_gate.webhook.serve")


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
        alpn: Sequence[str] = ("http/1.1",),
    ) -> None:
        self.cert_file = str(cert_file)
        #: What the context offers in ALPN (`webhook.http2.ALPN_PROTOCOLS` for HTTP/2 too).
        self.alpn = tuple(alpn)
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
        ctx.set_alpn_protocols(list(self.alpn))
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


#: What the plain-HTTP health listener serves: nothing that decides or reads a review.
HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


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


#: glibc's malloc settings for the webhook's processes, as the environment the image
#: (Dockerfile `ENV`) and the chart (the Deployment's `env`) set; tests check both say this.
#:
#: Each TLS connection gets a 256 KiB read buffer (asyncio's), allocated with mmap; glibc's
#: default raises its mmap threshold after the first such buffer is freed, so later ones come
#: from the heap, which a burst of connections grows for good. A fixed threshold keeps the
#: default's 128 KiB and turns that adjustment off, so a closed connection's buffer goes back to
#: the system at once. Measured (glibc 2.36, a TLS server of `webhook.httpserver`, 400
#: connections opened then closed): RSS +113 MiB while they are open; 2 s after they close, +112
#: MiB kept without it, +12 MiB with it (the same as the `mallopt(M_MMAP_THRESHOLD)` call it
#: replaces). glibc reads it at process start (an alias of the tunable
#: `glibc.malloc.mmap_threshold`), so it is the environment's to say, not the program's.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def raise_descriptor_limit(need: int) -> None:
    """Let this process open `need` file descriptors: raise its soft limit up to the hard one
    when it is lower. Every listener's budget bounds its own connections only while the
    process has descriptors for all of them: were they to run out, an accept on any listener
    would fail (EMFILE), and the health port's connections could keep the TLS port from taking
    the API server's. OSError, naming the fix, when even the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise OSError(
            f"the connection budgets (--max-connections, --health-max-connections) need about "
            f"{need} file descriptors, and this process may open {hard} (its hard nofile "
            "limit): lower the budgets, or raise the limit of the container runtime or shell"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    log.info("file descriptor limit raised", extra={"from": soft, "to": need})


def host_of(listen: str) -> tuple[str, int]:
    """`127.0.0.1:8443` -> ("127.0.0.1", 8443); `[::1]:8443` -> ("::1", 8443)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, like 127.0.0.1:8443")
    return host.strip("[]"), int(port)


def listen_socket(host: str, port: int) -> socket.socket:
    """The bound, listening TCP socket of host:port (port 0: any free one). OSError when it
    cannot be bound (taken, or not an address of this host): a clear error before anything is
    registered or started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def answers_tls(
    host: str, port: int, ca_pem: bytes, timeout: float = 2.0, server_name: str | None = None
) -> bool:
    """Whether a TLS server with a certificate from `ca_pem` (for `server_name`, when given, as
    the API server checks it) answers on host:port: a completed handshake (or a TLS alert after
    the certificate was verified, as when the server requires a client certificate) proves that
    the server's event loop is taking connections, since it does the handshake; a refused, reset
    or silent port does not, nor does a certificate from another CA or for another name."""
    try:
        context = ssl.create_default_context(cadata=ca_pem.decode())
    except (ssl.SSLError, ValueError, UnicodeDecodeError):
        return False
    # Without a name, the listen address need not be a name in the certificate.
    context.check_hostname = server_name is not None
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=server_name) as conn,
        ):
            conn.getpeercert()
    except ssl.SSLCertVerificationError:
        return False
    except ssl.SSLError:
        return True
    except OSError:
        return False
    return True
