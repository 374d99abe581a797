"""The watch cache against a scripted API: pagination, watch events, 410 Gone, errors, readiness.

The fake speaks the ApiClient surface `gate.kube.client` uses (`param_serialize`, `call_api`) and
answers each path from a script; a watch with nothing scripted blocks like a quiet stream until
the cache shuts it down, so stopping the cache is tested too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gate.kube.client import ApiStatusError
from gate.model.errors import ClusterError, ConfigError, UncountedError
from gate.model.refs import ObjectRef
from gate.sources.policyfile import policy_from_dict
from webhook.cache import BATCH, KindSpec, WatchCache, _CountSink, _StateSink, custom_kind_of
from webhook.events import RecordingSink


class _Raw:
    """The urllib3 response inside a RESTResponse."""

    def __init__(self, lines: list[bytes] | None, error: Exception | None) -> None:
        self.lines = lines
        self.error = error
        self.closed = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        if self.lines is not None:
            yield from self.lines
            if self.error is not None:
                raise self.error
            return
        self.closed.wait(30)  # a quiet watch: blocks until shut down
        raise ConnectionError("connection closed")

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        self.closed.set()


class _Resp:
    def __init__(self, status: int, data: bytes = b"", raw: _Raw | None = None) -> None:
        self.status = status
        self._data = data
        self.response = raw or _Raw([], None)

    def read(self) -> bytes:
        return self._data


class FakeApi:
    """Scripted answers by path: `lists[path]` pages, `watches[path]` streams, in order."""

    def __init__(self) -> None:
        self.lists: dict[str, deque[tuple[int, dict[str, Any]]]] = defaultdict(deque)
        self.watches: dict[str, deque[tuple[list[dict[str, Any]], Exception | None]]] = defaultdict(
            deque
        )
        self.calls: list[tuple[str, dict[str, str]]] = []
        #: Lists of this path after the first N wait for the event (an unreachable API server).
        self.hold: dict[str, tuple[int, threading.Event]] = {}

    def param_serialize(self, **kw: Any) -> tuple[str, str, dict[str, str], Any, list[Any]]:
        query = urllib.parse.urlencode(kw.get("query_params") or [])
        return kw["method"], f"{kw['resource_path']}?{query}", kw["header_params"], None, []

    def call_api(self, method: str, url: str, **kw: Any) -> _Resp:
        path, _, query = url.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        self.calls.append((path, params))
        if params.get("watch") == "true":
            script = self.watches[path]
            if not script:
                return _Resp(200, raw=_Raw(None, None))
            events, error = script.popleft()
            return _Resp(200, raw=_Raw([json.dumps(e).encode() + b"\n" for e in events], error))
        if path in self.hold:
            listed = sum(1 for p, q in self.calls if p == path and q.get("watch") != "true")
            skip, release = self.hold[path]
            if listed > skip:
                release.wait(30)
        if self.lists[path]:
            status, page = self.lists[path].popleft()
            return _Resp(status, json.dumps(page).encode())
        return _Resp(200, json.dumps({"metadata": {"resourceVersion": "1"}, "items": []}).encode())


def pod(name: str, claim: str, rv: str = "5") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "app", "uid": name, "resourceVersion": rv},
        "spec": {
            "nodeName": "n1",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}],
        },
        "status": {"phase": "Running"},
    }


POLICY = policy_from_dict({"webhook": {"resync": "9m", "maxCacheAge": "10m"}})


def _cache(api: FakeApi, clock: list[float] | None = None) -> WatchCache:
    if clock is None:
        return WatchCache(api, POLICY, watch_seconds=30)
    return WatchCache(api, POLICY, watch_seconds=30, clock=lambda: clock[0])


@contextmanager
def started(api: FakeApi) -> Iterator[WatchCache]:
    """A started cache, which must become ready; stopped on the way out."""
    cache = _cache(api)
    cache.start()
    try:
        assert cache.wait_ready(10), cache.ready()
        yield cache
    finally:
        cache.stop()


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


def test_pages_then_watch_events_then_410_relists(api: FakeApi) -> None:
    pods = "/api/v1/pods"
    api.lists[pods].extend(
        [
            (200, {"metadata": {"continue": "c1"}, "items": [pod("a", "data")]}),
            (200, {"metadata": {"resourceVersion": "10"}, "items": [pod("b", "data")]}),
            (200, {"metadata": {"resourceVersion": "30"}, "items": [pod("c", "other")]}),
        ]
    )
    api.watches[pods].append(
        (
            [
                {"type": "ADDED", "object": pod("d", "data", "11")},
                {"type": "DELETED", "object": pod("a", "data", "12")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
            ],
            None,
        )
    )
    api.watches[pods].append(([{"type": "ERROR", "object": {"code": 410}}], None))
    with started(api) as cache:
        k_wait(lambda: len([c for c in api.calls if c[0] == pods]) >= 6)
        watched = [p for path, p in api.calls if path == pods and p.get("watch")]
        listed = [p for path, p in api.calls if path == pods and not p.get("watch")]
        assert listed[1]["continue"] == "c1"
        assert watched[0]["resourceVersion"] == "10"
        assert watched[1]["resourceVersion"] == "20"  # resumed from the bookmark
        assert len(listed) == 3  # the 410 made it list again
        assert watched[2]["resourceVersion"] == "30"
        with cache.lock:
            assert sorted(cache.live.pods) == [("app", "c")]
        assert cache.stats().restarts["Pod"] == 0


def k_wait(predicate: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_failing_watch_is_counted_and_restarted(api: FakeApi) -> None:
    pods = "/api/v1/pods"
    api.lists[pods].append((500, {"message": "etcd is sad"}))
    api.watches[pods].append(([{"type": "ADDED", "object": pod("x", "data")}], OSError("reset")))
    with started(api) as cache:
        k_wait(lambda: cache.stats().restarts["Pod"] >= 2)
    assert not any(w._thread.is_alive() for w in cache.watchers)


def test_not_ready_until_listed_and_when_too_old(api: FakeApi) -> None:
    clock = [1000.0]
    cache = _cache(api, clock)
    assert cache.ready() == (
        False,
        "waiting for the first list of CronJob.batch, "
        "CustomResourceDefinition.apiextensions.k8s.io, DaemonSet.apps, Deployment.apps, "
        "Job.batch, Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ReplicaSet.apps, "
        "StatefulSet.apps",
    )
    for w in cache.watchers:
        w.list_once()
    assert cache.ready() == (True, "ready")
    clock[0] += 601
    ready, why = cache.ready()
    assert not ready
    assert "older than maxCacheAge 600s" in why


CRD_NAME = "backups.example.com"


def _serve_backup_crd(api: FakeApi) -> None:
    """Script the CRD list to hold one CRD, kind Backup of example.com."""
    crd: dict[str, Any] = {
        "metadata": {"name": CRD_NAME, "resourceVersion": "3"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Backup", "plural": "backups"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    api.lists[crds].append((200, {"metadata": {"resourceVersion": "3"}, "items": [crd]}))


def test_custom_resources_are_counted_per_crd(api: FakeApi) -> None:
    _serve_backup_crd(api)
    cr = "/apis/example.com/v1/backups"
    items = [{"metadata": {"name": f"b{i}", "namespace": "app"}} for i in range(3)]
    api.lists[cr].append((200, {"metadata": {"resourceVersion": "4"}, "items": items}))
    api.watches[cr].append(
        ([{"type": "DELETED", "object": {"metadata": {"name": "b0", "namespace": "app"}}}], None)
    )
    with started(api) as cache:
        k_wait(lambda: cache.live.custom_resource_count("example.com", "Backup") == 2)
        accept = [c for c in api.calls if c[0] == cr]
        assert accept, "the custom resources were never listed"
        crd_ref = ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "", CRD_NAME)
        assert cache.live.get(crd_ref) is not None


def test_custom_kind_of_picks_the_storage_version() -> None:
    crd = {
        "spec": {
            "group": "g.io",
            "names": {"kind": "Thing", "plural": "things"},
            "versions": [
                {"name": "v1beta1", "served": True, "storage": False},
                {"name": "v1", "served": True, "storage": True},
            ],
        }
    }
    spec = custom_kind_of(crd)
    assert spec == KindSpec("g.io/v1", "Thing", "things", metadata_only=True)
    assert spec.path == "/apis/g.io/v1/things"
    assert custom_kind_of({"spec": {"group": "g.io", "names": {}, "versions": []}}) is None


def test_a_relist_applies_only_what_changed(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cache(api)
    sink = _StateSink(cache, KindSpec("v1", "Pod", "pods"))
    pods = [pod(f"p{i}", "data", rv=str(i)) for i in range(1000)]
    sink.replace(pods)
    assert len(cache.live.pods) == 1000
    upserts: list[str] = []
    plain_upsert = cache.live.upsert

    def counting_upsert(obj: dict[str, Any], *args: Any) -> None:
        upserts.append(obj["metadata"]["name"])
        plain_upsert(obj, *args)

    monkeypatch.setattr(cache.live, "upsert", counting_upsert)
    changed = pod("p7", "other", rv="2000")
    sink.replace([*pods[:7], changed, *pods[8:999]])  # p7 changed, p999 gone
    assert upserts == ["p7"]
    assert len(cache.live.pods) == 999
    assert cache.live.claim_users("app", "other")[0].name == "p7"


def test_a_list_is_applied_as_it_is_read_and_its_removals_only_once_whole(
    api: FakeApi,
) -> None:
    """A 10,000-pod list decoded whole is hundreds of MB the process keeps: the sink applies
    each batch while the rest is still being read, and forgets what the list no longer has
    only at its end (a list that fails half-way removes nothing)."""
    cache = _cache(api)
    sink = _StateSink(cache, KindSpec("v1", "Pod", "pods"))
    sink.replace([pod("old", "data", rv="1")])
    seen_while_reading: list[int] = []

    def pages(fail: bool) -> Iterator[dict[str, Any]]:
        for i in range(3 * BATCH):
            if i % BATCH == 0:
                seen_while_reading.append(len(cache.live.pods))
            yield pod(f"p{i}", "data", rv=str(i + 10))
        if fail:
            raise ClusterError("connection reset half-way")

    with pytest.raises(ClusterError):
        sink.replace(pages(fail=True))
    assert seen_while_reading == [1, 1 + BATCH, 1 + 2 * BATCH]
    assert len(cache.live.pods) == 1 + 3 * BATCH  # "old" is still there: the list never ended
    sink.replace(pages(fail=False))
    assert len(cache.live.pods) == 3 * BATCH
    assert "old" not in {p.name for p in cache.live.claim_users("app", "data")}


def test_custom_resources_it_may_not_list_stay_uncounted_but_ready(api: FakeApi) -> None:
    _serve_backup_crd(api)
    cr = "/apis/example.com/v1/backups"
    api.lists[cr].append((403, {"kind": "Status", "message": "backups is forbidden"}))
    with started(api) as cache:
        k_wait(lambda: any(c[0] == cr for c in api.calls))
        k_wait(lambda: cache.stats().restarts.get("Backup.example.com", 0) >= 1)
        assert cache.ready() == (True, "ready")
        assert cache.live.custom_resource_count("example.com", "Backup") is None


def test_a_forbidden_custom_kind_keeps_the_listed_kinds_ready_past_max_cache_age(
    api: FakeApi,
) -> None:
    """A forbidden custom kind waits a whole resync before it lists again and hears nothing
    meanwhile; readiness is about the kinds the rules read, which keep hearing from the API
    server, so the webhook stays ready after maxCacheAge has passed for the forbidden one."""
    clock = [1000.0]
    cache = _cache(api, clock)
    for w in cache.watchers:
        w.list_once()
    spec = KindSpec("example.com/v1", "Backup", "backups", metadata_only=True)
    forbidden = cache._watcher(spec, _CountSink(cache, "example.com", "Backup"))
    cache.custom[("example.com", "Backup")] = forbidden
    forbidden._stop.set()  # so the wait after a 403 (the resync period) returns at once
    forbidden._forbidden(ApiStatusError(403, "backups.example.com is forbidden"))
    for _ in range(3):  # past maxCacheAge (10m) and past resync (9m) for the forbidden kind
        clock[0] += 300
        for w in cache.watchers:
            w.last_heard = cache.clock()  # a watch the server ended on time
    assert clock[0] - forbidden.last_heard > POLICY.webhook.max_cache_age_seconds
    assert cache.ready() == (True, "ready")
    assert cache.age() == 0
    assert cache.stats().uncounted == ("Backup.example.com",)


def test_a_broken_stream_makes_its_kind_unready_until_it_lists_again(api: FakeApi) -> None:
    pods = "/api/v1/pods"
    gate_list = threading.Event()
    api.watches[pods].append(([], OSError("connection reset by peer")))
    api.hold[pods] = (1, gate_list)  # the second list waits: until it is in, the kind is stale
    cache = _cache(api)
    cache.start()
    try:
        k_wait(lambda: not cache.ready()[0])
        why = cache.ready()[1]
        assert "watch broken, listing again: Pod (OSError: connection reset by peer)" in why
        assert cache.stats().live["Pod"] is False
        gate_list.set()
        k_wait(lambda: cache.ready()[0])
    finally:
        gate_list.set()
        cache.stop()


def test_a_failing_custom_kind_is_left_out_of_readiness_and_counted_live(api: FakeApi) -> None:
    _serve_backup_crd(api)
    cr = "/apis/example.com/v1/backups"
    clash = (500, {"kind": "Status", "message": "listKind BackupList clashes"})
    api.lists[cr].extend([clash] * 50)
    with started(api) as cache:
        k_wait(lambda: cache.stats().restarts.get("Backup.example.com", 0) >= 1)
        assert cache.ready() == (True, "ready")
        assert cache.stats().uncounted == ("Backup.example.com",)
        api.lists[cr].clear()
        one = {"metadata": {"resourceVersion": "9", "remainingItemCount": 2}, "items": [{}]}
        api.lists[cr].append((200, one))
        assert cache.state.custom_resource_count("example.com", "Backup") == 3
        api.lists[cr].extend([(403, {"message": "forbidden"})] * 50)
        with pytest.raises(UncountedError, match="cannot be counted"):
            cache.state.custom_resource_count("example.com", "Backup")


def test_a_guarded_custom_kind_is_watched_in_full_and_gates_readiness(api: FakeApi) -> None:
    crd: dict[str, Any] = {
        "metadata": {"name": "volumesnapshots.snapshot.storage.k8s.io", "resourceVersion": "3"},
        "spec": {
            "group": "snapshot.storage.k8s.io",
            "names": {"kind": "VolumeSnapshot", "plural": "volumesnapshots"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    api.lists[crds].append((200, {"metadata": {"resourceVersion": "3"}, "items": [crd]}))
    snaps = "/apis/snapshot.storage.k8s.io/v1/volumesnapshots"
    snap = {"metadata": {"name": "s1", "namespace": "app", "resourceVersion": "4"}}
    page = (200, {"metadata": {"resourceVersion": "4"}, "items": [snap]})
    api.lists[snaps].extend([page, page])  # the count and the full watch list it
    with started(api) as cache:
        ref = ObjectRef("snapshot.storage.k8s.io", "VolumeSnapshot", "app", "s1")
        k_wait(lambda: cache.state.guarded_in_namespace("app") == [ref])
        assert "VolumeSnapshot.snapshot.storage.k8s.io" in cache.stats().live


def test_max_cache_age_below_five_minutes_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"webhook.maxCacheAge: '90s' is below the minimum of 5m"):
        policy_from_dict({"webhook": {"maxCacheAge": "90s"}}, "prune-gate.yaml")
    five = policy_from_dict({"webhook": {"maxCacheAge": "5m", "resync": "4m"}})
    assert five.webhook.max_cache_age_seconds == 300


def _readiness_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("watch cache")]


def test_readiness_transitions_are_logged_once_each_with_counts(
    api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="prune_gate.webhook.cache")
    api.lists["/api/v1/pods"].append(
        (200, {"metadata": {"resourceVersion": "7"}, "items": [pod("a", "data"), pod("b", "x")]})
    )
    claim = {"metadata": {"name": "data", "namespace": "app", "resourceVersion": "3"}}
    api.lists["/api/v1/persistentvolumeclaims"].append(
        (200, {"metadata": {"resourceVersion": "7"}, "items": [claim]})
    )
    clock = [1000.0]
    cache = _cache(api, clock)
    assert not cache.ready()[0]
    assert _readiness_lines(caplog) == [], "not ready before the first list is no news"
    for w in cache.watchers:
        w.list_once()
    for _ in range(3):
        assert cache.ready() == (True, "ready")
    (first,) = _readiness_lines(caplog)
    assert first.getMessage() == "watch cache ready"
    assert first.levelno == logging.INFO
    fields = vars(first)
    assert fields["ready"] is True
    assert fields["objects"] == 3
    assert fields["counts"] == {"PersistentVolumeClaim": 1, "Pod": 2}

    clock[0] += 601
    cache.ready()
    cache.ready()
    for w in cache.watchers:
        w.last_heard = clock[0]
    cache.ready()
    lines = _readiness_lines(caplog)
    assert [(r.getMessage(), vars(r)["ready"]) for r in lines] == [
        ("watch cache ready", True),
        ("watch cache not ready", False),
        ("watch cache ready", True),
    ]
    assert "older than maxCacheAge" in vars(lines[1])["reason"]
    assert lines[1].levelno == logging.WARNING


def test_becoming_ready_is_logged_without_anyone_asking(
    api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="prune_gate.webhook.cache")
    cache = _cache(api)
    cache.start()
    try:
        k_wait(lambda: bool(_readiness_lines(caplog)))
    finally:
        cache.stop()
    assert [r.getMessage() for r in _readiness_lines(caplog)] == ["watch cache ready"]
    assert not cache._monitor.is_alive()


def test_a_failing_custom_kind_records_one_event_on_its_crd_per_outage() -> None:
    """The metric and log are for the operator; the CRD's Event tells whoever looks at the CRD
    why its deletion is refused. One per outage: not one per retry, again after a good list."""
    api, sink, clock = FakeApi(), RecordingSink(), [0.0]
    cache = WatchCache(api, POLICY, watch_seconds=30, events=sink, clock=lambda: clock[0])
    crd: dict[str, Any] = {
        "metadata": {"name": "widgets.example.com", "uid": "u-1"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    spec = custom_kind_of(crd)
    assert spec is not None
    report = cache._uncounted_reporter(crd, spec)
    assert report is not None
    watcher = cache._watcher(spec, on_failure=report)
    watcher._failed(RuntimeError("not served yet"), 0)  # a CRD just created: a moment of 404
    clock[0] += 2
    watcher._failed(RuntimeError("not served yet"), 0)
    assert sink.events == []
    watcher.list_once()  # served now: that was no outage
    clock[0] += 100
    watcher._failed(RuntimeError("listKind WidgetList is taken"), 0)
    clock[0] += 29
    watcher._failed(RuntimeError("listKind WidgetList is taken"), 0)
    assert sink.events == []  # not yet 30 s of failing
    clock[0] += 1
    watcher._failed(RuntimeError("listKind WidgetList is taken"), 0)
    clock[0] += 15
    watcher._failed(RuntimeError("still taken"), 0)
    assert len(sink.events) == 1
    event = sink.events[0]
    assert event.reason == "ResourcesUncounted" and event.uid == "u-1"
    assert event.ref == ObjectRef(
        "apiextensions.k8s.io", "CustomResourceDefinition", "", crd["metadata"]["name"]
    )
    assert (
        "listKind WidgetList is taken" in event.message and "RESOURCES_UNCOUNTED" in event.message
    )
    watcher.list_once()  # listed again: the next outage is news

    watcher._stop.set()  # so the wait after a 403 (the resync period) returns at once
    watcher._forbidden(ApiStatusError(403, "widgets.example.com is forbidden"))
    assert len(sink.events) == 2
    assert "rbac.countedResources" in sink.events[1].message
