"""The webhook arms the chart's configuration itself, once its pod can answer.

A ValidatingWebhookConfiguration with `failurePolicy: Fail` refuses every call that fails: created
together with pods that are not Ready yet (an image still pulling, a crash loop, no node with
room), it would refuse guarded DELETEs cluster-wide while nothing answers. So the chart creates
every entry with `failurePolicy: Ignore` and records the operator's choice in the annotation
`prune-gate.io/failure-policy`; the webhook's primary worker patches each entry to `Fail` once

- its watch cache is ready (before that it answers 503 to every review),
- its pod is Ready (`$POD_NAMESPACE`/`$POD_NAME`; the Service sends calls only to Ready pods),
- its TLS port completes a handshake as the API server's would: the certificate verifies with
  the entry's caBundle, for the name the API server calls (`SERVICE.NAMESPACE.svc`).

Until then the configuration is fail-open at this door: a call that fails is allowed (a call that
succeeds is obeyed whatever the failurePolicy). The patch is a JSON patch whose `test`s make it
fail when the configuration changed meanwhile (a `helm upgrade` that chose Ignore, another pod
that armed it first); a failed patch is logged and retried. The chart grants `patch` on this one
configuration only. An entry someone disarms later, while the annotation still says Fail, is
armed again (the self-watch reports the change: `webhook.selfwatch`). Arming never lowers a
policy: with the annotation at Ignore, or absent, nothing is patched.

`unarmed`, `arm_patch`, `callee` are pure; `Armer` is the thread; `serves` and `pod_readiness`
are its probes.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gate.kube.client import JSON_PATCH, ApiStatusError, request_json
from webhook.metrics import PREFIX
from webhook.serve import answers_tls

log = logging.getLogger("prune_gate.webhook.arm")

#: The annotation (rendered by the chart from webhook.failurePolicy) that asks to be armed.
ANNOTATION = "prune-gate.io/failure-policy"
ARMED = "Fail"
PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def wanted_policy(config: dict[str, Any] | None) -> str | None:
    """The failurePolicy the configuration asks to be armed with; None when it does not ask (no
    annotation: not a configuration of this chart). A value other than Fail or Ignore counts as
    Fail: what cannot be known fails closed."""
    annotations = ((config or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION)
    if value is None:
        return None
    return "Ignore" if value == "Ignore" else ARMED


def _entries(config: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [h for h in (config or {}).get("webhooks") or [] if isinstance(h, dict)]


def unarmed(config: dict[str, Any] | None) -> list[str]:
    """Names of the entries to arm: those not at Fail, when the annotation asks for Fail."""
    if wanted_policy(config) != ARMED:
        return []
    # An absent failurePolicy is the API server's default, Fail.
    return [str(h.get("name")) for h in _entries(config) if h.get("failurePolicy", ARMED) != ARMED]


def arm_patch(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch that arms `unarmed(config)`; empty when there is nothing to arm.

    Each `replace` is guarded by `test`s, so the API server refuses the whole patch (422) when
    the configuration is no longer the one read: the annotation still asks for Fail exactly as
    read, and the entry at that index still has that name and that failurePolicy."""
    todo = set(unarmed(config))
    if not todo:
        return []
    value = config["metadata"]["annotations"][ANNOTATION]
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"/metadata/annotations/{_pointer(ANNOTATION)}", "value": value}
    ]
    for index, hook in enumerate(_entries(config)):
        if hook.get("name") not in todo:
            continue
        ops += [
            {"op": "test", "path": f"/webhooks/{index}/name", "value": hook["name"]},
            {
                "op": "test",
                "path": f"/webhooks/{index}/failurePolicy",
                "value": hook["failurePolicy"],
            },
            {"op": "replace", "path": f"/webhooks/{index}/failurePolicy", "value": ARMED},
        ]
    return ops


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def callee(hook: dict[str, Any]) -> str | None:
    """The name the API server checks the webhook's certificate against: SERVICE.NAMESPACE.svc
    for a service, the URL's host otherwise; None when the entry names neither."""
    cfg = hook.get("clientConfig") or {}
    service = cfg.get("service")
    if isinstance(service, dict) and service.get("name") and service.get("namespace"):
        return f"{service['name']}.{service['namespace']}.svc"
    if cfg.get("url"):
        return urlsplit(str(cfg["url"])).hostname
    return None


