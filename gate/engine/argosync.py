"""`gate argocd sync`: what a speculative deploy asks of Argo CD, and how to read its answer.

A deferred artifact (`gate check --defer-to DIR` with `--argocd-root`) holds, per Application,
`argocd/<namespace>/<name>.yaml`: what that Application renders at the candidate, with every
deferred deletion put back as base declares it. Argo CD syncs such a set of objects without git
as a local sync: the sync operation's `manifests` (`SyncOperation.Manifests`, one JSON object
each), which the application controller uses instead of its source and applies with its own
identity, so the webhook and the fence see Argo CD's deletions as at any sync.

The operation is the one argocd-server writes for `argocd app sync --local` (argo-cd
`server/application.Sync`): the Application's own sync options and retry, no prune (as the
Flux artifact is applied: deletions wait for the merged deploy), and refused where the server
refuses it: an Application with automated sync (its next automated sync would undo the local
one), one being deleted, and one with an operation in flight.

Pure: the Applications are dicts as the API server returns them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from gate.engine.deployers import argocd
from gate.engine.deployers.argocd import app_sync_options, instance_name, syncs_automatically
from gate.model.refs import group_of

#: Who the operation says started it (`operation.initiatedBy.username`).
INITIATOR = "prune-gate"
#: The operation's info entry that identifies this sync in `status.operationState`.
NONCE_INFO = "prune-gate-sync"
#: The phases a sync operation ends in (gitops-engine `OperationPhase.Completed`).
SUCCEEDED = "Succeeded"
ENDED = frozenset({SUCCEEDED, "Failed", "Error"})


@dataclass(frozen=True, slots=True, eq=False)
class AppPart:
    """One Application's part of the artifact: where it lives and what it holds (compared by
    identity: its objects are dicts)."""

    namespace: str
    name: str
    file: str
    objects: tuple[dict[str, Any], ...]

    def display(self) -> str:
        return f"Application {self.namespace}/{self.name}"


#: Where Argo CD's settings are, in its own namespace (`application.resourceTrackingMethod`,
#: `application.instanceLabelKey`, `installationID`).
SETTINGS_CONFIGMAP = "argocd-cm"
#: The tracking annotation's companion when Argo CD has an installation ID.
INSTALLATION_ID = "argocd.argoproj.io/installation-id"
_LABEL_MAX = 63


@dataclass(frozen=True, slots=True)
class Tracking:
    """How Argo CD marks what an Application owns (argo-cd `SetAppInstance`): an annotation
    (the default since 3.0), a label, or both. A local sync's manifests carry the marks
    themselves (the CLI sets them, as the repo-server does for a source's), since the
    controller applies them as they are: an object without them is not the Application's, and
    it would never prune it."""

    method: str = "annotation"
    label_key: str = argocd.INSTANCE
    installation_id: str = ""

    @classmethod
    def from_settings(cls, data: dict[str, Any] | None) -> Tracking:
        """From `argocd-cm`'s data (None: no such ConfigMap, Argo CD's defaults)."""
        data = data or {}
        return cls(
            str(data.get("application.resourceTrackingMethod") or "annotation"),
            str(data.get("application.instanceLabelKey") or argocd.INSTANCE),
            str(data.get("installationID") or ""),
        )

    def mark(self, obj: dict[str, Any], instance: str, namespace: str) -> dict[str, Any]:
        """`obj` with the marks that make it Application `instance`'s; `namespace` is the
        destination's, for an object that names none."""
        out = copy.deepcopy(obj)
        meta = out.setdefault("metadata", {})
        if self.method != "label":
            group = group_of(str(out.get("apiVersion") or ""))
            ns = meta.get("namespace") or namespace
            tracking = f"{instance}:{group}/{out.get('kind', '')}:{ns}/{meta.get('name', '')}"
            annotations = meta.setdefault("annotations", {})
            annotations[argocd.TRACKING] = tracking
            annotations.pop(INSTALLATION_ID, None)
            if self.installation_id:
                annotations[INSTALLATION_ID] = self.installation_id
        if self.method in ("label", "annotation+label"):
            meta.setdefault("labels", {})[self.label_key] = _label_value(instance, self.method)
        return out


def _label_value(instance: str, method: str) -> str:
    """The instance label's value: with both marks, cut to a label's 63 characters and to an
    alphanumeric end, as Argo CD cuts it (with the label alone it is the name as it is)."""
    if method == "label" or len(instance) <= _LABEL_MAX:
        return instance
    return instance[:_LABEL_MAX].rstrip("-_.")


