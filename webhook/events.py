"""Kubernetes Events (`PruneBlocked`, `PruneOverridden`, `PruneExempted`, `FenceExpired`) from a
background queue.

A refusal must reach the deployer quickly, and an Event is a courtesy to the person who looks at
the object later: so the handler only puts the Event on a bounded queue and answers; one thread
sends them. A full queue drops the Event (counted) rather than delaying or failing a response, and
an API error while sending is logged, never raised into a request. An Event the same as one
submitted within REPEAT_SECONDS is not sent again (counted): a deployer that retries a refused
deletion would otherwise post one per retry.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
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
    repeated: int = 0


class EventSink(Protocol):
    """Where the app hands Events; `submit` never blocks and never raises."""

    def submit(self, event: EventSpec) -> None: ...


class RecordingSink:
    """Keeps Events in a list: for tests and dry runs of the app."""

    def __init__(self) -> None:
        self.events: list[EventSpec] = []

    def submit(self, event: EventSpec) -> None:
        self.events.append(event)


#: An Event the same as one submitted this recently (the object, its uid, the reason and the
#: message) is not sent again. A deployer retrying a refused deletion, or bench_load's 500
#: refusals a second, would post an Event per refusal: each a POST from this worker's sender
#: thread, whose JSON and TLS take the interpreter lock from the reviews (a third of a worker at
#: that rate), and an Event write to etcd. client-go's EventCorrelator folds repeats the same way.
REPEAT_SECONDS = 60.0
#: Events remembered for that, at most; the least recently submitted is forgotten first.
REMEMBERED = 4096


class EventQueue:
    """A bounded queue and one sender thread."""

    def __init__(
        self,
        api: Any,
        maxsize: int = 1000,
        instance: str = "prune-gate",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.instance = instance
        self.queue: queue.Queue[EventSpec | None] = queue.Queue(maxsize)
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self.repeated = 0
        self._clock = clock
        #: When each Event was last submitted (called from the serving thread only).
        self._recent: OrderedDict[EventSpec, float] = OrderedDict()
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def counts(self) -> EventCounts:
        """Sent, failed and dropped so far, for /metrics."""
        return EventCounts(self.sent, self.failed, self.dropped, self.repeated)

    def submit(self, event: EventSpec) -> None:
        now = self._clock()
        last = self._recent.get(event)
        if last is not None and now - last < REPEAT_SECONDS:
            self.repeated += 1
            return
        self._recent[event] = now
        self._recent.move_to_end(event)
        if len(self._recent) > REMEMBERED:
            self._recent.popitem(last=False)
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