def ca_bundle(hook: dict[str, Any]) -> bytes:
    """The entry's caBundle (PEM); empty when it has none yet (cert-manager injects it later)."""
    raw = (hook.get("clientConfig") or {}).get("caBundle") or ""
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return b""


def local_address(host: str, port: int) -> tuple[str, int]:
    """Where this process reaches its own --listen address (a wildcard is reached on loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1", port
    if host == "::":
        return "::1", port
    return host, port


def serves(address: tuple[str, int], server_name: str, ca_pem: bytes, timeout: float = 2.0) -> bool:
    """Whether the TLS server at `address` presents a certificate that `ca_pem` verifies for
    `server_name`, as the API server will check it (`webhook.serve.answers_tls`)."""
    return answers_tls(address[0], address[1], ca_pem, timeout, server_name=server_name)


def pod_readiness(api: Any, namespace: str, name: str) -> str:
    """Why the pod is not Ready ("" when it is): the Service routes to Ready pods only."""
    try:
        pod = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}", timeout=10)
    except Exception as exc:  # any failure to know is "not Ready": nothing is armed on a guess
        return f"cannot read pod {namespace}/{name}: {type(exc).__name__}: {exc}"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return f"pod {namespace}/{name} is terminating"
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return ""
    return f"pod {namespace}/{name} is not Ready"


class Armer:
    """Arms the configuration `offer` last showed, once this server can answer for it.

    The probes are functions so tests can give their own: `cache_ready()`, `pod_ready()` (why
    the pod is not Ready, "" when it is; None outside a pod), `serving(name, ca_pem)`, and
    `patch(ops)`, which sends the JSON patch.
    """

    def __init__(
        self,
        name: str,
        cache_ready: Callable[[], bool],
        serving: Callable[[str, bytes], bool],
        patch: Callable[[list[dict[str, Any]]], dict[str, Any]],
        pod_ready: Callable[[], str] | None = None,
        interval: float = 1.0,
        max_backoff: float = 30.0,
    ) -> None:
        self.name = name
        self.cache_ready, self.serving, self.patch = cache_ready, serving, patch
        self.pod_ready = pod_ready
        self.interval, self.max_backoff = interval, max_backoff
        #: Patches the API server refused or that failed (logged, then retried).
        self.failures = 0
        #: Times this process armed the configuration.
        self.armed_count = 0
        #: Why the configuration is not armed yet ("" when it is, or has nothing to arm).
        self.waiting = ""
        self._latest: dict[str, Any] | None = None
        self._seen = False
        self._backoff = 0.0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arm", daemon=True)

    @classmethod
    def for_server(
        cls, api: Any, name: str, cache_ready: Callable[[], bool], listen: tuple[str, int]
    ) -> Armer:
        """The armer of `gate webhook serve --watch-registration NAME`: its pod from
        $POD_NAMESPACE and $POD_NAME (the chart sets them; outside a pod the server's own
        readiness is all there is), its TLS port from --listen."""
        address = local_address(*listen)
        namespace, pod = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
        ready = (lambda: pod_readiness(api, namespace, pod)) if namespace and pod else None

        def patch(ops: list[dict[str, Any]]) -> dict[str, Any]:
            return request_json(
                api, "PATCH", f"{PATH}/{name}", body=ops, content_type=JSON_PATCH, timeout=10
            )

        return cls(
            name,
            cache_ready,
            lambda host, ca: serves(address, host, ca),
            patch,
            pod_ready=ready,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def offer(self, config: dict[str, Any] | None) -> None:
        """The configuration as the API server holds it now (None: deleted)."""
        with self._lock:
            self._latest = config
            self._seen = True
        self._wake.set()

    def armed(self) -> bool | None:
        """Whether the last configuration seen is armed as it asks; None before one is seen."""
        with self._lock:
            if not self._seen:
                return None
            # A deleted configuration guards nothing (the self-watch reports it).
            return self._latest is not None and not unarmed(self._latest)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the pass: an offer during it wakes the next one
            try:
                wait = self.step()
            except Exception as exc:  # a probe that raised: said, and tried again, never fatal
                wait = self._failed(exc)
            self._wake.wait(wait)

    def step(self) -> float | None:
        """One pass: arm when there is something to arm and this server can answer for it.
        The seconds to wait before the next pass (None: until the next `offer`)."""
        with self._lock:
            config = self._latest
        todo = unarmed(config)
        if config is None or not todo:
            self._note("")
            self._backoff = 0.0
            return None
        why = self._not_ready(config, todo)
        if why:
            self._note(why)
            return self.interval
        try:
            result = self.patch(arm_patch(config))
        except ApiStatusError as exc:
            if exc.status in (409, 422):  # changed meanwhile: the watch brings the new state
                log.info(
                    "the configuration changed while arming it; trying again with the new one",
                    extra={"registration": self.name, "error": str(exc)},
                )
                return self.interval
            return self._failed(exc)
        except Exception as exc:  # anything else: say so and retry, never die quietly
            return self._failed(exc)
        self._backoff = 0.0
        self.armed_count += 1
        self.waiting = ""
        with self._lock:  # the API server's answer is the state now, unless the watch said more
            if self._latest is config:
                self._latest = result
        log.info(
            "webhook armed: failurePolicy Fail",
            extra={"registration": self.name, "webhooks": todo},
        )
        return None

    def _not_ready(self, config: dict[str, Any], todo: list[str]) -> str:
        if not self.cache_ready():
            return "the watch cache is not ready"
        if self.pod_ready is not None:
            why = self.pod_ready()
            if why:
                return why
        for hook in _entries(config):
            if hook.get("name") not in todo:
                continue
            host, ca = callee(hook), ca_bundle(hook)
            if host is None:
                return f"webhook {hook.get('name')} names no service or URL"
            if not ca:
                return f"webhook {hook.get('name')} has no caBundle yet"
            if not self.serving(host, ca):
                return (
                    f"this server does not answer TLS as {host} with a certificate that the "
                    f"caBundle of webhook {hook.get('name')} verifies"
                )
        return ""

    def _failed(self, exc: Exception) -> float:
        self.failures += 1
        self._backoff = min(self.max_backoff, max(2.0, self._backoff * 2))
        self.waiting = f"the patch failed: {type(exc).__name__}: {exc}"
        log.error(
            "cannot arm the webhook configuration, retrying",
            extra={
                "registration": self.name,
                "error": f"{type(exc).__name__}: {exc}",
                "retry_seconds": self._backoff,
                "hint": "the chart's ClusterRole FULLNAME-arm grants patch on this one "
                "configuration; until it is armed, a call that fails is allowed",
            },
        )
        return self._backoff

    def _note(self, why: str) -> None:
        """Log the reason it waits when it changes, not every pass: a warning once the cache
        and the pod are ready (a certificate the caBundle does not verify is no start-up)."""
        if why and why != self.waiting:
            starting = why == "the watch cache is not ready" or why.startswith("pod ")
            log.log(
                logging.INFO if starting else logging.WARNING,
                "not arming the webhook configuration yet",
                extra={"registration": self.name, "reason": why},
            )
        self.waiting = why

    def collect(self) -> Iterator[Any]:
        """The /metrics families of the arming."""
        armed = self.armed()
        gauge = GaugeMetricFamily(
            f"{PREFIX}_configuration_armed",
            "1 when the webhook's configuration has the failurePolicy its annotation asks for "
            "(armed), 0 while a call that fails is still allowed",
        )
        if armed is not None:
            gauge.add_metric([], 1.0 if armed else 0.0)
        yield gauge
        yield CounterMetricFamily(
            f"{PREFIX}_configuration_arm_failures",
            "Patches that could not arm the webhook's configuration (retried)",
            value=self.failures,
        )
