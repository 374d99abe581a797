"""A Kubernetes Event to record on an object: what the webhook, and `gate heal` next, leave
behind for the person who looks at the object later (`kubectl get events`)."""

from __future__ import annotations

from dataclasses import dataclass

from gate.model.refs import ObjectRef

#: The longest Event message recorded: Events are read in `kubectl describe`, not archived.
MAX_EVENT_MESSAGE = 1024


@dataclass(frozen=True, slots=True)
class EventSpec:
    """A Warning Event on `ref`: its reason (a stable word), message and the object's uid."""

    reason: str
    message: str
    ref: ObjectRef
    api_version: str
    uid: str
