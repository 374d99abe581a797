"""Kubernetes Events (`PruneBlocked`, `PruneOverridden`, `PruneExempted`, `FenceExpired`) from a
background queue.

A refusal must reach the deployer quickly, and an Event is a courtesy to the person who looks at
the object later: so the handler only puts the Event on a bounded queue and answers; one thread
sends them. A full queue drops the Event (counted) rather than delaying or failing a response, and
an API error while sending is logged, never raised into a request.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from gate.kube.events import record_event
from gate.model.events import EventSpec

log = logging.getLogger("prune_gate.webhook.events")


@dataclass(frozen=True, slots=True)
class EventCounts:
    """What became of the Events the app handed to its sink, read at each scrape."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0


class EventSink(Protocol):
    """Where the app hands Events; `submit` never blocks and never raises."""

    def submit(self, event: EventSpec) -> None: ...


class RecordingSink:
    """Keeps Events in a list: for tests and dry runs of the app."""

    def __init__(self) -> None:
        self.events: list[EventSpec] = []

    def submit(self, event: EventSpec) -> None:
        self.events.append(event)


class EventQueue:
    """A bounded queue and one sender thread."""

    def __init__(self, api: Any, maxsize: int = 1000, instance: str = "prune-gate") -> None:
        self.api = api
        self.instance = instance
        self.queue: queue.Queue[EventSpec | None] = queue.Queue(maxsize)
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def counts(self) -> EventCounts:
        """Sent, failed and dropped so far, for /metrics."""
        return EventCounts(self.sent, self.failed, self.dropped)

    def submit(self, event: EventSpec) -> None:
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            log.warning(
                "event queue full, event dropped",
                extra={"reason": event.reason, "object": event.ref.display()},
            )

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (within `timeout`), then end the thread."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(queue.Full):
            self.queue.put(None, timeout=timeout)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            event = self.queue.get()
            if event is None:
                return
            try:
                record_event(self.api, event, dt.datetime.now(dt.UTC), self.instance)
                self.sent += 1
            except Exception as exc:
                self.failed += 1
                log.error(
                    "could not record event",
                    extra={
                        "reason": event.reason,
                        "object": event.ref.display(),
                        "error": f"{type(exc).__name__}: {exc}",
                    },
                )
