"""The watch cache: list, then watch, every kind the admission rules read; re-list on a timer.

Watches are fast; lists are complete. Each kind has one thread that lists it (paginated, raw JSON
into `gate.engine.livestate.LiveState`, which keeps only small projections), then watches from the
list's resourceVersion, and lists again when the resync period passes, when the API answers `410
Gone`, or after any error. An exception in a watch thread is logged and counted (`watch_restarts`)
and the watch starts over after a backoff: a thread that dies quietly would leave a cache that looks
fine and is not.

The request path never calls the API server: it reads `state` under `lock`. The cache is ready
when every kind the rules read is *live*: listed, its watch stream still healthy, and heard from
(an event, a bookmark, or a watch the server ended on time) within the policy's `maxCacheAge`.
A stream that errors, answers 410, breaks or goes silent makes its kind stale at once, until it
has listed again. Silence is caught by the socket: each watch asks the server to end it after
`watch_seconds` (with bookmarks), and the client read times out a little after that, so a stream
stalled behind a paused proxy raises instead of hanging, and a quiet cluster stays fresh because
every watch ends and restarts on time.

Custom resources are counted for `CRD_HOLDS_RESOURCES` by a metadata-only list and watch per
CustomResourceDefinition, started and stopped as CRDs come and go. One kind that cannot be
listed (a CRD in a bad state, a group RBAC does not grant) is logged, reported per kind in
/metrics, and left out of readiness: deleting its CRD is decided by a count read live at
admission instead, and refused with `RESOURCES_UNCOUNTED` when even that fails. Custom kinds the
policy guards (VolumeSnapshots and the stateful catalogue's kinds, by default) are also watched in
full, as rule kinds, once a CRD serves them: the Namespace rule reads them, so they are part of
readiness (the chart's ClusterRole grants list and watch on them; a kind no CRD serves is never
listed).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gate.engine.fence import Lease, parse_lease
from gate.engine.livestate import LiveState, ref_of, served_custom_kind
from gate.engine.policy import Policy
from gate.kube.client import METADATA, METADATA_LIST, ApiStatusError, GoneError, request_json
from gate.kube.resources import RESOURCES
from gate.kube.watch import ListedItems, WatchStream, open_watch
from gate.model.errors import UncountedError
from gate.model.events import EventSpec
from gate.model.liveview import LiveObject, LiveView, PodUse, Volume
from gate.model.refs import ObjectRef, api_path, group_kind, group_of
from webhook.events import EventSink

log = logging.getLogger("prune_gate.webhook.cache")

#: Event reason (Warning) on a CRD whose custom resources cannot be listed.
UNCOUNTED_EVENT = "ResourcesUncounted"
#: How long a custom kind's list or watch must keep failing before it is reported (an Event on
#: its CRD): a CRD just created is not served for a moment, which is no outage.
REPORT_AFTER_SECONDS = 30.0
CRD_API_VERSION = "apiextensions.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class KindSpec:
    """Where a kind is listed and watched."""

    api_version: str
    kind: str
    plural: str
    namespace: str = ""
    field_selector: str = ""
    metadata_only: bool = False

    @property
    def group(self) -> str:
        return group_of(self.api_version)

    @property
    def path(self) -> str:
        return api_path(self.api_version, self.plural, self.namespace)

    @property
    def label(self) -> str:
        return group_kind(self.group, self.kind)

    @property
    def selector(self) -> list[tuple[str, str]]:
        """The query that narrows its list and its watch (one object, for the fence's Lease)."""
        return [("fieldSelector", self.field_selector)] if self.field_selector else []


#: The built-in kinds every admission rule may read: the table `gate.kube.resources.RESOURCES`, as
#: `gate check --live` reads (the doors must see the same world). Custom kinds the policy guards,
#: such as VolumeSnapshots, are added when their CRD is served (`WatchCache.watch_custom_kind`).
STATIC_KINDS: tuple[KindSpec, ...] = tuple(
    KindSpec(r.api_version, r.kind, r.plural) for r in RESOURCES if not r.optional
)

#: Seconds the server keeps one watch open (`timeoutSeconds`); the environment variable
#: PRUNE_GATE_WATCH_SECONDS overrides it (tests use a few seconds to see a stall quickly).
DEFAULT_WATCH_SECONDS = 60
#: Timeout of a live count of custom resources at admission (the API server's own budget for
#: the webhook is a few seconds).
LIVE_COUNT_TIMEOUT = 3.0


def default_watch_seconds() -> int:
    """The watch timeout: PRUNE_GATE_WATCH_SECONDS when set (at least 1), else 60 s."""
    raw = os.environ.get("PRUNE_GATE_WATCH_SECONDS", "")
    return max(1, int(raw)) if raw.isdigit() else DEFAULT_WATCH_SECONDS


class CacheView(Protocol):
    """What the app reads from a cache: the state under its lock, readiness, freshness."""

    lock: threading.RLock

    @property
    def state(self) -> LiveView: ...

    def fence_lease(self) -> Lease | None: ...

    def ready(self) -> tuple[bool, str]: ...

    def stats(self) -> CacheStats: ...


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Figures for /metrics."""

    objects: int
    pods: int
    age_seconds: float
    restarts: dict[str, int]
    #: Every watched kind: 1.0 when its list is in and its watch is alive, else 0.0.
    live: dict[str, bool] = field(default_factory=dict)
    #: Custom kinds whose resources are not counted now (their CRD's deletion is decided live).
    uncounted: tuple[str, ...] = ()


class Sink(Protocol):
    """Where one kind's list and watch events go. `replace` gets the items of a complete list
    as they are read, page by page: it iterates them once, to the end."""

    def replace(self, items: Iterable[dict[str, Any]]) -> None: ...

    def apply(self, event_type: str, obj: dict[str, Any]) -> None: ...


#: How often the cache checks its own readiness, to log transitions nobody asked about.
READINESS_CHECK_SECONDS = 1.0

#: Objects applied per lock hold on a (re-)list, so requests never wait for a whole list.
BATCH = 256


def _rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class _StateSink:
    """One kind into the LiveState.

    A re-list applies only what changed since the state last saw it (by resourceVersion), in
    batches, each under the lock: re-indexing 10,000 unchanged pods in one lock hold would stall
    every request for the time it takes (about 150 ms).
    """

    def __init__(self, cache: WatchCache, spec: KindSpec) -> None:
        self.cache, self.spec = cache, spec
        self.versions: dict[ObjectRef, str] = {}

    def _ref(self, obj: dict[str, Any]) -> ObjectRef:
        return ref_of(obj, self.spec.api_version, self.spec.kind)

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        """Apply a complete list as it arrives: what changed, a batch per lock hold; then,
        once the list is whole, forget what it no longer has."""
        seen: set[ObjectRef] = set()
        batch: list[tuple[ObjectRef, dict[str, Any]]] = []
        for o in items:
            ref = self._ref(o)
            seen.add(ref)
            if not _rv(o) or self.versions.get(ref) != _rv(o):
                batch.append((ref, o))
                if len(batch) >= BATCH:
                    self._upsert(batch)
                    batch = []
        self._upsert(batch)
        gone = [ref for ref in self.versions if ref not in seen]
        live = self.cache.live
        for i in range(0, len(gone), BATCH):
            with self.cache.lock:
                for ref in gone[i : i + BATCH]:
                    live.delete(ref)
                    self.versions.pop(ref, None)

    def _upsert(self, batch: list[tuple[ObjectRef, dict[str, Any]]]) -> None:
        with self.cache.lock:
            for ref, o in batch:
                self.cache.live.upsert(o, self.spec.api_version, self.spec.kind)
                self.versions[ref] = _rv(o)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        ref = self._ref(obj)
        with self.cache.lock:
            if event_type == "DELETED":
                self.cache.live.delete(ref)
                self.versions.pop(ref, None)
            else:
                self.cache.live.upsert(obj, self.spec.api_version, self.spec.kind)
                self.versions[ref] = _rv(obj)


class _CrdSink(_StateSink):
    """CRDs go into the state, and start or stop the count of their custom resources."""

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        crds = list(items)  # a few hundred at most
        super().replace(crds)
        self.cache.sync_custom_kinds(crds)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        super().apply(event_type, obj)
        if event_type == "DELETED":
            self.cache.forget_custom_kind(obj)
        else:
            self.cache.watch_custom_kind(obj)


class _LeaseSink:
    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        leases = list(items)  # one, by its name
        with self.cache.lock:
            self.cache.lease = parse_lease(leases[0]) if leases else None

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        with self.cache.lock:
            self.cache.lease = None if event_type == "DELETED" else parse_lease(obj)


class _CountSink:
    """Custom resources of one kind: only their identities, to count them."""

    def __init__(self, cache: WatchCache, group: str, kind: str) -> None:
        self.cache, self.group, self.kind = cache, group, kind
        self.keys: set[tuple[str, str]] = set()

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return (str(meta.get("namespace", "")), str(meta.get("name", "")))

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        keys = {self._key(o) for o in items}
        with self.cache.lock:
            self.keys = keys
            self.cache.live.set_custom_resource_count(self.group, self.kind, len(self.keys))

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        with self.cache.lock:
            if event_type == "DELETED":
                self.keys.discard(self._key(obj))
            else:
                self.keys.add(self._key(obj))
            self.cache.live.set_custom_resource_count(self.group, self.kind, len(self.keys))


class Watcher:
    """One kind: list, watch, re-list; forever, until stopped.

    `synced` is True only while the kind's state can be trusted: set by a complete list, cleared
    the moment its stream fails (an error, a 410, a broken or silent connection), so the kind is
    stale until the next list is in. A watch the server ends on time keeps it synced.
    """

    def __init__(
        self,
        api: Any,
        spec: KindSpec,
        sink: Sink,
        resync_seconds: float,
        watch_seconds: int = DEFAULT_WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_failure: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.api, self.spec, self.sink = api, spec, sink
        #: Told once per outage (why, and whether RBAC forbade it), not every retry: at once for
        #: a 403, once errors have gone on for REPORT_AFTER_SECONDS for anything else (a CRD
        #: just created answers 404 for a moment before it is served: no news).
        self.on_failure = on_failure
        self._reported = False
        self._failing_since: float | None = None
        self.resync_seconds = resync_seconds
        self.watch_seconds = watch_seconds
        self.clock = clock
        self.synced = False
        self.last_heard = clock()
        self.restarts = 0
        #: Why the kind is stale now ("" while it is live or has never been listed).
        self.problem = ""
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._stream_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"watch-{spec.label}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread: interrupt a blocked watch read, then wait for it."""
        self._stop.set()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.abort()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                rv = self.list_once()
                backoff = 0.5
                self._watch_until_resync(rv)
            except GoneError:
                self._stale("watch expired (410 Gone)")
                log.info("watch expired (410 Gone), listing again", extra={"kind": self.spec.label})
            except ApiStatusError as exc:
                if self._stop.is_set():
                    break
                if exc.status == 403 and self.spec.metadata_only:
                    self._forbidden(exc)
                    continue
                self._failed(exc, backoff)
                backoff = min(backoff * 2, 15.0)
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._failed(exc, backoff)
                backoff = min(backoff * 2, 15.0)

    def _stale(self, why: str) -> None:
        """The kind's state can no longer be trusted: stale until it has listed again."""
        self.synced = False
        self.problem = why

    def _report(self, forbidden: bool) -> None:
        if self._reported or self.on_failure is None:
            return
        self._reported = True
        try:
            self.on_failure(self.problem, forbidden)
        except Exception as exc:  # a report must never stop the watch
            log.error("could not report a failing watch", extra={"error": repr(exc)})

    def _failed(self, exc: Exception, backoff: float) -> None:
        self.restarts += 1
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        self._stale(f"{type(exc).__name__}: {exc}")
        if now - self._failing_since >= REPORT_AFTER_SECONDS:
            self._report(forbidden=False)
        log.error(
            "watch failed, kind stale until it lists again",
            extra={"kind": self.spec.label, "error": self.problem},
        )
        self._stop.wait(backoff)

    def _forbidden(self, exc: ApiStatusError) -> None:
        """Custom resources the webhook may not list stay uncounted, and are tried again later.

        RBAC narrowed to some groups (the chart's `rbac.countedResources`) must not keep every
        replica unready: custom kinds are not part of readiness, and deleting the CRD of an
        uncounted kind is decided by a live count at admission (`RESOURCES_UNCOUNTED` when that
        is forbidden too).
        """
        self.restarts += 1
        self._stale(f"forbidden: {exc}")
        self._report(forbidden=True)
        log.warning(
            "may not list these custom resources: deleting their CRD is refused as "
            "RESOURCES_UNCOUNTED; grant list on them (rbac.countedResources)",
            extra={"kind": self.spec.label, "error": str(exc)},
        )
        self._stop.wait(self.resync_seconds)

    def list_once(self) -> str:
        """One complete, paginated list into the sink; returns its resourceVersion."""
        accept = METADATA_LIST if self.spec.metadata_only else "application/json"
        listed = ListedItems(self.api, self.spec.path, self.spec.selector, accept=accept)
        self.sink.replace(listed)
        rv = listed.resource_version
        self.last_heard = self.clock()
        self.synced = True
        self.problem = ""
        self._reported = False
        self._failing_since = None
        return rv

    def _watch_until_resync(self, rv: str) -> None:
        deadline = self.clock() + self.resync_seconds
        while not self._stop.is_set() and self.clock() < deadline:
            left = max(1, min(self.watch_seconds, int(deadline - self.clock())))
            rv = self._watch_once(rv, left)
            self.last_heard = self.clock()

    def _watch_once(self, rv: str, seconds: int) -> str:
        """One watch the server ends after `seconds`; a read silent for longer raises."""
        accept = METADATA if self.spec.metadata_only else "application/json"
        with open_watch(
            self.api, self.spec.path, rv, seconds, self.spec.selector, accept
        ) as stream:
            with self._stream_lock:
                self._stream = stream
            try:
                if self._stop.is_set():
                    return rv
                for event in stream:
                    if event.type != "BOOKMARK":
                        self.sink.apply(event.type, event.object)
                    rv = event.resource_version or rv
                    self.last_heard = self.clock()
            finally:
                with self._stream_lock:
                    self._stream = None
        return rv


def custom_kind_of(crd: dict[str, Any]) -> KindSpec | None:
    """The metadata-only KindSpec that counts the custom resources of a CRD, if it is served."""
    served = served_custom_kind(crd)
    if served is None:
        return None
    return KindSpec(served.api_version, served.kind, served.plural, metadata_only=True)


def _freeze_long_lived() -> None:
    """Take every object alive now (the cache just listed) out of the cyclic collector's reach:
    a full collection walks every tracked object, ~36 ms over 10,000 pods, and whichever
    request it interrupts waits that long. The cache's objects are trees of dicts and lists
    without cycles, freed by reference counting when replaced, so the collector has nothing
    to find among them; what is allocated later is collected as before. No collection first:
    this may run on a review's path (`ready()`), and freezing alone costs nothing."""
    gc.freeze()


class WatchCache:
    """Every watched kind, the LiveState they feed, and the fence Lease."""

    def __init__(
        self,
        api: Any,
        policy: Policy,
        watch_seconds: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        events: EventSink | None = None,
    ) -> None:
        self.api = api
        self.policy = policy
        #: Where a custom kind that cannot be counted is reported, as an Event on its CRD.
        self.events = events
        self.lock = threading.RLock()
        self.live = LiveState(policy.guarded_kinds)
        self.lease: Lease | None = None
        self.clock = clock
        self.watch_seconds = watch_seconds or default_watch_seconds()
        self._stopped = False
        self.watchers: list[Watcher] = [
            self._watcher(
                spec, _CrdSink(self, spec) if spec.kind == "CustomResourceDefinition" else None
            )
            for spec in STATIC_KINDS
        ]
        fence = policy.webhook.fence
        if fence is not None:
            spec = KindSpec(
                "coordination.k8s.io/v1",
                "Lease",
                "leases",
                namespace=fence[0],
                field_selector=f"metadata.name={fence[1]}",
            )
            self.watchers.append(self._watcher(spec, _LeaseSink(self)))
        #: Counts of custom resources, per (group, kind): not part of readiness.
        self.custom: dict[tuple[str, str], Watcher] = {}
        #: Guarded custom kinds (VolumeSnapshots, the stateful catalogue's) watched in full for the
        #: rules once their CRD is served: part of readiness.
        self.rule_kinds: dict[tuple[str, str], Watcher] = {}
        self._view = _CacheLiveView(self)
        #: The readiness last logged (None: never ready yet); see `_note_readiness`.
        self._was_ready: bool | None = None
        self._readiness_lock = threading.Lock()
        self._closing = threading.Event()
        self._monitor = threading.Thread(
            target=self._watch_readiness, name="cache-readiness", daemon=True
        )

    def _watcher(
        self,
        spec: KindSpec,
        sink: Sink | None = None,
        on_failure: Callable[[str, bool], None] | None = None,
    ) -> Watcher:
        return Watcher(
            self.api,
            spec,
            sink or _StateSink(self, spec),
            self.policy.webhook.resync_seconds,
            self.watch_seconds,
            self.clock,
            on_failure,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for w in self.watchers:
            w.start()
        self._monitor.start()

    def stop(self) -> None:
        with self.lock:
            self._stopped = True
            watchers = [*self.watchers, *self.custom.values(), *self.rule_kinds.values()]
        self._closing.set()
        for w in watchers:
            w.stop()
        if self._monitor.is_alive():
            self._monitor.join(timeout=10)

    def _watch_readiness(self) -> None:
        """Check readiness every second, so its transitions are logged without any request."""
        while not self._closing.wait(READINESS_CHECK_SECONDS):
            self.ready()

    def wait_ready(self, timeout: float) -> bool:
        """Block until ready (or the timeout); for the CLI and tests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready()[0]:
                return True
            time.sleep(0.05)
        return False

    # --- custom resources --------------------------------------------------------------------

    def watch_custom_kind(self, crd: dict[str, Any]) -> None:
        spec = custom_kind_of(crd)
        if spec is None:
            return
        key = (spec.group, spec.kind)
        started: list[Watcher] = []
        with self.lock:
            if self._stopped:
                return
            report = self._uncounted_reporter(crd, spec)
            if key not in self.custom:
                self.custom[key] = self._watcher(spec, _CountSink(self, *key), report)
                started.append(self.custom[key])
            if key in self.policy.guarded_kinds and key not in self.rule_kinds:
                full = KindSpec(spec.api_version, spec.kind, spec.plural)
                # The count's watcher alone reports: one Event per outage, not two.
                self.rule_kinds[key] = self._watcher(full)
                started.append(self.rule_kinds[key])
        for w in started:
            w.start()

    def _uncounted_reporter(
        self, crd: dict[str, Any], spec: KindSpec
    ) -> Callable[[str, bool], None] | None:
        """A Warning Event on the CRD when its kind cannot be listed: the metric and the log
        are the operator's; the Event is for whoever looks at the CRD and wonders why its
        deletion is refused."""
        events = self.events
        if events is None:
            return None
        meta = crd.get("metadata") or {}
        name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
        ref = ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "", name)

        def report(problem: str, forbidden: bool) -> None:
            fix = (
                f"grant list and watch on {spec.plural}.{spec.group} (chart value "
                "rbac.countedResources)"
                if forbidden
                else f"look at the CRD's status.conditions (kubectl get crd {name} -o yaml)"
            )
            message = (
                f"prune-gate cannot list {spec.plural}.{spec.group}: {problem}. Until it can, "
                "deleting this CRD is decided by a count read live at admission (refused as "
                f"RESOURCES_UNCOUNTED if that fails too); other kinds are unaffected. Fix: {fix}"
            )
            events.submit(EventSpec(UNCOUNTED_EVENT, message, ref, CRD_API_VERSION, uid))

        return report

    def forget_custom_kind(self, crd: dict[str, Any]) -> None:
        spec = custom_kind_of(crd)
        if spec is None:
            return
        self._drop_custom_kind((spec.group, spec.kind))

    def _drop_custom_kind(self, key: tuple[str, str]) -> None:
        """Stop counting one kind of custom resources: its CRD is gone."""
        with self.lock:
            popped = (self.custom.pop(key, None), self.rule_kinds.pop(key, None))
            stopping = [w for w in popped if w is not None]
            self.live.set_custom_resource_count(*key, 0)
        for w in stopping:
            w.stop()
        with self.lock:
            for ref in [r for r in self.live.objects if (r.group, r.kind) == key]:
                self.live.delete(ref)

    def sync_custom_kinds(self, crds: list[dict[str, Any]]) -> None:
        wanted = {(s.group, s.kind): c for c in crds if (s := custom_kind_of(c)) is not None}
        with self.lock:
            gone = [k for k in self.custom if k not in wanted]
        for key in gone:
            self._drop_custom_kind(key)
        for crd in wanted.values():
            self.watch_custom_kind(crd)

    # --- CacheView ---------------------------------------------------------------------------

    @property
    def state(self) -> LiveView:
        return self._view

    def fence_lease(self) -> Lease | None:
        return self.lease

    def _all(self) -> list[Watcher]:
        with self.lock:
            return [*self.watchers, *self.rule_kinds.values(), *self.custom.values()]

    def _decisive(self) -> list[Watcher]:
        """The watchers readiness depends on: every kind the rules read, not the counts."""
        with self.lock:
            return [*self.watchers, *self.rule_kinds.values()]

    def age(self) -> float:
        """Seconds since the kind heard from longest ago last heard from the API server."""
        now = self.clock()
        return max((now - w.last_heard for w in self._decisive()), default=0.0)

    def uncounted(self) -> list[str]:
        """Custom kinds whose count is not live now, e.g. a CRD whose list fails."""
        with self.lock:
            return sorted(w.spec.label for w in self.custom.values() if not w.synced)

    def custom_resource_count(self, group: str, kind: str) -> int | None:
        """The count of a kind's custom resources: from its watch while that is live, else read
        from the API server now; `UncountedError` when it cannot be read."""
        with self.lock:
            w = self.custom.get((group, kind))
            if w is None or w.synced:
                return self.live.custom_resource_count(group, kind)
        return count_live(self.api, w.spec)

    def ready(self) -> tuple[bool, str]:
        ready, why = self._readiness()
        self._note_readiness(ready, why)
        return ready, why

    def _readiness(self) -> tuple[bool, str]:
        watchers = self._decisive()
        stale = [w for w in watchers if not w.synced]
        if stale:
            broken = [f"{w.spec.label} ({w.problem})" for w in stale if w.problem]
            if broken:
                return False, f"watch broken, listing again: {'; '.join(sorted(broken))}"
            names = ", ".join(sorted(w.spec.label for w in stale))
            return False, f"waiting for the first list of {names}"
        age, limit = self.age(), self.policy.webhook.max_cache_age_seconds
        if age > limit:
            return False, f"cache is {age:.0f}s old, older than maxCacheAge {limit:.0f}s"
        return True, "ready"

    def _note_readiness(self, ready: bool, why: str) -> None:
        """Log one line when the cache first becomes ready, and at every later transition."""
        with self._readiness_lock:
            if ready == self._was_ready or (self._was_ready is None and not ready):
                return  # no change; and "not ready yet" before the first ready is no news
            self._was_ready = ready
            if ready:
                _freeze_long_lived()
            stats = self.stats()
            log.log(
                logging.INFO if ready else logging.WARNING,
                "watch cache ready" if ready else "watch cache not ready",
                extra={
                    "ready": ready,
                    "reason": why,
                    "objects": stats.objects + stats.pods,
                    "counts": self.counts(),
                    "ageSeconds": round(stats.age_seconds, 1),
                },
            )

    def counts(self) -> dict[str, int]:
        """Objects in the cache by kind (`Kind` or `Kind.group`), and the custom resources
        counted per CRD."""
        with self.lock:
            out: dict[str, int] = {"Pod": len(self.live.pods)}
            for ref in self.live.objects:
                out[ref.group_kind] = out.get(ref.group_kind, 0) + 1
            for group, kind in self.custom:
                n = self.live.custom_resource_count(group, kind)
                if n is not None:
                    out[group_kind(group, kind)] = n
        return dict(sorted(out.items()))

    def stats(self) -> CacheStats:
        with self.lock:
            objects, pods = len(self.live.objects), len(self.live.pods)
        watchers = self._all()
        return CacheStats(
            objects,
            pods,
            self.age(),
            {w.spec.label: w.restarts for w in watchers},
            {w.spec.label: w.synced for w in watchers},
            tuple(self.uncounted()),
        )


def count_live(api: Any, spec: KindSpec) -> int:
    """Count a kind's custom resources with one metadata-only list (`limit=1`, plus
    `remainingItemCount`): enough to tell none from some. `UncountedError` when it fails."""
    try:
        page = request_json(
            api,
            "GET",
            spec.path,
            [("limit", 1)],
            accept=METADATA_LIST,
            timeout=(LIVE_COUNT_TIMEOUT, LIVE_COUNT_TIMEOUT),
        )
    except Exception as exc:
        raise UncountedError(
            f"{spec.label}: the custom resources cannot be counted: {type(exc).__name__}: {exc}"
        ) from None
    items = [i for i in page.get("items") or () if isinstance(i, dict)]
    remaining = (page.get("metadata") or {}).get("remainingItemCount")
    if items and (page.get("metadata") or {}).get("continue") and remaining is None:
        return len(items) + 1  # more than one; the exact figure does not change the verdict
    return len(items) + (int(remaining) if isinstance(remaining, int) else 0)


class _CacheLiveView:
    """The cache's LiveState as the rules see it, with custom resource counts that fall back to a
    live read for a kind whose watch is not live (and `UncountedError` when that fails too)."""

    def __init__(self, cache: WatchCache) -> None:
        self._cache = cache

    def get(self, ref: ObjectRef) -> LiveObject | None:
        return self._cache.live.get(ref)

    def claim_users(self, namespace: str, claim: str) -> list[PodUse]:
        return self._cache.live.claim_users(namespace, claim)

    def claim_consumers(self, namespace: str, claim: str) -> list[ObjectRef]:
        return self._cache.live.claim_consumers(namespace, claim)

    def guarded_in_namespace(self, namespace: str) -> list[ObjectRef]:
        return self._cache.live.guarded_in_namespace(namespace)

    def custom_resource_count(self, group: str, kind: str) -> int | None:
        return self._cache.custom_resource_count(group, kind)

    def bound_volume(self, namespace: str, claim: str) -> Volume | None:
        return self._cache.live.bound_volume(namespace, claim)

    def ready_snapshots(self, namespace: str, claim: str) -> list[str]:
        return self._cache.live.ready_snapshots(namespace, claim)

    def dependents(self, owner: ObjectRef) -> list[ObjectRef]:
        return self._cache.live.dependents(owner)

    def owners(self, ref: ObjectRef) -> list[ObjectRef]:
        return self._cache.live.owners(ref)

    def release_members(self, namespace: str, release: str) -> list[ObjectRef]:
        return self._cache.live.release_members(namespace, release)

    def applied_by(self, parent: ObjectRef) -> list[ObjectRef] | None:
        return self._cache.live.applied_by(parent)


class StaticCache:
    """A cache that is already full: for tests, benchmarks and golden cases."""

    def __init__(self, live: LiveState, lease: Lease | None = None, ready: bool = True) -> None:
        self.lock = threading.RLock()
        self.live = live
        self.lease = lease
        self._ready = ready

    @property
    def state(self) -> LiveView:
        return self.live

    def fence_lease(self) -> Lease | None:
        return self.lease

    def ready(self) -> tuple[bool, str]:
        return (True, "ready") if self._ready else (False, "not ready (static cache)")

    def stats(self) -> CacheStats:
        return CacheStats(len(self.live.objects), len(self.live.pods), 0.0, {})