def skip_reason(app: dict[str, Any] | None) -> str | None:
    """Why this Application is not synced from the artifact (None: it is). Nothing it holds is
    deleted either way: a skipped Application follows its own source, as before."""
    if app is None:
        return (
            "not in the cluster (the candidate adds it, or it was never synced): its objects "
            "reach the cluster with the merged deploy"
        )
    if syncs_automatically(app.get("spec") or {}):
        return (
            "has automated sync, and Argo CD syncs local manifests only without it (argocd-server "
            "refuses it: the next automated sync would undo it); it follows its own "
            "targetRevision, and while the speculation fence is held the webhook refuses its "
            "guarded deletions"
        )
    return None


def busy_reason(app: dict[str, Any]) -> str | None:
    """Why the sync cannot start now (a retry later may): as argocd-server refuses it."""
    if (app.get("metadata") or {}).get("deletionTimestamp"):
        return "is being deleted"
    if app.get("operation"):
        return "has another operation in progress (wait for it, then run this again)"
    return None


def sync_patch(
    app: dict[str, Any], part: AppPart, nonce: str, reason: str, tracking: Tracking, control: str
) -> dict[str, Any]:
    """The merge patch that asks the application controller to sync `part`'s objects, marked
    as the Application's: the operation argocd-server writes for a local sync. Its
    resourceVersion makes it a precondition: a write since `app` was read is a conflict, not a
    lost operation. `control` is Argo CD's own namespace."""
    spec = app.get("spec") or {}
    policy = spec.get("syncPolicy") or {}
    instance = instance_name(part.namespace, part.name, control)
    destination = str((spec.get("destination") or {}).get("namespace") or "")
    objects = [tracking.mark(o, instance, destination) for o in part.objects]
    sync: dict[str, Any] = {
        "prune": False,
        "manifests": [json.dumps(o, sort_keys=True) for o in objects],
    }
    if app_sync_options(spec):
        sync["syncOptions"] = app_sync_options(spec)
    operation: dict[str, Any] = {
        "initiatedBy": {"username": INITIATOR},
        "info": [{"name": "Reason", "value": reason}, {"name": NONCE_INFO, "value": nonce}],
        "sync": sync,
    }
    if policy.get("retry"):
        operation["retry"] = policy["retry"]
    version = (app.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"metadata": {"resourceVersion": version}, "operation": operation}
    # The controller writes each operation's state over the last one's with a merge patch, so a
    # field the new one leaves out (prune: false, no revision) would read as the old one's, and
    # an operation it resumes from that record would run with them: the last sync's record goes
    # first (the operation itself is required there).
    if (app.get("status") or {}).get("operationState"):
        patch["status"] = {"operationState": {"operation": {"sync": None}}}
    return patch


def forget_manifests(info: list[Any]) -> list[dict[str, Any]]:
    """The JSON patch that takes this sync's manifests out of its record once it has ended,
    tested to still be this sync's: the next operation's state is merged over the record, and an
    operation the controller resumes from it would sync the artifact again instead of its
    source."""
    where = "/status/operationState/operation"
    return [
        {"op": "test", "path": f"{where}/info", "value": info},
        {"op": "remove", "path": f"{where}/sync/manifests"},
    ]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How this sync ended: its phase and Argo CD's message (a refusal's reason is in it)."""

    phase: str
    message: str

    @property
    def succeeded(self) -> bool:
        return self.phase == SUCCEEDED


def outcome(app: dict[str, Any], nonce: str) -> Outcome | None:
    """This sync's end, once `status.operationState` is this operation's and has ended; None
    while it runs (or before the controller took it)."""
    state = (app.get("status") or {}).get("operationState") or {}
    if not _carries(state.get("operation"), nonce) or state.get("phase") not in ENDED:
        return None
    return Outcome(str(state["phase"]), str(state.get("message") or ""))


def replaced(app: dict[str, Any], nonce: str) -> bool:
    """True when another operation took this one's place before the controller ran it: the
    operation field is someone else's."""
    operation = app.get("operation")
    return bool(operation) and not _carries(operation, nonce)


def _carries(operation: Any, nonce: str) -> bool:
    """True when an operation is this sync's: its info names the nonce."""
    info = operation.get("info") if isinstance(operation, dict) else None
    mark = {"name": NONCE_INFO, "value": nonce}
    return isinstance(info, list) and mark in info
