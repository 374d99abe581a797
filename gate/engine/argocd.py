"""Which Argo CD Application deploys an object, and what Argo CD does when it stops deploying it.

`--argocd-root` tags what an Application deploys with `argocd:NS/NAME`, and each Application an
ApplicationSet generates with `appset:NS/NAME` (see `gate.sources.argocd`). An object that leaves
the candidate is then:
- deleted with its Application when the Application goes (removed, or no longer generated and
  its ApplicationSet's `applicationsSync` lets the controller delete it) with the resources
  finalizer, unless the object says `Delete=false` (or `Delete=confirm`: a person approves it);
- pruned by an Application that stays when it prunes automatically (`syncPolicy.automated.prune`),
  unless the object says `Prune=false` or `Prune=confirm` (its own annotation, else the
  Application's `syncOptions` default);
- otherwise left in the cluster, and said so (`orphaned`).
An Application an ApplicationSet no longer generates, or whose ApplicationSet is removed, is
explained in the ApplicationSet's terms. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gate.engine.deployers import Event, argocd
from gate.engine.plan import Action, Change
from gate.model.objects import Inventory, Manifest
from gate.model.refs import ObjectRef

ROOT_PREFIX = "argocd:"
APPSET_PREFIX = "appset:"
GROUP = argocd.GROUP


def _ref(root: str, prefix: str, kind: str) -> ObjectRef | None:
    if not root.startswith(prefix):
        return None
    ns, _, name = root.removeprefix(prefix).partition("/")
    return ObjectRef(GROUP, kind, ns, name)


def application_of(root: str) -> ObjectRef | None:
    """The Application a root tag (`argocd:NS/NAME`) names."""
    return _ref(root, ROOT_PREFIX, "Application")


def appset_of(root: str) -> ObjectRef | None:
    """The ApplicationSet a root tag (`appset:NS/NAME`) names."""
    return _ref(root, APPSET_PREFIX, "ApplicationSet")


def was_read(app: ObjectRef, base: Inventory) -> bool:
    """True when `--argocd-root` rendered what Application `app` deploys in base."""
    return f"{ROOT_PREFIX}{app.namespace}/{app.name}" in base.roots()


def explain_removals(changes: Iterable[Change], base: Inventory, head: Inventory) -> list[Change]:
    """Each DELETE of an object an Application deployed, or of an Application an
    ApplicationSet generated, with the cause in Argo CD's terms, or `orphaned` where Argo CD
    leaves it."""
    return [_explained(c, base, head) for c in changes]


def _explained(change: Change, base: Inventory, head: Inventory) -> Change:
    if change.action is not Action.DELETE or change.base is None:
        return change
    root = change.base.root
    app = application_of(root)
    if app is not None:
        parent = base.get(app)
        return change if parent is None else _deployed(change, parent, head.get(app), base, head)
    appset = appset_of(root)
    if appset is not None and base.get(appset) is not None:
        return _generated(change, base.get(appset), head.get(appset))  # type: ignore[arg-type]
    return change


def _generated(change: Change, appset: Manifest, now: Manifest | None) -> Change:
    """An Application its ApplicationSet no longer generates, or whose ApplicationSet goes."""
    name = f"ApplicationSet {appset.ref.namespace}/{appset.ref.name}"
    policy = argocd.applications_sync((now or appset).spec)
    if policy not in argocd.DELETING_POLICIES:
        return replace(
            change,
            orphaned=f"{name} has applicationsSync: {policy}, so the ApplicationSet controller "
            "does not delete the Applications it made",
        )
    if now is None:
        return replace(
            change,
            cause=f"{name} is removed: its Applications are deleted with it (ownerReferences)",
        )
    return replace(
        change, cause=f"{name} no longer generates it: the ApplicationSet controller deletes it"
    )


def _deployed(
    change: Change, app: Manifest, now: Manifest | None, base: Inventory, head: Inventory
) -> Change:
    """An object Application `app` deployed in base and nothing deploys in the candidate."""
    name = f"Application {app.ref.namespace}/{app.ref.name}"
    annotations = change.base.annotations if change.base is not None else {}
    if now is None:
        kept = _application_stays(app, base, head)
        if kept:
            return replace(change, orphaned=kept)
        finalizer = argocd.resources_finalizer(app.metadata)
        if finalizer is None:
            return replace(
                change,
                orphaned=f"{name} is removed without the resources finalizer: Argo CD leaves "
                "what it deployed",
            )
        delete = argocd.option(annotations, app.spec, "Delete")
        if delete == "false":
            return replace(
                change, orphaned=f"it has Delete=false: Argo CD leaves it when {name} is deleted"
            )
        if delete == argocd.CONFIRM:
            return replace(
                change,
                orphaned=f"it has Delete=confirm: deleting it with {name} waits for a person to "
                "approve (argocd.argoproj.io/deletion-approved), so it is no speculative loss",
            )
        return replace(
            change,
            cause=f"{name} is {_gone(app, head)} with the {finalizer} finalizer: Argo CD deletes "
            "what it deployed",
            event=Event.DELETE,
        )
    prune = argocd.option(annotations, now.spec, "Prune")
    if prune == "false":
        return replace(change, orphaned=f"it has Prune=false: {name} leaves it")
    if prune == argocd.CONFIRM:
        return replace(
            change,
            orphaned=f"it has Prune=confirm: {name} prunes it only once a person confirms, so it "
            "is no speculative loss",
        )
    if not argocd.prunes_automatically(now.spec):
        return replace(
            change,
            orphaned=f"{name} does not prune automatically (no syncPolicy.automated.prune): it "
            "shows as requiring pruning until someone syncs with prune",
        )
    return replace(
        change,
        cause=f"{name} no longer deploys it, and prunes automatically (syncPolicy.automated.prune)",
    )


def _application_stays(app: Manifest, base: Inventory, head: Inventory) -> str:
    """Why an Application that leaves the candidate stays in the cluster, or "": its
    ApplicationSet's `applicationsSync` does not let the controller delete it."""
    appset = appset_of(app.root)
    if appset is None or base.get(appset) is None:
        return ""
    set_now = head.get(appset) or base.get(appset)
    assert set_now is not None
    policy = argocd.applications_sync(set_now.spec)
    if policy in argocd.DELETING_POLICIES:
        return ""
    return (
        f"ApplicationSet {appset.namespace}/{appset.name} has applicationsSync: {policy}, so "
        f"Application {app.ref.namespace}/{app.ref.name} is not deleted and keeps it"
    )


def _gone(app: Manifest, head: Inventory) -> str:
    appset = appset_of(app.root)
    if appset is None:
        return "removed"
    if head.get(appset) is None:
        return f"deleted with ApplicationSet {appset.namespace}/{appset.name}"
    return f"no longer generated by ApplicationSet {appset.namespace}/{appset.name}"
