"""The webhook's WSGI app: `create_app(settings)` answers /validate, /healthz, /readyz and /metrics.

Everything the app needs arrives in `Settings` (the policy, a cache, an Event sink, a clock), so
tests build an app around a cache they filled themselves and a recording sink, and the server
builds one around the real watch cache and Event queue. No state lives in the app beyond what the
cluster tells the cache: replicas scale out.

It is a plain WSGI callable with a table of four routes, not a web framework's app: the API
server asks one thing (POST /validate), and a framework's request context, URL map, response
object and session cost a worker more per review than deciding it (`bench_webhook`). Any WSGI
server can host it (bench_load runs it behind granian and gunicorn too).

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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

#: An answer: status, headers but Content-Length (the answer's bytes say it), and the body.
Answer = tuple[int, list[tuple[str, str]], bytes]
#: A route's handler: the request's environ to its answer.
Handler = Callable[[WSGIEnvironment], Answer]

JSON_TYPE = "application/json"

#: Compact, keys sorted, ASCII: one encoder made once for every answer.
_encode = json.JSONEncoder(ensure_ascii=True, sort_keys=True, separators=(",", ":")).encode


def json_answer(status: int, doc: Any, headers: list[tuple[str, str]] | None = None) -> Answer:
    """The JSON answer `doc` with `status`, a newline at the end."""
    return status, [("Content-Type", JSON_TYPE), *(headers or ())], f"{_encode(doc)}\n".encode()


@functools.cache
def status_line(status: int) -> str:
    """`200 OK`, `403 Forbidden`: the WSGI status of a code."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def content_length(environ: WSGIEnvironment) -> int | None:
    """The body's declared length; None for a chunked body, or no length, or a length that is not
    a number (the WSGI servers hosting the app refuse those before it)."""
    if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    return length if length >= 0 else None


def mimetype(environ: WSGIEnvironment) -> str:
    """The media type of the body, without its parameters, lowercased."""
    return str(environ.get("CONTENT_TYPE", "")).partition(";")[0].strip().lower()


class WebhookApp:
    """The webhook's WSGI app (`create_app`): a route table, and the answers of each route."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics(
            settings.cache.stats, settings.event_counts, settings.certificate_expiry, settings.stuck
        )
        #: The request counter of each status, looked up once (created on first use).
        self._counter = functools.cache(self.metrics.requests.labels)
        self.routes: dict[str, dict[str, Handler]] = {
            "/validate": {"POST": self._validate},
            "/healthz": {"GET": self._healthz},
            "/readyz": {"GET": self._readyz},
            "/metrics": {"GET": self._metrics},
        }
        if not settings.record_events:
            log.warning(EVENTS_OFF)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            status, headers, body = self._route(environ, method)
        except Exception:
            log.exception("unhandled error", extra={"path": environ.get("PATH_INFO", "")})
            self._counter("500").inc()
            status, headers, body = json_answer(500, UNHANDLED)
        headers.append(("Content-Length", str(len(body))))
        start_response(status_line(status), headers)
        return [b"" if method == "HEAD" else body]

    def _route(self, environ: WSGIEnvironment, method: str) -> Answer:
        path = environ.get("PATH_INFO") or "/"
        methods = self.routes.get(path)
        if methods is None:
            reason = f"{method} {path}: no such path; this webhook serves POST /validate"
            return json_answer(404, {"error": "not found", "reason": reason})
        handler = methods.get("GET" if method == "HEAD" else method)
        if handler is None:
            allowed = ", ".join(sorted({*methods, *(["HEAD"] if "GET" in methods else [])}))
            reason = f"{method} {path}: method not allowed (allowed: {allowed})"
            doc = {"error": "method not allowed", "reason": reason}
            return json_answer(405, doc, [("Allow", allowed)])
        return handler(environ)

    def _bad_request(self, reason: str) -> Answer:
        self._counter("400").inc()
        log.warning("malformed admission review", extra={"reason": reason})
        return json_answer(400, {"error": "bad request", "reason": reason})

    def _too_large(self, length: int | None) -> Answer:
        size = f"body of {length} bytes" if length is not None else "body"
        reason = f"{size} exceeds the limit of {self.settings.max_body_bytes} bytes; not read"
        self._counter("413").inc()
        log.warning("admission review too large", extra={"reason": reason})
        return json_answer(413, {"error": "payload too large", "reason": reason})

    def _validate(self, environ: WSGIEnvironment) -> Answer:
        """One AdmissionReview: read (a body over the limit is refused before it is read),
        parse, decide, answer."""
        started = time.perf_counter()
        limit = self.settings.max_body_bytes
        length = content_length(environ)
        if length is not None and length > limit:
            return self._too_large(length)
        media = mimetype(environ)
        if not media.endswith("json"):
            return self._bad_request(f"Content-Type must be application/json, not {media!r}")
        stream = environ["wsgi.input"]
        if length is not None:
            body = stream.read(length)
        elif environ.get("wsgi.input_terminated"):
            # A chunked body, whose end the server says: read one byte past the limit, no more.
            body = stream.read(limit + 1)
        else:
            body = b""  # no length and no end: nothing can be read without waiting forever
        if len(body) > limit:
            return self._too_large(None)
        return self._decided(body, started)

    def _decided(self, body: bytes, started: float) -> Answer:
        settings = self.settings
        try:
            req = parse_review(body, settings.max_body_bytes)
        except ReviewError as exc:
            return self._bad_request(str(exc))
        ready, why = settings.cache.ready()
        if not ready:
            # Deciding from an empty or stale cache would allow what it cannot see: answer an
            # error instead, and let the webhook's failurePolicy decide.
            self._counter("503").inc()
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
            self._counter("500").inc()
            return json_answer(500, {"error": "internal error", "reason": "could not decide"})
        answer = json_answer(200, render_response(outcome.response))
        self.metrics.latency.observe(time.perf_counter() - started)
        self._counter("200").inc()
        _record(outcome, req, settings, self.metrics)
        return answer

    def _healthz(self, _environ: WSGIEnvironment) -> Answer:
        return json_answer(200, {"status": "alive"})

    def _readyz(self, _environ: WSGIEnvironment) -> Answer:
        ready, reason = self.settings.cache.ready()
        serving = self.settings.serving_problem()
        if serving is not None:
            ready, reason = False, serving if ready else f"{serving}; {reason}"
        return json_answer(200 if ready else 503, {"ready": ready, "reason": reason})

    def _metrics(self, _environ: WSGIEnvironment) -> Answer:
        return 200, [("Content-Type", CONTENT_TYPE_LATEST)], generate_latest(self.metrics.registry)


def create_app(settings: Settings) -> WebhookApp:
    """Build the webhook app."""
    return WebhookApp(settings)


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
