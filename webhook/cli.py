"""`gate webhook serve`: the admission webhook's command line.

Parses options, makes certificates when asked, registers the webhook when asked (and removes the
registration on exit, SIGTERM or SIGINT), and serves the app (`webhook.httpserver`). Everything
it does is also a function in `webhook.*`, so tests call those directly.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gate.engine.policy import Policy, parse_duration
from gate.kube.client import load_configuration, new_api_client
from gate.model.errors import GateError
from gate.sources.policyfile import load_policy
from webhook import jsonlog
from webhook.review import DEFAULT_MAX_BYTES

if TYPE_CHECKING:  # imported when serving starts, not for `gate webhook --help`
    from gate.kube.client import KubeClient
    from webhook.app import WebhookApp
    from webhook.cache import WatchCache
    from webhook.events import EventQueue
    from webhook.httpbase import Limits
    from webhook.selfwatch import SelfWatch
    from webhook.serve import CertReloader
    from webhook.stuck import StuckDetector

log = logging.getLogger("prune_gate.webhook.cli")


class ServeError(click.ClickException):
    """Serving cannot start (a certificate or key file that cannot serve): one line, exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def kube_configuration(kubeconfig: str | None) -> Any:
    """A client Configuration: `kubeconfig`, else $KUBECONFIG, else ~/.kube/config, else the
    in-cluster service account (the resolution of `gate check --live`). Raises ClusterError."""
    cfg = load_configuration(kubeconfig, None)
    cfg.connection_pool_maxsize = 64  # one connection per watch, plus Events
    return cfg


def api_client(kubeconfig: str | None) -> Any:
    """An ApiClient for a fresh `kube_configuration(kubeconfig)`, with its own connection pool."""
    return new_api_client(kube_configuration(kubeconfig))


@click.group("webhook")
def webhook() -> None:
    """The admission webhook: refuse guarded deletions at the API server."""


@webhook.command("verify")
@click.option(
    "--configuration",
    required=True,
    help="The ValidatingWebhookConfiguration to verify (the chart's: its fullname).",
)
@click.option("--timeout", default="2m", show_default=True,
              help="How long to wait to see it armed, and then refusing (each).")  # fmt: skip
@click.option("--namespace-prefix", default="prune-gate-verify", show_default=True,
              help="Prefix of the namespace made for the test claim and pod.")  # fmt: skip
