"""Argo CD: its `sync-options` (parsed here, once), its tracking marks, its Application.

- `argocd.argoproj.io/sync-options` is a comma-separated list, each option trimmed and compared
  exactly (gitops-engine `resource.HasAnnotationOption`): `Prune=false` keeps an object a sync
  would prune, `Delete=false` keeps it when its Application is deleted, `Replace=true` replaces
  it (kubectl replace/create) where an apply would fail.
- Owner: the `argocd.argoproj.io/tracking-id` annotation (`APP:GROUP/KIND:NS/NAME`), else the
  `app.kubernetes.io/instance` label (label tracking, the default before 3.0).
- Parent: the Application, whose `status.resources` lists what it synced and whose resources
  finalizer (and its `/background`, `/foreground` forms) deletes it when it is deleted.
Pure.
"""

from __future__ import annotations

from typing import Any

from gate.engine.deployers.base import Deployer, Event, Found, Meta, Owner, Parent
from gate.model.refs import CLUSTER_SCOPED, ObjectRef

GROUP = "argoproj.io"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
TRACKING = "argocd.argoproj.io/tracking-id"
INSTANCE = "app.kubernetes.io/instance"
#: The option that keeps an object at each event.
KEEP_OPTIONS = {Event.PRUNE: "Prune=false", Event.DELETE: "Delete=false"}
REPLACE = "Replace=true"
#: The resources finalizer, as the ApplicationSet controller adds it to what it generates.
RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"
#: The finalizers with which Argo CD deletes an Application's resources (foreground by default).
FINALIZERS = frozenset(
    {
        RESOURCES_FINALIZER,
        "resources-finalizer.argocd.argoproj.io/background",
        "resources-finalizer.argocd.argoproj.io/foreground",
    }
)
#: Argo CD's objects that name a repository, revision and path to sync (an ApplicationSet
#: generates Applications from its template and generators).
BUILDER_KINDS = ("Application", "ApplicationSet")


def sync_options(annotations: Meta) -> tuple[str, ...]:
    """The object's sync options, each trimmed, empty ones left out: the one reading of the
    annotation every rule shares."""
    raw = annotations.get(SYNC_OPTIONS)
    if not isinstance(raw, str):
        return ()
    return tuple(o for o in (p.strip() for p in raw.split(",")) if o)


def resources(obj: dict[str, Any]) -> tuple[ObjectRef, ...]:
    """An Application's `status.resources`: what it synced."""
    out = []
    for r in (obj.get("status") or {}).get("resources") or ():
        if isinstance(r, dict) and r.get("kind") and r.get("name"):
            group, kind = str(r.get("group") or ""), str(r["kind"])
            ns = "" if (group, kind) in CLUSTER_SCOPED else str(r.get("namespace") or "")
            out.append(ObjectRef(group, kind, ns, str(r["name"])))
    return tuple(out)


APPLICATION = Parent(
    GROUP, "Application", lists="status.resources", applied=resources, finalizers=FINALIZERS
)

_FINALIZER_OWNER = (
    "Argo CD's application controller: removed once the Application's resources are deleted"
)


