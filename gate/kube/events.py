"""Record a Kubernetes Event (core/v1) on an object: the body, and one POST through the client."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from gate.kube.client import request_json
from gate.model.events import MAX_EVENT_MESSAGE, EventSpec

#: `source.component` and `reportingComponent` of every Event prune-gate records.
COMPONENT = "prune-gate"


def event_body(event: EventSpec, now: dt.datetime, instance: str) -> dict[str, Any]:
    """The core/v1 Event for one EventSpec (cluster-scoped objects get theirs in `default`)."""
    ns = event.ref.namespace or "default"
    stamp = now.isoformat().replace("+00:00", "Z")
    involved: dict[str, Any] = {
        "apiVersion": event.api_version,
        "kind": event.ref.kind,
        "name": event.ref.name,
    }
    if event.ref.namespace:
        involved["namespace"] = event.ref.namespace
    if event.uid:
        involved["uid"] = event.uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{event.ref.name[:200]}.{uuid.uuid4().hex[:16]}",
            "namespace": ns,
        },
        "involvedObject": involved,
        "reason": event.reason,
        "message": event.message[:MAX_EVENT_MESSAGE],
        "type": "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def record_event(api: Any, event: EventSpec, now: dt.datetime, instance: str) -> None:
    """POST the Event; a failure raises the client's `ClusterError` (callers decide its weight)."""
    body = event_body(event, now, instance)
    path = f"/api/v1/namespaces/{body['metadata']['namespace']}/events"
    request_json(api, "POST", path, body=body, timeout=10, what=f"record Event {event.reason}")
