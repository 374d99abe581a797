"""Prometheus metrics, in a registry of the app's own (two apps in one process do not collide).

Requests and decisions are counted as they happen; the cache's size, age and watch restarts are
read from the cache when /metrics is scraped, so the cache does not need to know about metrics; the
serving certificate's expiry is read from the certificate reloader the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.cache import CacheStats
from webhook.events import EventCounts
from webhook.httpserver import ListenerStats

PREFIX = "prune_gate_webhook"


class ConnectionsCollector(Collector):
    """Each listener's open connections, its budget, and the connections it closed to make room
    for new ones (`HttpsServer.stats`): a listener that keeps closing for its budget is held
    by someone who does not finish requests."""

    def __init__(self, stats: Callable[[], list[ListenerStats]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        stats = self._stats()
        now = GaugeMetricFamily(
            f"{PREFIX}_connections", "Open connections, by listener", labels=["listener"]
        )
        budget = GaugeMetricFamily(
            f"{PREFIX}_connections_max",
            "Connection budget (--max-connections, --health-max-connections), by listener",
            labels=["listener"],
        )
        closed = CounterMetricFamily(
            f"{PREFIX}_connections_closed_over_budget",
            "Connections a listener at its budget closed to take a new one (the oldest not in "
            "a request), by listener",
            labels=["listener"],
        )
        shed = CounterMetricFamily(
            f"{PREFIX}_requests_shed",
            "Requests answered 429 without a decision for waiting in the webhook past "
            "--queue-timeout (the worker is behind; the API server applies the failurePolicy)",
            labels=["listener"],
        )
        turned = CounterMetricFamily(
            f"{PREFIX}_connections_turned_away",
            "New TLS connections closed at once, before their handshake: their address had "
            "--max-handshakes in progress",
            labels=["listener"],
        )
        served = CounterMetricFamily(
            f"{PREFIX}_connections_served",
            "Connections served, by listener and protocol (ALPN's h2, or http/1.1): over h2 the "
            "API server sends its calls as streams on a few connections",
            labels=["listener", "protocol"],
        )
        for s in stats:
            now.add_metric([s.name], s.open)
            for protocol, count in s.served:
                served.add_metric([s.name, protocol], count)
            budget.add_metric([s.name], s.max_connections)
            closed.add_metric([s.name], s.closed_over_budget)
            shed.add_metric([s.name], s.shed)
            turned.add_metric([s.name], s.turned_away)
        yield from (now, budget, closed, shed, turned, served)


class _CacheCollector(Collector):
    def __init__(self, stats: Callable[[], CacheStats], events: Callable[[], EventCounts]) -> None:
        self._stats = stats
        self._events = events

    def collect(self) -> Iterator[Any]:
        s = self._stats()
        size = GaugeMetricFamily(
            f"{PREFIX}_cache_objects", "Objects in the watch cache, by type", labels=["type"]
        )
        size.add_metric(["pod"], s.pods)
        size.add_metric(["object"], s.objects)
        yield size
        yield GaugeMetricFamily(
            f"{PREFIX}_cache_age_seconds",
            "Seconds since the least recently heard-from watched kind heard from the API server",
            value=s.age_seconds,
        )
        restarts = CounterMetricFamily(
            f"{PREFIX}_watch_restarts", "Watches restarted after an error, by kind", labels=["kind"]
        )
        for kind, n in sorted(s.restarts.items()):
            restarts.add_metric([kind], n)
        yield restarts
        live = GaugeMetricFamily(
            f"{PREFIX}_watch_live",
            "1 while a watched kind's list is in and its watch stream is healthy, 0 while it is "
            "stale (broken, silent, 410, forbidden) and listing again",
            labels=["kind"],
        )
        for kind, ok in sorted(s.live.items()):
            live.add_metric([kind], 1.0 if ok else 0.0)
        yield live
        uncounted = GaugeMetricFamily(
            f"{PREFIX}_custom_resources_uncounted",
            "Custom kinds whose resources the watch cache cannot count now; deleting their CRD "
            "is decided by a live count, RESOURCES_UNCOUNTED when that fails",
            value=len(s.uncounted),
        )
        yield uncounted
        events = self._events()
        yield CounterMetricFamily(
            f"{PREFIX}_events_sent",
            "Events (PruneBlocked, PruneOverridden, PruneExempted, ...) the API server accepted",
            value=events.sent,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_events_failed",
            "Events the API server did not accept (each logged with its error)",
            value=events.failed,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_events_dropped",
            "Events dropped because the queue was full",
            value=events.dropped,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_events_repeated",
            "Events not sent: the same Event on the same object was sent within the last minute",
            value=events.repeated,
        )


class _CertificateCollector(Collector):
    def __init__(self, expiry: Callable[[], float | None]) -> None:
        self._expiry = expiry

    def collect(self) -> Iterator[Any]:
        expiry = self._expiry()
        if expiry is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_certificate_expiry_timestamp_seconds",
                "When the serving certificate in use expires (notAfter), in Unix seconds",
                value=expiry,
            )


class StuckStats(Protocol):
    """What the stuck-deletion detector (`webhook.stuck.StuckDetector`) publishes."""

    passes: int
    errors: int

    def counts(self) -> dict[tuple[str, str], int]: ...


class _StuckCollector(Collector):
    def __init__(self, stuck: StuckStats) -> None:
        self._stuck = stuck

    def collect(self) -> Iterator[Any]:
        gauge = GaugeMetricFamily(
            "prune_gate_stuck_objects",
            "Objects whose deletion was asked for longer ago than --stuck-older-than and is "
            "still waiting, by kind and state (gate doctor's vocabulary), at the last pass",
            labels=["kind", "state"],
        )
        for (kind, state), n in sorted(self._stuck.counts().items()):
            gauge.add_metric([kind, state], n)
        yield gauge
        yield CounterMetricFamily(
            "prune_gate_stuck_detector_passes",
            "Passes of the stuck-deletion detector that listed the cluster",
            value=self._stuck.passes,
        )
        yield CounterMetricFamily(
            "prune_gate_stuck_detector_errors",
            "Passes of the stuck-deletion detector that failed (each logged)",
            value=self._stuck.errors,
        )


class Metrics:
    """The app's metrics."""

    def __init__(
        self,
        stats: Callable[[], CacheStats],
        events: Callable[[], EventCounts] = EventCounts,
        certificate_expiry: Callable[[], float | None] = lambda: None,
        stuck: StuckStats | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            f"{PREFIX}_requests",
            "Admission requests answered, by HTTP status code",
            ["code"],
            registry=self.registry,
        )
        self.decisions = Counter(
            f"{PREFIX}_decisions",
            "Admission decisions. outcome: allowed, refused, overridden (by the allow-delete "
            "annotation or a break-glass group) or exempted (by a policy exemption); code: the "
            "finding code that decided (the refusal's reason, the overridden, exempted or warned "
            "finding), none without a finding",
            ["outcome", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            f"{PREFIX}_handler_seconds",
            "Time spent handling /validate, from body read to response built",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self.registry.register(_CacheCollector(stats, events))
        self.registry.register(_CertificateCollector(certificate_expiry))
        if stuck is not None:
            self.registry.register(_StuckCollector(stuck))
