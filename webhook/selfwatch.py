"""The webhook watches its own ValidatingWebhookConfiguration, because nothing else can guard it.

The API server calls no admission webhook for webhook configurations (so a broken webhook cannot
lock its own configuration; tests/e2e/test_guards.py measures it), so the webhook cannot refuse
its own deletion or a patch that switches it off. It can notice: a list and watch of its one
configuration compares what the API server holds with what was registered. A deleted entry or a
changed rule, failurePolicy, caBundle, client address, selector or match condition is an error log
line, a count in `prune_gate_webhook_configuration_tampered_total`, a Warning Event on the
configuration and, in `--register` mode, the registration written again. Installed by the chart
(`--watch-registration NAME`), the first configuration seen is the baseline: a change after it is
reported (a `helm upgrade` that changes it is reported too, as a change to check), never restored.

The chart's configuration is created disarmed (failurePolicy Ignore) and armed by this server
(`webhook.arm`, through `watch_and_arm`): its failurePolicy is then not compared with the
baseline. An entry seen armed that is Ignore again is reported (and armed again while the
annotation asks for Fail), and so is the annotation turned from Fail to something else; the
arming itself is not a change to report.

`differences` and `disarmed` are pure; `SelfWatch` is the thread around them (one
`webhook.cache.Watcher`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gate.model.events import EventSpec
from gate.model.refs import ObjectRef
from webhook.arm import ANNOTATION, ARMED, Armer, unarmed, wanted_policy
from webhook.cache import KindSpec, Watcher
from webhook.events import EventSink
from webhook.metrics import PREFIX

log = logging.getLogger("prune_gate.webhook.selfwatch")

#: Event reason (Warning) on the configuration.
CONFIGURATION_TAMPERED = "ConfigurationTampered"
API_VERSION = "admissionregistration.k8s.io/v1"

#: The fields of a webhook entry that decide what it guards; the API server's defaults for them.
COMPARED: dict[str, Any] = {
    "clientConfig": None,
    "rules": None,
    "failurePolicy": "Fail",
    "namespaceSelector": {},
    "objectSelector": {},
    "matchConditions": [],
    "timeoutSeconds": 10,
}


def _client(cfg: Any) -> Any:
    if not isinstance(cfg, dict):
        return cfg
    out = {k: cfg[k] for k in ("url", "caBundle") if k in cfg}
    if isinstance(cfg.get("service"), dict):
        out["service"] = {"port": 443, **cfg["service"]}
    return out


def _entry(hook: dict[str, Any]) -> dict[str, Any]:
    out = {key: hook.get(key, default) for key, default in COMPARED.items()}
    out["clientConfig"] = _client(out["clientConfig"])
    return out


def differences(
    expected: dict[str, Any], actual: dict[str, Any] | None, compare_policy: bool = True
) -> list[str]:
    """What differs between the registered configuration and the live one; empty when none.
    Without `compare_policy`, failurePolicy is left to `disarmed` (an armed configuration)."""
    if actual is None:
        return ["the configuration was deleted"]
    live = {h.get("name"): h for h in actual.get("webhooks") or [] if isinstance(h, dict)}
    keys = [k for k in COMPARED if compare_policy or k != "failurePolicy"]
    out: list[str] = []
    for hook in expected.get("webhooks") or []:
        name = hook["name"]
        if name not in live:
            out.append(f"webhook {name} was removed")
            continue
        want, have = _entry(hook), _entry(live[name])
        out.extend(f"webhook {name}: {key} changed" for key in keys if want[key] != have[key])
    return out


def disarmed(
    baseline: dict[str, Any], actual: dict[str, Any] | None, seen_armed: set[str]
) -> list[str]:
    """What switched off an armed configuration: an entry this process saw at Fail that is not
    at Fail now, and the annotation turned from Fail to anything else. An entry never seen
    armed is not reported: it is waiting to be armed."""
    if actual is None:
        return []
    out = [
        f"webhook {h.get('name')}: failurePolicy changed to {h.get('failurePolicy')} after it "
        "was armed"
        for h in actual.get("webhooks") or []
        if isinstance(h, dict)
        and h.get("name") in seen_armed
        and h.get("failurePolicy", ARMED) != ARMED
    ]
    before, now = wanted_policy(baseline), wanted_policy(actual)
    if before == ARMED and now != ARMED:
        shown = (((actual.get("metadata") or {}).get("annotations")) or {}).get(ANNOTATION)
        out.append(f"annotation {ANNOTATION} changed from Fail to {shown or 'nothing'}")
    return out


class _Sink:
    def __init__(self, watch: SelfWatch) -> None:
        self.watch = watch

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        listed = list(items)  # one, by its name
        self.watch.observe(listed[0] if listed else None)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.watch.observe(None if event_type == "DELETED" else obj)


class SelfWatch:
    """Watch one configuration; report (and optionally restore) every change that weakens it."""

    def __init__(
        self,
        api: Any,
        expected: dict[str, Any] | None,
        events: EventSink,
        restore: Callable[[dict[str, Any]], None] | None = None,
        resync_seconds: float = 300.0,
        name: str = "",
        armer: Armer | None = None,
    ) -> None:
        #: What the registration must be; None: the first one seen (a chart's, not ours to write).
        self.expected = expected
        #: Arms a chart's configuration (`webhook.arm`); its failurePolicy is then its to set.
        self.armer = armer
        #: Entries this process has seen at failurePolicy Fail.
        self.seen_armed: set[str] = set()
        self.name = str(expected["metadata"]["name"]) if expected is not None else name
        self.events = events
        self.restore = restore
        self.tampered = 0
        self.restored = 0
        self._lock = threading.Lock()
        spec = KindSpec(
            API_VERSION,
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            field_selector=f"metadata.name={self.name}",
        )
        self.watcher = Watcher(api, spec, _Sink(self), resync_seconds)

    def start(self) -> None:
        self.watcher.start()
        if self.armer is not None:
            self.armer.start()

    def stop(self) -> None:
        self.watcher.stop()
        if self.armer is not None:
            self.armer.stop()

    def observe(self, obj: dict[str, Any] | None) -> None:
        """One state of the configuration: report it when it differs from the registration."""
        if self.armer is not None:
            self.armer.offer(obj)
        if self.expected is None:
            if obj is None:
                return  # nothing seen yet: the chart may not have applied it (see the readme)
            self.expected = obj  # the baseline: later changes are reported, not restored
            self._note_armed(obj)
            return
        # Armed by us: the baseline or the configuration now asks for Fail by its annotation.
        if self.armer is not None and ARMED in (wanted_policy(self.expected), wanted_policy(obj)):
            found = differences(self.expected, obj, compare_policy=False)
            found += disarmed(self.expected, obj, self.seen_armed)
        else:
            found = differences(self.expected, obj)
        self._note_armed(obj)
        if not found:
            return
        with self._lock:
            self.tampered += 1
        uid = str(((obj or {}).get("metadata") or {}).get("uid") or "")
        message = (
            f"ValidatingWebhookConfiguration {self.name} no longer guards what prune-gate "
            f"registered: {'; '.join(found)}"
        )
        if self.restore:
            action = "registering it again"
        elif self.armer is not None and unarmed(obj):
            action = "arming it again once this pod serves; check who changed it (audit log)"
        else:
            action = "restore it (helm upgrade) and check who changed it (audit log)"
        log.error(message, extra={"registration": self.name, "changes": found, "action": action})
        ref = ObjectRef(
            "admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "", self.name
        )
        self.events.submit(
            EventSpec(CONFIGURATION_TAMPERED, f"{message}; {action}", ref, API_VERSION, uid)
        )
        recorded = wanted_policy(self.expected)
        if self.armer is not None and obj is not None and recorded != wanted_policy(obj):
            # The operator's recorded choice changed (a helm upgrade, or someone acting as one):
            # reported once, then the new state is the baseline.
            self.expected = obj
            self.seen_armed.clear()
            self._note_armed(obj)
        if self.restore is None:
            return
        try:
            self.restore(self.expected)
        except Exception as exc:
            log.error(
                "could not register the webhook again",
                extra={"registration": self.name, "error": f"{type(exc).__name__}: {exc}"},
            )
            return
        with self._lock:
            self.restored += 1
        log.warning("webhook registered again", extra={"registration": self.name})

    def _note_armed(self, obj: dict[str, Any] | None) -> None:
        if self.armer is None or obj is None:
            return
        for hook in obj.get("webhooks") or []:
            if isinstance(hook, dict) and hook.get("failurePolicy", ARMED) == ARMED:
                self.seen_armed.add(str(hook.get("name")))

    def collector(self) -> Collector:
        """The /metrics counters of this watch."""
        return _Collector(self)


class _Collector(Collector):
    def __init__(self, watch: SelfWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Any]:
        yield CounterMetricFamily(
            f"{PREFIX}_configuration_tampered",
            "Times the webhook's own ValidatingWebhookConfiguration was seen deleted or changed",
            value=self.watch.tampered,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_configuration_restored",
            "Times the webhook registered its configuration again after a change (--register)",
            value=self.watch.restored,
        )
        if self.watch.armer is not None:
            yield from self.watch.armer.collect()


def watch_and_arm(
    api: Any,
    events: EventSink,
    app: Any,
    name: str,
    cache_ready: Callable[[], bool],
    listen: tuple[str, int],
) -> SelfWatch:
    """Start the self-watch of a chart's configuration `name`, arming it (`webhook.arm`) once
    this server can answer for it; its counters on /metrics."""
    watch = SelfWatch(
        api, None, events, name=name, armer=Armer.for_server(api, name, cache_ready, listen)
    )
    app.metrics.registry.register(watch.collector())
    watch.start()
    return watch
