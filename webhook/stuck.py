"""The stuck-deletion detector of the webhook process: `gate doctor` on a timer.

Every pass lists the ledger (watches are fast, lists are complete), diagnoses every deletion asked
for more than `older_than` ago, publishes how many objects are in each state
(`prune_gate_stuck_objects{kind,state}`) and records a `DeletionStuck` Warning Event once per
object (by uid), naming what it waits on and the fix. It only reads and reports: acting is
`gate heal`'s, with its own identity. Its Events come from the API server's own lists, not from a
review, so they are recorded with or without `--client-ca`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from gate.engine.doctor import Doctor, State, Thresholds
from gate.engine.policy import Policy
from gate.kube.ledger import read_ledger
from gate.model.errors import GateError
from gate.model.events import EventSpec
from gate.sources.clock import utc_now
from webhook.events import EventSink

log = logging.getLogger("prune_gate.webhook.stuck")

#: The Event reason of a deletion found stuck.
DELETION_STUCK = "DeletionStuck"
#: Kinds whose every state is published (0 included), so an alert sees a resolved one drop.
KINDS = ("PersistentVolumeClaim", "PersistentVolume", "Pod", "Namespace")


class StuckDetector:
    """`run_once` is one pass; `start` runs one once `ready` (the watch cache has listed), then
    one every `interval` seconds."""

    def __init__(
        self,
        lister: Any,
        events: EventSink,
        policy: Policy,
        interval: float,
        thresholds: Thresholds,
        now: Callable[[], dt.datetime] = utc_now,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.lister = lister
        self.events = events
        self.policy = policy
        self.interval = interval
        self.thresholds = thresholds
        self.now = now
        self.ready = ready
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._reported: set[str] = set()
        self.passes = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stuck-detector", daemon=True)

    def counts(self) -> dict[tuple[str, str], int]:
        """Objects per (kind, state) of the last pass, with 0 for every state of KINDS; nothing
        before the first pass (no pass is not "nothing stuck")."""
        with self._lock:
            if not self.passes:
                return {}
            out = {(kind, s.value): 0 for kind in KINDS for s in State}
            out.update(self._counts)
            return out

    def run_once(self) -> None:
        ledger = read_ledger(
            self.lister, self.policy.live_page_size, None, self.policy.guarded_kinds
        )
        doctor = Doctor(ledger, self.now(), self.thresholds)
        found = [d for root in doctor.stuck(None) for d in root.walk()]
        counts = Counter((d.ref.kind, d.state.value) for d in found)
        for d in found:
            if d.uid in self._reported or d.state is State.SHUTTING_DOWN:
                continue
            fix = f"; fix: {d.fixes[0]}" if d.fixes else ""
            self.events.submit(
                EventSpec(
                    DELETION_STUCK,
                    f"{d.state.value}: {d.reason}{fix} (gate doctor {d.ref.kubectl()})",
                    d.ref,
                    d.api_version,
                    d.uid,
                )
            )
            self._reported.add(d.uid)
        # An object that is gone is never stuck again (its uid is not reused): forget it.
        self._reported &= {d.uid for d in found}
        with self._lock:
            self._counts = counts
            self.passes += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def guarded_pass(self) -> bool:
        """One pass whose failure is logged and counted, never raised: a dead detector thread
        would read as "nothing stuck". True when it succeeded."""
        try:
            self.run_once()
        except GateError as exc:
            log.error("stuck-deletion pass failed", extra={"error": str(exc)})
        except Exception as exc:
            log.exception("stuck-deletion pass crashed", extra={"error": repr(exc)})
        else:
            return True
        with self._lock:
            self.errors += 1
        return False

    def _run(self) -> None:
        # Not while the watch cache lists the same kinds: one full list at a time at start-up.
        while not self.ready():
            if self._stop.wait(1.0):
                return
        while not self._stop.is_set():
            self.guarded_pass()
            self._stop.wait(self.interval)