@click.option("--failure-policy", type=click.Choice(["Fail", "Ignore"]), default="Fail",
              show_default=True, help="The failurePolicy to wait for (Fail: armed).")  # fmt: skip
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Default: in-cluster.")
def verify(
    configuration: str,
    timeout: str,
    namespace_prefix: str,
    failure_policy: str,
    kubeconfig: str | None,
) -> None:
    """Check the webhook is armed and the API server refuses a mounted claim's deletion through
    it (a dry run, in a namespace of its own, removed after): the chart's `helm test`."""
    from gate.kube.client import KubeClient
    from webhook.verify import verify as run_verify

    try:
        seconds = parse_duration(timeout)
        with KubeClient(kube_configuration(kubeconfig), timeout=30.0) as kube:
            outcome = run_verify(kube, configuration, timeout=seconds,
                                 namespace_prefix=namespace_prefix,
                                 failure_policy=failure_policy)  # fmt: skip
    except (GateError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    for line in outcome.lines:
        click.echo(line)
    raise SystemExit(0 if outcome.ok else 1)


@webhook.command("serve")
@click.option("--listen", default="127.0.0.1:8443", show_default=True, help="HOST:PORT to serve.")
@click.option("--cert-file", type=click.Path(dir_okay=False), help="Serving certificate (PEM).")
@click.option("--key-file", type=click.Path(dir_okay=False), help="Its private key (PEM).")
@click.option(
    "--self-signed",
    is_flag=True,
    help="Make a CA and a serving certificate for the --listen address (for trying it out).",
)
@click.option(
    "--cert-dir",
    type=click.Path(file_okay=False),
    help="Where --self-signed writes ca.crt, tls.crt and tls.key (default: a temporary dir).",
)
@click.option(
    "--register",
    is_flag=True,
    help="Register a ValidatingWebhookConfiguration pointing at this server; removed on exit.",
)
@click.option(
    "--ca-file",
    type=click.Path(dir_okay=False, exists=True),
    help="caBundle for --register when the certificate is not --self-signed.",
)
@click.option(
    "--client-ca",
    type=click.Path(dir_okay=False),
    help="Require callers to present a client certificate signed by this CA (PEM): the API "
    "server's, from its AdmissionConfiguration kubeconfig. Without it, reviews record no Events.",
)
@click.option("--name", default="prune-gate", show_default=True, help="Name of the registration.")
@click.option(
    "--failure-policy",
    type=click.Choice(["Fail", "Ignore"]),
    default="Fail",
    show_default=True,
    help="What the API server does when the webhook cannot answer.",
)
@click.option("--timeout-seconds", type=click.IntRange(1, 30), default=5, show_default=True)
@click.option(
    "--namespace",
    default=lambda: os.environ.get("POD_NAMESPACE", "prune-gate"),
    show_default="$POD_NAMESPACE or prune-gate",
    help="The webhook's own namespace, excluded from the registration like kube-system.",
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="prune-gate.yaml")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    help="Which cluster. Default: $KUBECONFIG, else ~/.kube/config, else in-cluster.",
)
@click.option(
    "--watch-registration",
    metavar="NAME",
    help="Watch this ValidatingWebhookConfiguration (a chart's) and report changes to it.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 32),
    default=1,
    show_default=True,
    help="Worker processes, each with its own watch cache, sharing the port: one uses one core "
    "at most. More than 1 adds a small master process that restarts a worker that dies and "
    "answers the health port for all of them.",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default="0: off",
    help="Also serve /healthz, /readyz and /metrics over plain HTTP on this port of the --listen "
    "host, for kubelet probes and Prometheus (they have no client certificate for --client-ca).",
)
@click.option("--max-body-bytes", type=int, default=DEFAULT_MAX_BYTES, show_default=True)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 65536),
    default=1024,
    show_default=True,
    help="Connection budget of the TLS port (per worker). A new connection beyond it closes the "
    "port's oldest that has not sent a whole request head, else the one idle longest.",
)
@click.option(
    "--handshake-timeout",
    default="5s",
    show_default=True,
    metavar="DURATION",
    help="A TLS handshake not finished this long after the accept is closed.",
)
@click.option(
    "--header-timeout",
    default="5s",
    show_default=True,
    metavar="DURATION",
    help="A request head (request line and headers) not whole this long after the handshake, "
    "or after its first byte on a kept-alive connection, is closed (slowloris).",
)
@click.option(
    "--idle-timeout",
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="A kept-alive connection with no new request for this long is closed.",
)
@click.option(
    "--queue-timeout",
    default="500ms",
    show_default=True,
    metavar="DURATION",
    help="A request that waited this long in a worker before its turn is answered 429 at once, "
    "without a decision: the worker is behind, and the API server applies the webhook's "
    "failurePolicy now instead of at its timeoutSeconds. Keep it under timeoutSeconds. 0s: never.",
)
@click.option(
    "--http2/--no-http2",
    default=True,
    show_default=True,
    help="Offer HTTP/2 on the TLS port (ALPN). The API server then sends its calls to this "
    "webhook as streams over one connection instead of opening a connection, each a TLS "
    "handshake, for every call in flight when the webhook is behind.",
)
@click.option(
    "--http2-max-streams",
    # Go's client assumes 100 until the server's SETTINGS arrive; fewer would refuse a burst.
    type=click.IntRange(100, 65536),
    default=250,
    show_default=True,
    help="HTTP/2 streams a client may have in flight on one connection (per worker); the API "
    "server opens another connection past it, which another worker may take.",
)
@click.option(
    "--max-handshakes",
    type=click.IntRange(0, 65536),
    default=256,
    show_default=True,
    help="TLS handshakes in progress at once from one client address, per worker; a new "
    "connection from an address at it is closed at once. A caller whose calls wait opens "
    "connection after connection, each a handshake's CPU. 0: no bound.",
)
@click.option(
    "--health-max-connections",
    type=click.IntRange(1, 65536),
    default=32,
    show_default=True,
    help="Connection budget of the --health-port, its own: what holds it cannot take the TLS "
    "port's.",
)
@click.option(
    "--health-header-timeout",
    default="3s",
    show_default=True,
    metavar="DURATION",
    help="The --header-timeout of the --health-port.",
)
@click.option(
    "--health-idle-timeout",
    default="10s",
    show_default=True,
    metavar="DURATION",
    help="The --idle-timeout of the --health-port.",
)
@click.option(
    "--stuck-interval",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="List the cluster this often for stuck deletions (gate doctor): the metric "
    "prune_gate_stuck_objects and a DeletionStuck Event per object. 0s: off.",
)
@click.option(
    "--stuck-older-than",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="A deletion counts as stuck once asked for this long ago.",
)
def serve(**given: Any) -> None:
    """Serve /validate over TLS; the watch cache fills from the API server."""
    jsonlog.configure()
    _serve(_checked_options(given))