class ArgoCD(Deployer):
    name = "argocd"
    title = "Argo CD"
    keep_keys = (SYNC_OPTIONS,)
    force_keys = (SYNC_OPTIONS,)
    owner_keys = (TRACKING, INSTANCE)
    parents = (APPLICATION,)
    finalizers = {
        "resources-finalizer.argocd.argoproj.io": _FINALIZER_OWNER,
        "resources-finalizer.argocd.argoproj.io/": _FINALIZER_OWNER,
    }

    def keeps(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """`Prune=false` for a prune, `Delete=false` for the Application's deletion."""
        if KEEP_OPTIONS[event] in sync_options(annotations):
            return Found(self.name, SYNC_OPTIONS, annotations[SYNC_OPTIONS])
        return None

    def forces(self, annotations: Meta) -> Found | None:
        if REPLACE in sync_options(annotations):
            return Found(self.name, SYNC_OPTIONS, REPLACE)
        return None

    def owner(self, annotations: Meta, labels: Meta) -> Owner | None:
        """The application the tracking id names (its part before the first `:`), else the
        instance label's."""
        tracking = annotations.get(TRACKING)
        if tracking is not None:
            return Owner(self.name, "", tracking.partition(":")[0])
        instance = labels.get(INSTANCE)
        return Owner(self.name, "", instance) if instance is not None else None

    def owns(self, annotations: Meta, labels: Meta, namespace: str, name: str) -> bool:
        """The tracking id starts with `NAME:`; without one, the instance label is `NAME`."""
        tracking = annotations.get(TRACKING)
        if tracking is not None:
            return tracking.startswith(f"{name}:")
        return labels.get(INSTANCE) == name


ARGOCD = ArgoCD()


# Argo CD's switches, read in one place (docs/user-guide/sync-options.md; the ApplicationSet
# controller's `applicationset/utils`, `pkg/apis/application/v1alpha1/applicationset_types.go`).

#: `applicationsSync` policies that let the ApplicationSet controller delete an Application it
#: no longer generates, or delete its Applications with it (`ApplicationsSyncPolicy.AllowDelete`).
DELETING_POLICIES = frozenset({"sync", "create-delete"})
CONFIRM = "confirm"


def option(annotations: Meta, app_spec: dict[str, Any], name: str) -> str | None:
    """The value of sync option `name` (`Prune`, `Delete`) for one object: its own annotation's,
    else its Application's `spec.syncPolicy.syncOptions` default (the object's always wins)."""
    for o in sync_options(annotations):
        key, eq, value = o.partition("=")
        if eq and key == name:
            return value
    for o in app_sync_options(app_spec):
        key, eq, value = o.strip().partition("=")
        if eq and key == name:
            return value.strip()
    return None


def app_sync_options(app_spec: dict[str, Any]) -> list[str]:
    """The Application's `spec.syncPolicy.syncOptions`, as written: what each of its syncs
    takes (an automated one's, and argocd-server's for a manual one)."""
    policy = app_spec.get("syncPolicy")
    options = policy.get("syncOptions") if isinstance(policy, dict) else None
    return [str(o) for o in options] if isinstance(options, list) else []


def instance_name(namespace: str, name: str, control_plane: str) -> str:
    """The name Argo CD tracks an Application's objects by (`Application.InstanceName`): its
    name in Argo CD's own namespace (`control_plane`), `NAMESPACE_NAME` in another."""
    return name if namespace == control_plane else f"{namespace}_{name}"


def _automated(app_spec: dict[str, Any]) -> dict[str, Any] | None:
    """`syncPolicy.automated` when automation is on (`enabled: false` switches it off, Argo CD
    3.0; `SyncPolicy.IsAutomatedSyncEnabled`)."""
    policy = app_spec.get("syncPolicy")
    automated = policy.get("automated") if isinstance(policy, dict) else None
    if not isinstance(automated, dict) or automated.get("enabled") is False:
        return None
    return automated


def syncs_automatically(app_spec: dict[str, Any]) -> bool:
    """True when the Application syncs by itself (`syncPolicy.automated`, not switched off)."""
    return _automated(app_spec) is not None


def prunes_automatically(app_spec: dict[str, Any]) -> bool:
    """True when the Application syncs by itself and prunes: `syncPolicy.automated.prune`."""
    automated = _automated(app_spec)
    return automated is not None and automated.get("prune") is True


def sources(app_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """An Application's sources: `spec.sources` when it has any (multi-source), else its one
    `spec.source` (`ApplicationSpec.GetSources`)."""
    many = app_spec.get("sources")
    if isinstance(many, list) and many:
        return [s for s in many if isinstance(s, dict)]
    one = app_spec.get("source")
    return [one] if isinstance(one, dict) else []


def resources_finalizer(metadata: dict[str, Any]) -> str | None:
    """The resources finalizer the Application carries (its deletion deletes what it deployed)."""
    found = metadata.get("finalizers")
    return next((f for f in found if f in FINALIZERS), None) if isinstance(found, list) else None


def applications_sync(appset_spec: dict[str, Any]) -> str:
    """An ApplicationSet's `spec.syncPolicy.applicationsSync` (default `sync`)."""
    policy = appset_spec.get("syncPolicy")
    value = policy.get("applicationsSync") if isinstance(policy, dict) else None
    return str(value) if value else "sync"
