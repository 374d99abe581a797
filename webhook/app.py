"""The Flask app factory: `create_app(settings)` with /validate, /healthz, /readyz and /metrics.

Everything the app needs arrives in `Settings` (the policy, a cache, an Event sink, a clock), so
tests build an app around a cache they filled themselves and a recording sink, and the server
builds one around the real watch cache and Event queue. No state lives in the app beyond what the
cluster tells the cache: replicas scale out.

Exceptions become protocol answers here and only here: a malformed review is a 400 with its reason;
a body over the limit is a 413, answered before it is read; an unknown path or method is a 404 or
405; a bug is logged with its traceback and answered 500 with a one-line reason, so the webhook's
failurePolicy decides. Every answer is JSON: nothing of the stack, and no HTML page, reaches the
client.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.types import WSGIEnvironment

from flask import Flask, Request, Response, request
from flask import typing as ft
from flask.globals import request_ctx
from flask.json.provider import DefaultJSONProvider
from flask.sessions import NullSession, SecureCookieSessionInterface
from flask.signals import request_tearing_down
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.datastructures import Headers
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import MapAdapter

from gate.engine.fence import fence_status
from gate.engine.policy import Policy
from gate.sources.clock import utc_date
from webhook.cache import CacheView
from webhook.decide import decide_admission, ref_of_request
from webhook.events import EventCounts, EventSink, RecordingSink
from webhook.metrics import Metrics, StuckStats
from webhook.outcome import Outcome
from webhook.review import (
    DEFAULT_MAX_BYTES,
    AdmissionRequest,
    ReviewError,
    parse_review,
    render_response,
)

log = logging.getLogger("prune_gate.webhook")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Settings:
    """What one app instance works with."""

    policy: Policy
    cache: CacheView
    events: EventSink = field(default_factory=RecordingSink)
    max_body_bytes: int = DEFAULT_MAX_BYTES
    #: The wall clock (fence expiry, exemption dates); tests pin it.
    now: Callable[[], dt.datetime] = _utcnow
    #: How many Events the sink sent, failed to send and dropped (for /metrics); the server
    #: passes `EventQueue.counts`.
    event_counts: Callable[[], EventCounts] = EventCounts
    #: Why the serving certificate makes the server unready (a rejected rotation, an expired
    #: certificate), or None; the server passes `CertReloader.problem`.
    serving_problem: Callable[[], str | None] = lambda: None
    #: When the served certificate expires (Unix seconds), or None when not known.
    certificate_expiry: Callable[[], float | None] = lambda: None
    #: Whether decisions on reviews may record Events. Only when every caller of /validate is
    #: known to be the API server (`--client-ca`): a review is the caller's word, and anyone who
    #: reaches the port could otherwise post one (user `eve`, group `platform-oncall`) and put a
    #: real PruneOverridden Event on a claim. The verdict is the same either way.
    record_events: bool = True
    #: The stuck-deletion detector, whose counts /metrics publishes; None when it is off.
    stuck: StuckStats | None = None


#: Logged once at start when reviews may not record Events (no `--client-ca`).
EVENTS_OFF = (
    "no --client-ca: any caller that reaches the port could forge a review; Events from reviews "
    "are off (the verdicts are not). Give the CA of the API server's webhook client certificate "
    "to turn them on"
)


#: The answer to a bug: one line, nothing of the stack.
UNHANDLED = {"error": "internal error", "reason": "unhandled error, see the log"}


class JSONResponse(Response):
    """An answer of the webhook: a JSON document, made from its bytes with its headers said once.

    Werkzeug's generic response works out per answer what is fixed here: its content type (a
    header lookup that raises and catches a KeyError when absent), and a copy of the headers to
    make a Location absolute, drop the length of a 1xx, 204 or 304, or count a length not set.
    A JSON answer has no Location, is never one of those statuses, and has its Content-Length
    from its bytes (`set_data`), so its headers are served as they are, and its body as the one
    bytes object it is."""

    default_mimetype = "application/json"

    def __init__(self, body: bytes, status: int) -> None:
        # direct_passthrough: the body is one bytes object already, served as the list it is
        # kept in, not re-encoded through a generator and a closing wrapper.
        super().__init__(body, status, content_type=self.default_mimetype, direct_passthrough=True)

    def get_wsgi_headers(self, environ: WSGIEnvironment) -> Headers:
        return self.headers


class _JSON(DefaultJSONProvider):
    """Flask's JSON settings with the encoder made once: compact, keys sorted, ASCII, a newline
    at the end (what `jsonify` writes outside debug mode), without rebuilding its arguments and
    encoder for every answer."""

    compact = True

    def __init__(self, app: Flask) -> None:
        super().__init__(app)
        encoder = json.JSONEncoder(
            ensure_ascii=self.ensure_ascii,
            sort_keys=self.sort_keys,
            separators=(",", ":"),
            default=self.default,
        )
        self.encode: Callable[[Any], str] = encoder.encode

    def response(self, *args: Any, **kwargs: Any) -> Response:
        return self.answer(200, self._prepare_response_obj(args, kwargs))

    def answer(self, status: int, doc: Any) -> Response:
        """The JSON answer `doc` with `status`."""
        return JSONResponse(f"{self.encode(doc)}\n".encode(), status)


class _NoSessions(SecureCookieSessionInterface):
    """The webhook has no sessions: one read-only null session for every request, instead of a
    cookie serializer looked up and a new null session made for each."""

    _none = NullSession()

    def open_session(self, app: Flask, request: Request) -> NullSession:
        return self._none


class WebhookFlask(Flask):
    """Flask, with the per-request work the webhook does not need done once.

    Its routes match by path and method alone (no host matching, no subdomains, no external
    URLs), so a request's URL adapter is bound to its path and method without Flask reading the
    Host header twice (its trusted-host check, then `bind_to_environ`), and the adapters of the
    last few (path, method) pairs are kept: the API server asks one of them (POST /validate)."""

    json_provider_class = _JSON
    session_interface = _NoSessions()

    # The request hooks run Flask's loops over every blueprint's functions, and the teardown
    # its signal, only when there is something registered to run: the webhook registers none.

    def preprocess_request(self) -> ft.ResponseReturnValue | None:
        if self.url_value_preprocessors or self.before_request_funcs:
            return super().preprocess_request()
        return None

    def process_response(self, response: Response) -> Response:
        if self.after_request_funcs or request_ctx._after_request_functions:
            return super().process_response(response)
        return response  # and no session to save

    def do_teardown_request(self, *exc: BaseException | None) -> None:
        if self.teardown_request_funcs or request_tearing_down.receivers:
            super().do_teardown_request(*exc)  # none given: Flask reads sys.exc_info()

    def create_url_adapter(self, request: Request | None) -> MapAdapter | None:
        # TRUSTED_HOSTS is Flask 3.1's; 3.0 (the floor) has no host check and no such key.
        if request is None or self.config.get("TRUSTED_HOSTS") is not None:
            return super().create_url_adapter(request)  # the host is checked, as Flask does
        return self._bound(request.root_path, request.scheme, request.method, request.path)

    # Kept across apps (a process has a few, the tests many): 64 adapters in all.
    @functools.lru_cache(maxsize=64)  # noqa: B019
    def _bound(self, root_path: str, scheme: str, method: str, path: str) -> MapAdapter:
        return self.url_map.bind(
            "webhook",
            script_name=root_path or "/",
            url_scheme=scheme,
            default_method=method,
            path_info=path,
        )


def create_app(settings: Settings) -> Flask:
    """Build the webhook app."""
    app = WebhookFlask("prune_gate_webhook")
    # Flask reads at most this much of a body; the review parser checks the exact limit.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    metrics = Metrics(
        settings.cache.stats, settings.event_counts, settings.certificate_expiry, settings.stuck
    )
    app.extensions["prune_gate"] = {"settings": settings, "metrics": metrics}
    if not settings.record_events:
        log.warning(EVENTS_OFF)
    assert isinstance(app.json, _JSON)
    json_answer = app.json.answer
    #: The request counter of each status, looked up once (created on first use, as before).
    counter = functools.cache(metrics.requests.labels)

    def bad_request(reason: str) -> Response:
        counter("400").inc()
        log.warning("malformed admission review", extra={"reason": reason})
        return json_answer(400, {"error": "bad request", "reason": reason})

    def too_large(length: int | None) -> Response:
        size = f"body of {length} bytes" if length is not None else "body"
        reason = f"{size} exceeds the limit of {settings.max_body_bytes} bytes; not read"
        counter("413").inc()
        log.warning("admission review too large", extra={"reason": reason})
        return json_answer(413, {"error": "payload too large", "reason": reason})

    @app.post("/validate")
    def validate() -> Response:
        """One AdmissionReview: read (a body over the limit is refused before it is read),
        parse, decide, answer."""
        started = time.perf_counter()
        req = request._get_current_object()  # type: ignore[attr-defined]
        length = req.content_length
        if length is not None and length > settings.max_body_bytes:
            return too_large(length)
        mimetype = req.mimetype
        if not mimetype.endswith("json"):
            return bad_request(f"Content-Type must be application/json, not {mimetype!r}")
        # With a Content-Length (the API server's), read exactly that much of the server's
        # stream; without one (chunked), Flask's stream, bounded by MAX_CONTENT_LENGTH.
        body = req.input_stream.read(length) if length is not None else req.get_data(cache=False)
        if len(body) > settings.max_body_bytes:  # a chunked body has no length to check first
            return too_large(None)
        return decided(body, started)

    def decided(body: bytes, started: float) -> Response:
        try:
            req = parse_review(body, settings.max_body_bytes)
        except ReviewError as exc:
            return bad_request(str(exc))
        ready, why = settings.cache.ready()
        if not ready:
            # Deciding from an empty or stale cache would allow what it cannot see: answer an
            # error instead, and let the webhook's failurePolicy decide.
            counter("503").inc()
            log.warning("not ready, request not decided", extra={"uid": req.uid, "reason": why})
            return json_answer(503, {"error": "not ready", "reason": why})
        now = settings.now()
        try:
            with settings.cache.lock:
                fence = fence_status(settings.cache.fence_lease(), now)
                outcome = decide_admission(
                    req, settings.policy, settings.cache.state, fence, utc_date(now)
                )
        except Exception:
            log.exception("could not decide", extra={"uid": req.uid})
            counter("500").inc()
            return json_answer(500, {"error": "internal error", "reason": "could not decide"})
        resp = json_answer(200, render_response(outcome.response))
        metrics.latency.observe(time.perf_counter() - started)
        counter("200").inc()
        _record(outcome, req, settings, metrics)
        return resp

    @app.get("/healthz")
    def healthz() -> Response:
        return json_answer(200, {"status": "alive"})

    @app.get("/readyz")
    def readyz() -> Response:
        ready, reason = settings.cache.ready()
        serving = settings.serving_problem()
        if serving is not None:
            ready, reason = False, serving if ready else f"{serving}; {reason}"
        return json_answer(200 if ready else 503, {"ready": ready, "reason": reason})

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        # Flask's own answers (404, 405, a chunked body past MAX_CONTENT_LENGTH) are HTML pages.
        code = exc.code or 500
        if code == 413:
            return too_large(None)
        reason = f"{request.method} {request.path}: {exc.description}"
        resp = json_answer(code, {"error": exc.name.lower(), "reason": reason})
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            resp.headers["Allow"] = ", ".join(exc.valid_methods)
        return resp

    @app.errorhandler(Exception)
    def internal_error(_exc: Exception) -> Response:
        log.exception("unhandled error", extra={"path": request.path})
        counter("500").inc()
        return json_answer(
            500, {"error": "internal error", "reason": "unhandled error, see the log"}
        )

    return app


def req_fields(req: AdmissionRequest) -> dict[str, Any]:
    """Fields of a request worth a log line."""
    return {
        "uid": req.uid,
        "operation": req.operation,
        "object": ref_of_request(req).display(),
        "user": req.user.username,
        "dryRun": req.dry_run,
    }


def _record(outcome: Outcome, req: AdmissionRequest, settings: Settings, metrics: Metrics) -> None:
    """Log, count and (unless a dry run) queue the Events of a decision."""
    if outcome.overridden_by is not None:
        what = "overridden"
    elif outcome.response.allowed and outcome.exempted:
        what = "exempted"
    elif outcome.response.allowed:
        what = "allowed"
    else:
        what = "refused"
    metrics.decisions.labels(what, outcome.code).inc()
    if outcome.findings or outcome.overridden_by or outcome.exempted:
        level = logging.INFO if outcome.response.allowed else logging.WARNING
        log.log(
            level,
            f"{req.operation} {what}",
            extra={
                **req_fields(req),
                "decision": what,
                "code": outcome.code,
                "findings": [f.code.value for f in outcome.findings],
                "override": outcome.overridden_by,
                "exempted": [e.finding.code.value for e in outcome.exempted],
                "exemption": outcome.exempted[0].reason if outcome.exempted else None,
                "deployer": outcome.deployer,
            },
        )
    if req.dry_run:
        return  # sideEffects: NoneOnDryRun
    if not settings.record_events:
        return  # the caller is not known to be the API server: its review proves nothing
    for event in outcome.events:
        settings.events.submit(event)
