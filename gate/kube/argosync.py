"""Ask Argo CD to sync a deferred artifact: the I/O edge of `gate.engine.argosync`.

Every Application is read first, and nothing is asked of any while one of them cannot take a
sync now (being deleted, another operation in flight): a speculative deploy is all of the
artifact or none of it. Then each is patched with its sync operation (the read resourceVersion
as a precondition) and, with a deadline, read until its operation ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gate.engine.argosync import (
    SETTINGS_CONFIGMAP,
    AppPart,
    Outcome,
    Tracking,
    busy_reason,
    forget_manifests,
    outcome,
    replaced,
    skip_reason,
    sync_patch,
)
from gate.kube.client import ApiStatusError, ConflictError, KubeClient
from gate.kube.resources import PARENTS
from gate.model.errors import ClusterError, GateError
from gate.model.refs import api_path

#: What `gate argocd sync` needs, said on a 403.
SYNC_HINT = (
    "gate argocd sync needs get and patch on applications.argoproj.io in the Applications' "
    "namespaces, and get on the ConfigMap argocd-cm in Argo CD's namespace"
)
#: How often a running sync is read again.
POLL_SECONDS = 2.0


#: The Applications' resource, as `gate check --live` lists them.
_APPLICATIONS = next(r for r in PARENTS if r.kind == "Application")


def _path(part: AppPart) -> str:
    apps = api_path(_APPLICATIONS.api_version, _APPLICATIONS.plural, part.namespace)
    return f"{apps}/{part.name}"


@dataclass(frozen=True, slots=True)
class Plan:
    """Which parts are synced, and which are skipped and why."""

    synced: tuple[AppPart, ...]
    skipped: tuple[tuple[AppPart, str], ...]


def read_tracking(api: KubeClient, control: str) -> Tracking:
    """How Argo CD in namespace `control` tracks what it owns: its `argocd-cm` settings (its
    defaults where there is none)."""
    path = f"{api_path('v1', 'configmaps', control)}/{SETTINGS_CONFIGMAP}"
    found = api.get(path, f"get ConfigMap {control}/{SETTINGS_CONFIGMAP}")
    return Tracking.from_settings(found.get("data") if found else None)


def start_syncs(
    api: KubeClient, parts: list[AppPart], nonce: str, reason: str, control: str
) -> Plan:
    """Read every Application, then ask each one that takes a local sync to sync its part,
    marked as Argo CD in namespace `control` marks what it owns."""
    tracking = read_tracking(api, control)
    apps = {p: api.get(_path(p), f"get {p.display()}") for p in parts}
    skipped = []
    synced = []
    for part, app in apps.items():
        why = skip_reason(app)
        if why is not None:
            skipped.append((part, why))
            continue
        assert app is not None  # skip_reason skips a missing one
        busy = busy_reason(app)
        if busy is not None:
            raise GateError(f"{part.display()} {busy}: nothing was synced")
        synced.append((part, app))
    for part, app in synced:
        try:
            patch = sync_patch(app, part, nonce, reason, tracking, control)
            api.patch(_path(part), patch, f"sync {part.display()}")
        except ConflictError:
            raise GateError(
                f"{part.display()} changed while it was being read (an operation may have "
                "started): run gate argocd sync again"
            ) from None
    return Plan(tuple(p for p, _ in synced), tuple(skipped))


def _forget_manifests(api: KubeClient, part: AppPart, app: dict[str, Any]) -> None:
    """Take the artifact out of the ended sync's record (`forget_manifests`); a record that is
    no longer this sync's (another operation started) has none of it to take out."""
    info = app["status"]["operationState"]["operation"]["info"]
    try:
        api.patch(
            _path(part),
            forget_manifests(info),
            f"clear the local manifests from {part.display()}'s last operation",
            json_patch=True,
        )
    except ApiStatusError as exc:
        if exc.status not in (409, 422):  # the test failed: another operation's record now
            raise


def wait_syncs(
    api: KubeClient,
    parts: tuple[AppPart, ...],
    nonce: str,
    timeout: float,
) -> dict[AppPart, Outcome]:
    """Each sync's outcome, read until all have ended; a `ClusterError` past `timeout`
    seconds, naming those still running."""
    deadline = time.monotonic() + timeout
    ended: dict[AppPart, Outcome] = {}
    while True:
        for part in parts:
            if part in ended:
                continue
            app = api.get(_path(part), f"get {part.display()}")
            if app is None:
                raise GateError(f"{part.display()} was deleted while it synced")
            if replaced(app, nonce):
                raise GateError(
                    f"{part.display()}: another operation replaced this sync before it started"
                )
            done = outcome(app, nonce)
            if done is not None:
                ended[part] = done
                _forget_manifests(api, part, app)
        if len(ended) == len(parts):
            return ended
        if time.monotonic() >= deadline:
            running = ", ".join(p.display() for p in parts if p not in ended)
            raise ClusterError(
                f"still syncing after {timeout:g}s: {running}; read its state with kubectl get "
                "application -o yaml (status.operationState), or wait longer with --timeout"
            )
        time.sleep(POLL_SECONDS)