@dataclass(frozen=True)
class ServeOptions:
    """What `gate webhook serve` was asked, checked before anything starts."""

    listen: str
    host: str
    port: int
    policy: Policy
    kubeconfig: str | None
    client_ca: str | None
    #: Offer HTTP/2 in ALPN on the TLS port.
    http2: bool
    #: The TLS port's and the health port's `webhook.httpbase.Limits`.
    limits: Limits
    health_limits: Limits
    max_body_bytes: int
    workers: int
    health_port: int
    stuck_every: float
    stuck_after: float
    watch_registration: str | None
    register: bool
    name: str
    failure_policy: str
    timeout_seconds: int
    namespace: str
    self_signed: bool
    cert_dir: str | None
    cert_file: str | None
    key_file: str | None
    #: The CA for --register's caBundle (--ca-file), when given.
    ca_pem: bytes | None


#: The duration options of each port, as `_listener_limits` takes them.
_TLS_DURATIONS = ("handshake_timeout", "header_timeout", "idle_timeout")
_HEALTH_DURATIONS = ("health_header_timeout", "health_idle_timeout")


def _checked_options(given: dict[str, Any]) -> ServeOptions:
    """The command's options (by parameter name), checked: a policy, duration or certificate
    choice that cannot serve is a usage error now, not a failed start later."""
    from webhook.serve import host_of

    def durations(names: tuple[str, ...]) -> dict[str, str]:
        return {"--" + n.replace("_", "-"): given[n] for n in names}

    try:
        policy = load_policy(given["config_path"])
        host, port = host_of(given["listen"])
        limits, health_limits = _listener_limits(
            given["max_body_bytes"],
            given["max_connections"],
            durations(_TLS_DURATIONS),
            given["health_max_connections"],
            durations(_HEALTH_DURATIONS),
        )
        limits = _overload_limits(limits, given["queue_timeout"], given["max_handshakes"])
        limits = replace(limits, max_streams=given["http2_max_streams"])
        # A missing kubeconfig is a usage error now, not a failed start later. Each use loads it
        # again: the client writes certificate data to temporary files, removed at exit.
        kube_configuration(given["kubeconfig"])
        stuck_every = parse_duration(given["stuck_interval"])
        stuck_after = parse_duration(given["stuck_older_than"])
    except (GateError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    ca_pem: bytes | None = Path(given["ca_file"]).read_bytes() if given["ca_file"] else None
    _check_certificate_choice(given, ca_pem)
    kept = {f.name for f in dataclasses.fields(ServeOptions)} & given.keys()
    return ServeOptions(
        **{k: given[k] for k in kept},
        host=host,
        port=port,
        policy=policy,
        limits=limits,
        health_limits=health_limits,
        stuck_every=stuck_every,
        stuck_after=stuck_after,
        ca_pem=ca_pem,
    )


def _check_certificate_choice(given: dict[str, Any], ca_pem: bytes | None) -> None:
    """A serving pair, or --self-signed, not both; --register with a CA to register."""
    self_signed, cert_file, key_file = given["self_signed"], given["cert_file"], given["key_file"]
    if self_signed and (cert_file or key_file):
        raise click.UsageError("--self-signed makes its own certificate: drop --cert-file")
    if not self_signed and (not cert_file or not key_file):
        raise click.UsageError("give --cert-file and --key-file, or --self-signed")
    if given["register"] and ca_pem is None and not self_signed:
        raise click.UsageError("--register needs the CA: use --self-signed or --ca-file")


@dataclass(frozen=True)
class Certificates:
    """The serving pair, the CA for --register, and the directory --self-signed made (removed on
    exit) when it made one."""

    cert_file: str
    key_file: str
    ca_pem: bytes | None
    made_dir: Path | None = None


@dataclass(frozen=True)
class Registration:
    """The configuration --register writes once a worker serves, and how that worker tells it
    serves (a TLS handshake with the CA)."""

    config: dict[str, Any]
    serving: Callable[[], bool]


@dataclass
class WorkerServices:
    """What one worker runs beside its server, each stopped by `stop` (None: not started there).

    The cache, its API client and the Event queue run in every worker; the stuck detector, the
    registrar and the self-watch only in the primary one (the only one with --workers 1)."""

    api: Any
    cache: WatchCache
    events: EventQueue
    stuck: StuckDetector | None = None
    stuck_lister: KubeClient | None = None
    registrar: _Registrar | None = None
    selfwatch: SelfWatch | None = None

    def stop(self) -> None:
        """Stop the registrar and the watches first, then the Event queue, cache and client."""
        if self.registrar is not None:
            self.registrar.stop()
        if self.selfwatch is not None:
            self.selfwatch.stop()
        if self.stuck is not None:
            self.stuck.stop()
        if self.stuck_lister is not None:
            self.stuck_lister.close()
        self.events.stop()
        self.cache.stop()
        self.api.close()


def _serve(options: ServeOptions) -> None:
    """Serve until SIGTERM or SIGINT, then remove the registration and the temporary
    certificate directory.

    SIGTERM and SIGINT stop the server, which returns; the `finally` below then cleans up.
    Before the server runs, SIGTERM is an exit through the same `finally`."""
    _exit_on_sigterm()
    made_dir: Path | None = None
    registering = False
    health: socket.socket | None = None
    try:
        certificates = _certificates(options)
        made_dir = certificates.made_dir
        reloader = _reloader(options, certificates)
        health = _health_socket(options)
        sock = _tls_socket(options)
        registration = _registration(options, certificates.ca_pem)
        registering = registration is not None
        _raise_descriptor_limit(options, health is not None)
        try:
            _run_workers(options, reloader, registration, sock, health)
        finally:
            _exit_on_sigterm()
            sock.close()
    finally:
        if health is not None:
            health.close()
        try:
            if registering:
                _unregister(options.kubeconfig, options.name)
        finally:
            if made_dir is not None:
                shutil.rmtree(made_dir, ignore_errors=True)
                log.info("self-signed certificate removed", extra={"dir": str(made_dir)})


def _certificates(options: ServeOptions) -> Certificates:
    """The serving pair given, or made by --self-signed (a CA and a certificate for the
    --listen host, in --cert-dir or a temporary directory)."""
    from webhook import tls

    if not options.self_signed:
        assert options.cert_file is not None and options.key_file is not None
        return Certificates(options.cert_file, options.key_file, options.ca_pem)
    made: Path | None = None
    if options.cert_dir:
        out = Path(options.cert_dir)
        out.mkdir(parents=True, exist_ok=True)
    else:
        out = made = Path(tempfile.mkdtemp(prefix="prune-gate-certs-"))
    ca = tls.make_ca()
    (out / "ca.crt").write_bytes(ca.cert_pem)
    cert_file, key_file = out / "tls.crt", out / "tls.key"
    tls.write_pair(tls.make_serving_cert(ca, [options.host]), cert_file, key_file)
    log.info("self-signed certificate written", extra={"dir": str(out), "host": options.host})
    return Certificates(str(cert_file), str(key_file), ca.cert_pem, made)


def _reloader(options: ServeOptions, certificates: Certificates) -> CertReloader:
    from webhook.http2 import ALPN_PROTOCOLS
    from webhook.serve import CertReloader
    from webhook.tls import CertificateError

    try:
        return CertReloader(
            certificates.cert_file,
            certificates.key_file,
            client_ca_file=options.client_ca,
            alpn=ALPN_PROTOCOLS if options.http2 else ("http/1.1",),
        )
    except CertificateError as exc:
        raise ServeError(str(exc)) from None


def _health_socket(options: ServeOptions) -> socket.socket | None:
    """The --health-port's listening socket, or None without one."""
    from webhook.serve import listen_socket

    if not options.health_port:
        return None
    try:
        return listen_socket(options.host, options.health_port)
    except OSError as exc:
        raise ServeError(
            f"cannot listen on {options.host}:{options.health_port} (--health-port): "
            f"{exc.strerror or exc}; choose another port, or 0 for none"
        ) from None


def _tls_socket(options: ServeOptions) -> socket.socket:
    from webhook.serve import listen_socket

    try:
        return listen_socket(options.host, options.port)
    except OSError as exc:
        raise ServeError(
            f"cannot listen on {options.listen} (--listen): {exc.strerror or exc}; stop what "
            "holds it or choose another port"
        ) from None


def _registration(options: ServeOptions, ca_pem: bytes | None) -> Registration | None:
    """With --register, the configuration to write; None without.

    Registered by the worker once it answers TLS with a ready cache, never before: a
    registration that points at nothing refuses every guarded DELETE (failurePolicy Fail).
    Removed by this process on exit, whoever wrote it."""
    from webhook import register as reg
    from webhook.serve import answers_tls

    if not options.register:
        return None
    assert ca_pem is not None
    host, port = options.host, options.port
    url_host = f"[{host}]" if ":" in host else host
    url = f"https://{url_host}:{port}/validate"
    policy, failure, timeout = options.policy, options.failure_policy, options.timeout_seconds
    api = api_client(options.kubeconfig)
    try:
        discovered = reg.discover_plurals(api, policy.webhook.guarded_kinds)
        config = reg.with_fence(
            reg.build_configuration(
                options.name, url, ca_pem, policy, failure, timeout, options.namespace, discovered
            ),
            policy,
            failure,
            timeout,
        )
    except GateError as exc:  # a kind it cannot name, an API server that refuses
        raise ServeError(f"cannot register the webhook: {exc}") from None
    finally:
        api.close()
    return Registration(config, lambda: answers_tls(host, port, ca_pem))


def _raise_descriptor_limit(options: ServeOptions, health: bool) -> None:
    from webhook.serve import raise_descriptor_limit

    try:
        raise_descriptor_limit(
            _descriptors_needed(options.limits, options.health_limits if health else None)
        )
    except OSError as exc:
        raise ServeError(str(exc)) from None


def _run_workers(
    options: ServeOptions,
    reloader: CertReloader,
    registration: Registration | None,
    sock: socket.socket,
    health: socket.socket | None,
) -> None:
    """One worker in this process, or --workers of them forked under a supervisor."""

    def work(index: int, health_listener: socket.socket | None) -> None:
        _work(options, reloader, registration, sock, index, health_listener)

    if options.workers == 1:
        work(0, health)
        return
    from webhook.workers import Supervisor

    _preload_worker_modules()

    workers = options.workers
    Supervisor(
        workers,
        work,
        health,
        options.limits,
        options.health_limits,
        ready=lambda: log.info("workers started", extra={"workers": workers}),
    ).run()


#: What a worker imports to serve, beyond what the master has: imported once in the master,
#: before it forks, they are shared by every worker's pages instead of loaded in each (about
#: 40 MiB of a worker's memory).
WORKER_MODULES = (
    "kubernetes.client",
    "gate.engine.doctor",
    "webhook.app",
    "webhook.cache",
    "webhook.decide",
    "webhook.events",
    "webhook.metrics",
    "webhook.selfwatch",
    "webhook.serve",
    "webhook.stuck",
    "webhook.workers",
)


def _preload_worker_modules() -> None:
    """Import the workers' modules in the master before it forks them (`WORKER_MODULES`)."""
    import importlib

    for name in WORKER_MODULES:
        importlib.import_module(name)


def _work(
    options: ServeOptions,
    reloader: CertReloader,
    registration: Registration | None,
    sock: socket.socket,
    index: int,
    health_listener: socket.socket | None,
) -> None:
    """Serve until SIGTERM or SIGINT: one worker, in this process or a fork."""
    from webhook.httpserver import HEALTH_LIMITS, HttpsServer
    from webhook.metrics import ConnectionsCollector
    from webhook.serve import health_only
    from webhook.workers import stop_when_master_gone

    services, app = _start_worker(options, reloader, registration, primary=index == 0)
    try:
        server = HttpsServer(app, reloader.context, options.limits)
        if health_listener is not None:
            # With workers, the master's Unix socket to this one, not the pod's port.
            alone = options.workers == 1
            server.add_plain(
                health_listener,
                health_only(app),
                options.health_limits if alone else HEALTH_LIMITS,
                "health" if alone else "master",
            )
        app.metrics.registry.register(ConnectionsCollector(server.stats))
        if options.workers > 1:
            server.add_background(stop_when_master_gone)
        fields = {"listen": options.listen, "worker": index, "pid": os.getpid()}
        server.run(sock, ready=lambda: log.info("serving", extra=fields))
    finally:
        _exit_on_sigterm()  # the loop's handlers are gone: cleaning up may not be cut short
        services.stop()


def _start_worker(
    options: ServeOptions,
    reloader: CertReloader,
    registration: Registration | None,
    primary: bool,
) -> tuple[WorkerServices, WebhookApp]:
    """The app of one worker, around its own watch cache, with its services started; the
    `primary` one also runs the stuck detector, and the registrar or the self-watch."""
    from webhook.app import Settings, create_app
    from webhook.cache import WatchCache
    from webhook.events import EventQueue

    api = api_client(options.kubeconfig)
    events = EventQueue(api, instance=os.environ.get("HOSTNAME", "prune-gate"))
    cache = WatchCache(api, options.policy, events=events)
    services = WorkerServices(api, cache, events)
    cache.start()
    events.start()
    if primary and options.stuck_every > 0:
        _start_stuck(options, services)
    app = create_app(
        Settings(
            policy=options.policy,
            cache=cache,
            events=events,
            max_body_bytes=options.max_body_bytes,
            event_counts=events.counts,
            serving_problem=reloader.problem,
            certificate_expiry=reloader.not_after,
            record_events=options.client_ca is not None,
            stuck=services.stuck,
        )
    )
    if primary:
        _start_registration_watch(options, registration, services, app)
    return services, app


def _start_stuck(options: ServeOptions, services: WorkerServices) -> None:
    """Start the stuck-deletion detector, with a client of its own for its lists."""
    from gate.engine.doctor import Thresholds
    from gate.kube.client import KubeClient
    from webhook.stuck import StuckDetector

    lister = KubeClient(
        kube_configuration(options.kubeconfig),
        options.policy.live_timeout_seconds,
        hint="the stuck-deletion detector lists pods, claims, volumes, nodes and "
        "namespaces (the chart's ClusterRole grants it; --stuck-interval 0s turns it off)",
    )
    cache = services.cache
    services.stuck_lister = lister
    services.stuck = StuckDetector(
        lister,
        services.events,
        options.policy,
        options.stuck_every,
        Thresholds(older_than=options.stuck_after),
        ready=lambda: cache.ready()[0],
    )
    services.stuck.start()


def _start_registration_watch(
    options: ServeOptions,
    registration: Registration | None,
    services: WorkerServices,
    app: WebhookApp,
) -> None:
    """With --register, register once this worker serves, then watch; with
    --watch-registration, watch the chart's (nothing can refuse its deletion) and arm it once
    this pod serves."""
    cache, api, events = services.cache, services.api, services.events
    if registration is not None:
        services.registrar = _Registrar(
            api, registration.config, cache, events, app, serving=registration.serving
        )
        services.registrar.start()
    elif options.watch_registration:
        from webhook.selfwatch import watch_and_arm

        services.selfwatch = watch_and_arm(
            api,
            events,
            app,
            options.watch_registration,
            lambda: cache.ready()[0],
            (options.host, options.port),
        )


def _listener_limits(
    max_body_bytes: int,
    max_connections: int,
    tls_durations: dict[str, str],
    health_max_connections: int,
    health_durations: dict[str, str],
) -> tuple[Any, Any]:
    """The TLS port's and the health port's `Limits` from the options; ValueError names the
    option with a duration that is not one, or not above zero."""
    from webhook.httpbase import Limits
    from webhook.httpserver import HEALTH_LIMITS

    def seconds(durations: dict[str, str]) -> list[float]:
        out = []
        for option, text in durations.items():
            try:
                value = parse_duration(text)
            except ValueError as exc:
                raise ValueError(f"{option}: {exc}") from None
            if value <= 0:
                raise ValueError(f"{option} {text}: must be more than 0")
            out.append(value)
        return out

    handshake, header, idle = seconds(tls_durations)
    health_header, health_idle = seconds(health_durations)
    limits = Limits(
        max_connections=max_connections,
        handshake_seconds=handshake,
        header_seconds=header,
        idle_seconds=idle,
        max_body_bytes=max_body_bytes + 1,
    )
    health = replace(
        HEALTH_LIMITS,
        max_connections=health_max_connections,
        header_seconds=health_header,
        idle_seconds=health_idle,
    )
    return limits, health


def _overload_limits(limits: Any, queue_timeout: str, max_handshakes: int) -> Any:
    """`limits` with --queue-timeout and --max-handshakes (0 of either: no bound)."""
    try:
        queue = parse_duration(queue_timeout)
    except ValueError as exc:
        raise ValueError(f"--queue-timeout: {exc}") from None
    if queue < 0:
        raise ValueError(f"--queue-timeout {queue_timeout}: must be 0s or more")
    return replace(
        limits,
        queue_seconds=queue or None,
        max_handshakes=max_handshakes or None,
    )


def _descriptors_needed(limits: Any, health: Any) -> int:
    """File descriptors one process may hold at once: every budget, what one turn of the loop
    accepts beyond it, the master's link to a worker, and the API client's connections."""
    from webhook.httpserver import HEALTH_LIMITS

    need = 256  # the API client's pool (64), watches, certificate files, the log
    for lim in (limits, health, HEALTH_LIMITS):
        if lim is not None:
            need += lim.max_connections + lim.accept_batch
    return int(need)


def _exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit, so `finally` blocks run (Python's default is to die at once)."""

    def leave(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, leave)


def _watch_registration(
    api: Any, config: dict[str, Any] | None, events: Any, app: Any, name: str
) -> Any:
    """Start the self-watch of the registration (restoring our own when changed); count on
    /metrics."""
    from webhook import register as reg
    from webhook.selfwatch import SelfWatch

    restore = (lambda c: reg.register(api, c)) if config is not None else None
    watch = SelfWatch(api, config, events, restore=restore, name=name)
    app.metrics.registry.register(watch.collector())
    watch.start()
    return watch


class _Registrar:
    """Registers the webhook once this worker serves: the cache is ready (else every review is a
    503) and the TLS port completes a handshake. Then it starts the self-watch, which restores
    the registration if someone changes it. An API server that refuses is logged and retried."""

    def __init__(
        self,
        api: Any,
        config: dict[str, Any],
        cache: Any,
        events: Any,
        app: Any,
        serving: Callable[[], bool],
        interval: float = 0.2,
    ) -> None:
        self.api, self.config, self.cache, self.events, self.app = api, config, cache, events, app
        self.serving, self.interval = serving, interval
        self.selfwatch: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.selfwatch is not None:
            self.selfwatch.stop()

    def _run(self) -> None:
        from webhook import register as reg

        name = self.config["metadata"]["name"]
        while not self._stop.wait(self.interval):
            if not (self.cache.ready()[0] and self.serving()):
                continue
            try:
                reg.register(self.api, self.config)
            except GateError as exc:
                log.error("cannot register the webhook, retrying", extra={"error": str(exc)})
                self._stop.wait(2.0)
                continue
            url = self.config["webhooks"][0]["clientConfig"].get("url")
            log.info("webhook registered", extra={"registration": name, "url": url})
            if not self._stop.is_set():
                self.selfwatch = _watch_registration(
                    self.api, self.config, self.events, self.app, ""
                )
            return


def _unregister(kubeconfig: str | None, name: str) -> None:
    from webhook import register as reg

    api = api_client(kubeconfig)
    try:
        removed = reg.unregister(api, name)
    finally:
        api.close()
    log.info("webhook registration removed", extra={"registration": name, "existed": removed})
