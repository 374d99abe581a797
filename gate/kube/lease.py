"""Hold and release the speculation fence from CI: the I/O edge of `gate.engine.fence`.

A merge-queue job runs `gate fence hold --holder $SHA` before its speculative deploy (and again to
renew it during a long one) and `gate fence release --holder $SHA` after. Holding never takes a
fence another candidate holds and has not let expire; releasing never frees someone else's. Writes
carry the Lease's resourceVersion, so two jobs racing for the fence cannot both win.

Holding also records the Kubernetes user that holds it (asked of the API server with a
SelfSubjectReview) in the annotation `HOLDER_USER`: the webhook lets only that user clear,
backdate or shorten a held fence, so it needs to know who that is from the Lease itself.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from gate.engine.fence import HOLDER_USER, FenceState, FenceStatus, fence_status, parse_lease
from gate.kube.client import KubeClient, NotFoundError
from gate.model.errors import GateError

#: What `gate fence` needs, said on a 403.
LEASE_HINT = (
    "holding the speculation fence needs get, create and update on leases.coordination.k8s.io "
    "in the fence's namespace"
)


class FenceHeldError(GateError):
    """Another holder has the fence and it has not expired: the caller must wait (exit 1)."""

    def __init__(self, status: FenceStatus) -> None:
        self.status = status
        super().__init__(status.describe())


def _micro(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


def _read(api: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return api.get_json(_path(namespace, name), [], f"read Lease {namespace}/{name}")
    except NotFoundError:
        return None  # no such Lease (or, on a very old server, no Leases at all)


def whoami(api: KubeClient) -> str | None:
    """The user the API server authenticates this client as; None when it cannot say."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        review = api.request_json(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "ask who I am", body=body
        )
    except GateError:
        return None  # an old server, or RBAC without selfsubjectreviews: the holder goes unrecorded
    name = ((review.get("status") or {}).get("userInfo") or {}).get("username")
    return name if isinstance(name, str) and name else None


def _annotate(obj: dict[str, Any], user: str | None) -> None:
    meta = obj.setdefault("metadata", {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != HOLDER_USER}
    if user:
        annotations[HOLDER_USER] = user
    meta["annotations"] = annotations


def read_fence(api: KubeClient, namespace: str, name: str, now: dt.datetime) -> FenceStatus:
    """The fence as it is now."""
    obj = _read(api, namespace, name)
    return fence_status(parse_lease(obj) if obj else None, now)


def hold_fence(
    api: KubeClient,
    namespace: str,
    name: str,
    holder: str,
    duration_seconds: int,
    now: dt.datetime,
) -> FenceStatus:
    """Take or renew the fence for `holder`; FenceHeldError while another holds it."""
    obj = _read(api, namespace, name)
    status = fence_status(parse_lease(obj) if obj else None, now)
    if status.state is FenceState.HELD and status.holder != holder:
        raise FenceHeldError(status)
    spec: dict[str, Any] = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_seconds,
        "renewTime": _micro(now),
    }
    renewing = status.state is FenceState.HELD and status.holder == holder
    what = f"write Lease {namespace}/{name}"
    user = whoami(api)
    if obj is None:
        spec["acquireTime"] = _micro(now)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        _annotate(body, user)
        written = api.request_json("POST", _path(namespace), what, body=body)
    else:
        if not renewing:
            spec["acquireTime"] = _micro(now)
        obj["spec"] = {**(obj.get("spec") or {}), **spec}
        _annotate(obj, user)
        written = api.request_json("PUT", _path(namespace, name), what, body=obj)
    return fence_status(parse_lease(written), now)


def release_fence(
    api: KubeClient, namespace: str, name: str, holder: str, now: dt.datetime
) -> FenceStatus:
    """Free the fence if `holder` holds it (held or expired); leave another holder's alone."""
    obj = _read(api, namespace, name)
    status = fence_status(parse_lease(obj) if obj else None, now)
    if obj is None or status.holder != holder:
        return status
    obj["spec"] = {k: v for k, v in (obj.get("spec") or {}).items() if k != "holderIdentity"}
    _annotate(obj, None)
    written = api.request_json(
        "PUT", _path(namespace, name), f"write Lease {namespace}/{name}", body=obj
    )
    return fence_status(parse_lease(written), now)
