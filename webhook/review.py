"""The wire format: AdmissionReview `admission.k8s.io/v1`, as typed structures, in one module.

`parse_review` turns the request body into an `AdmissionRequest` or raises `ReviewError` with a
reason a person can act on (the app answers 400 with it, never a 500); `render_response` is the one
pure function that builds the response document. Nothing here knows about rules, HTTP or the
cluster, so the golden tests of this module pin the protocol on its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gate.model.shapes import shape_problem

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

#: The one body limit of /validate (`--max-body-bytes`): the review parser's, the app's
#: (`webhook.app`, which reads one more of a chunked body), the HTTPS server's
#: `Limits.max_body_bytes` (one more, so the app can tell "too large") and the chart's
#: `server.tls.maxBodyBytes` come from it or are checked against it
#: (tests/unit/test_body_limit.py). The API server takes request bodies up to 3 MiB and stores
#: objects up to etcd's 1.5 MiB: an UPDATE's review carries both, so 4 MiB holds every real
#: review and little else.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
#: How deeply objects and lists may nest in a review. Kubernetes objects nest about 10 levels
#: (a pod template's volume source is 8); 100 leaves room for any custom resource and stops
#: a body built to exhaust the parser's recursion.
MAX_DEPTH = 100


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request we can decide; the message says why."""


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who makes the request, as the API server authenticated them."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The fields of `request` the webhook reads."""

    uid: str
    kind: GroupVersionKind
    resource: str
    operation: str
    name: str
    namespace: str
    user: UserInfo
    old_object: dict[str, Any] | None = field(default=None, repr=False)
    #: `request.object`: the object after an UPDATE (for a DELETE, usually absent).
    new_object: dict[str, Any] | None = field(default=None, repr=False)
    dry_run: bool = False
    sub_resource: str = ""

    @property
    def api_version(self) -> str:
        """`apps/v1`, or `v1` for the core group."""
        v = self.kind
        return f"{v.group}/{v.version}" if v.group else v.version


@dataclass(frozen=True, slots=True)
class Status:
    """`response.status` of a refusal: HTTP-like code, a stable reason, a message."""

    code: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """What the webhook answers for one request."""

    uid: str
    allowed: bool
    status: Status | None = None
    warnings: tuple[str, ...] = ()


def _require(mapping: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = mapping.get(key)
    if not isinstance(value, kind):
        names: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}
        expected = names.get(kind, kind.__name__)
        if value is None:
            raise ReviewError(f"{where}.{key} is missing")
        raise ReviewError(f"{where}.{key} must be {expected}, not {type(value).__name__}")
    return value


def parse_review(body: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> AdmissionRequest:
    """Parse and validate an AdmissionReview v1 request body."""
    req = _request_of(_document(body, max_bytes))
    uid = _require(req, "uid", str, "request")
    if not uid:
        raise ReviewError("request.uid is empty")
    gvk = _require(req, "kind", dict, "request")
    resource = _mapping(req.get("resource"))
    user = _mapping(req.get("userInfo"))
    groups = user.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ReviewError("request.userInfo.groups must be a list of strings")
    kind = (str(gvk.get("group") or ""), str(gvk.get("kind") or ""))
    old = _object(req, "oldObject", kind)
    new = _object(req, "object", kind)
    dry_run = req.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ReviewError("request.dryRun must be a boolean")
    return AdmissionRequest(
        uid=uid,
        kind=GroupVersionKind(
            kind[0], str(gvk.get("version") or ""), _require(gvk, "kind", str, "request.kind")
        ),
        resource=str(resource.get("resource") or ""),
        operation=_require(req, "operation", str, "request"),
        name=str(req.get("name") or ""),
        namespace=str(req.get("namespace") or ""),
        user=UserInfo(str(user.get("username") or ""), tuple(groups), str(user.get("uid") or "")),
        old_object=old,
        new_object=new,
        dry_run=dry_run,
        sub_resource=str(req.get("subResource") or ""),
    )


def _document(body: bytes, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object no larger and no deeper than the limits."""
    if len(body) > max_bytes:
        raise ReviewError(f"body of {len(body)} bytes exceeds the limit of {max_bytes} bytes")
    if not body.strip():
        raise ReviewError("empty body: expected an AdmissionReview (admission.k8s.io/v1)")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReviewError(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise ReviewError(f"body nests deeper than {MAX_DEPTH} levels") from None
    if isinstance(doc, dict | list):
        _check_depth(doc)
    if not isinstance(doc, dict):
        raise ReviewError(f"body must be a JSON object, not {type(doc).__name__}")
    return doc


def _request_of(doc: dict[str, Any]) -> dict[str, Any]:
    """`request` of an AdmissionReview v1 document."""
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise ReviewError(
            f"expected apiVersion {API_VERSION} kind {KIND}, got apiVersion {api_version!r} "
            f"kind {kind!r} (register the webhook with admissionReviewVersions: [v1])"
        )
    request: dict[str, Any] = _require(doc, "request", dict, "AdmissionReview")
    return request


def _mapping(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else an empty one (optional parts of the request)."""
    return value if isinstance(value, dict) else {}


def _check_depth(doc: dict[str, Any] | list[Any], limit: int = MAX_DEPTH) -> None:
    """Refuse a document that nests deeper than `limit` (walked without recursion). `json.loads`
    makes plain dicts and lists, so their exact types are compared: this runs on every review."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        if depth > limit:
            raise ReviewError(f"body nests deeper than {limit} levels")
        for child in value.values() if type(value) is dict else value:
            if type(child) is dict or type(child) is list:
                push((child, depth + 1))


def _object(req: dict[str, Any], key: str, kind: tuple[str, str]) -> dict[str, Any] | None:
    """`request.object` or `request.oldObject`, checked as the `kind` the request names (the
    webhook decides by `request.kind`, whatever the object says): None when absent."""
    obj = req.get(key)
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ReviewError(f"request.{key} must be an object, not {type(obj).__name__}")
    _check_object(obj, f"request.{key}", kind)
    return obj


def _check_object(obj: dict[str, Any], where: str, kind: tuple[str, str]) -> None:
    """The parts of an object the rules read must have the shape the API server gives them."""
    problem = shape_problem(obj, kind)
    if problem is not None:
        raise ReviewError(f"{where}.{problem}")


def render_response(response: AdmissionResponse) -> dict[str, Any]:
    """The AdmissionReview document for a response: the one place its shape is decided."""
    out: dict[str, Any] = {"uid": response.uid, "allowed": response.allowed}
    if response.status is not None:
        out["status"] = {
            "code": response.status.code,
            "reason": response.status.reason,
            "message": response.status.message,
        }
    if response.warnings:
        out["warnings"] = list(response.warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": out}
