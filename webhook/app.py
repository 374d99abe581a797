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
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.http import parse_options_header

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


def create_app(settings: Settings) -> Flask:
    """Build the webhook app."""
    app = Flask("prune_gate_webhook")
    # Flask reads at most this much of a body; the review parser checks the exact limit.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    metrics = Metrics(
        settings.cache.stats, settings.event_counts, settings.certificate_expiry, settings.stuck
    )
    app.extensions["prune_gate"] = {"settings": settings, "metrics": metrics}
    if not settings.record_events:
        log.warning(EVENTS_OFF)

    def bad_request(reason: str) -> tuple[int, dict[str, Any]]:
        metrics.requests.labels("400").inc()
        log.warning("malformed admission review", extra={"reason": reason})
        return 400, {"error": "bad request", "reason": reason}

    def too_large(length: int | None) -> tuple[int, dict[str, Any]]:
        size = f"body of {length} bytes" if length is not None else "body"
        reason = f"{size} exceeds the limit of {settings.max_body_bytes} bytes; not read"
        metrics.requests.labels("413").inc()
        log.warning("admission review too large", extra={"reason": reason})
        return 413, {"error": "payload too large", "reason": reason}

    def answer(
        mimetype: str, length: int | None, read_body: Callable[[], bytes]
    ) -> tuple[int, dict[str, Any]]:
        """The answer to one POST /validate: its status and JSON document."""
        started = time.perf_counter()
        if length is not None and length > settings.max_body_bytes:
            return too_large(length)
        if not mimetype.endswith("json"):
            return bad_request(f"Content-Type must be application/json, not {mimetype!r}")
        body = read_body()
        if len(body) > settings.max_body_bytes:  # a chunked body has no length to check first
            return too_large(None)
        try:
            req = parse_review(body, settings.max_body_bytes)
        except ReviewError as exc:
            return bad_request(str(exc))
        ready, why = settings.cache.ready()
        if not ready:
            # Deciding from an empty or stale cache would allow what it cannot see: answer an
            # error instead, and let the webhook's failurePolicy decide.
            metrics.requests.labels("503").inc()
            log.warning("not ready, request not decided", extra={"uid": req.uid, "reason": why})
            return 503, {"error": "not ready", "reason": why}
        now = settings.now()
        try:
            with settings.cache.lock:
                fence = fence_status(settings.cache.fence_lease(), now)
                outcome = decide_admission(
                    req, settings.policy, settings.cache.state, fence, utc_date(now)
                )
        except Exception:
            log.exception("could not decide", extra={"uid": req.uid})
            metrics.requests.labels("500").inc()
            return 500, {"error": "internal error", "reason": "could not decide"}
        doc = render_response(outcome.response)
        metrics.latency.observe(time.perf_counter() - started)
        metrics.requests.labels("200").inc()
        _record(outcome, req, settings, metrics)
        return 200, doc

    @app.post("/validate")
    def validate() -> tuple[Response, int]:
        """Reached only when the direct route below passes a request on (no valid
        Content-Length, e.g. a chunked body from another WSGI server)."""
        status, doc = answer(
            request.mimetype or "", request.content_length, lambda: request.get_data(cache=False)
        )
        return jsonify(doc), status

    app.wsgi_app = _direct_validate(app, app.wsgi_app, answer)  # type: ignore[method-assign, assignment]

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        return jsonify({"status": "alive"}), 200

    @app.get("/readyz")
    def readyz() -> tuple[Response, int]:
        ready, reason = settings.cache.ready()
        serving = settings.serving_problem()
        if serving is not None:
            ready, reason = False, serving if ready else f"{serving}; {reason}"
        return jsonify({"ready": ready, "reason": reason}), 200 if ready else 503

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        # Flask's own answers (404, 405, a chunked body past MAX_CONTENT_LENGTH) are HTML pages.
        code = exc.code or 500
        if code == 413:
            status, doc = too_large(None)
            return jsonify(doc), status
        reason = f"{request.method} {request.path}: {exc.description}"
        resp = jsonify({"error": exc.name.lower(), "reason": reason})
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            resp.headers["Allow"] = ", ".join(exc.valid_methods)
        return resp, code

    @app.errorhandler(Exception)
    def internal_error(_exc: Exception) -> tuple[Response, int]:
        log.exception("unhandled error", extra={"path": request.path})
        metrics.requests.labels("500").inc()
        return jsonify({"error": "internal error", "reason": "unhandled error, see the log"}), 500

    return app


#: The one POST /validate answer: (mimetype, Content-Length, read the body) -> (status, doc).
Answer = Callable[[str, int | None, Callable[[], bytes]], tuple[int, dict[str, Any]]]


def _direct_validate(app: Flask, flask_wsgi: WSGIApplication, answer: Answer) -> WSGIApplication:
    """POST /validate with a Content-Length answered straight from the WSGI environ, without
    Flask's request context, routing and response objects, which cost about as much as the
    decision itself on a busy webhook; everything else (and a body without a length) is Flask's.
    The answer is the same function either way, rendered with the app's own JSON settings."""
    internal = {"error": "internal error", "reason": "unhandled error, see the log"}

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/validate" or environ.get("REQUEST_METHOD") != "POST":
            return flask_wsgi(environ, start_response)
        raw_length = environ.get("CONTENT_LENGTH") or ""
        if not raw_length.isdigit() or "HTTP_TRANSFER_ENCODING" in environ:
            return flask_wsgi(environ, start_response)
        length = int(raw_length)
        mimetype = parse_options_header(environ.get("CONTENT_TYPE", ""))[0].lower()
        stream = environ["wsgi.input"]
        try:
            status, doc = answer(mimetype, length, lambda: stream.read(length))
        except Exception:
            log.exception("unhandled error", extra={"path": "/validate"})
            app.extensions["prune_gate"]["metrics"].requests.labels("500").inc()
            status, doc = 500, internal
        body = (app.json.dumps(doc) + "\n").encode()
        start_response(
            f"{status} {HTTPStatus(status).phrase}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return wsgi


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
