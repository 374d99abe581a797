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
from typing import Any

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
    """True when `--argocd-root` rendered everything Application `app` deploys in base: its
    objects carry its root, and none of its sources is a chart from a Helm repository or an
    OCI registry, which the reader never renders (a multi-source Application may render its
    repository's source and not its chart's)."""
    if f"{ROOT_PREFIX}{app.namespace}/{app.name}" not in base.roots():
        return False
    declared = base.get(app)
    return declared is None or not any(_elsewhere(s) for s in argocd.sources(declared.spec))


def _elsewhere(source: dict[str, Any]) -> bool:
    """A source no git repository holds: a Helm repository's chart, or an OCI artifact."""
    return bool(source.get("chart")) or str(source.get("repoURL") or "").startswith("oci://")


#: The sync option with which an Application's prunes leave the pruned object's dependents
#: (gitops-engine `WithPrunePropagationPolicy`; foreground by default).
ORPHAN_PRUNES = "PrunePropagationPolicy=orphan"


def prune_orphans(change: Change, base: Inventory, head: Inventory) -> str:
    """Why the garbage collector leaves the dependents of the object `change` prunes, or "":
    its Application prunes with `PrunePropagationPolicy=orphan` under both its specs (it may
    sync the candidate under either), so the delete is sent with propagationPolicy Orphan."""
    app = application_of(change.base.root) if change.base is not None else None
    if change.event is not Event.PRUNE or app is None:
        return ""
    specs = (base.get(app), head.get(app))
    if not all(m is not None and ORPHAN_PRUNES in argocd.app_sync_options(m.spec) for m in specs):
        return ""
    return (
        f"Application {app.namespace}/{app.name} prunes with {ORPHAN_PRUNES}: the garbage "
        "collector leaves its dependents"
    )


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
    deployed = base.get(appset) if appset is not None else None
    if appset is None or deployed is None:
        return change
    return _generated(change, deployed, head.get(appset))


def _keeping_policy(appset: Manifest, now: Manifest | None) -> str | None:
    """The `applicationsSync` that keeps the ApplicationSet's Applications, or None when either
    spec lets the controller delete them: it may reconcile the candidate's generators under
    the spec deployed before (base) or the candidate's, so a candidate cannot make its own
    deletion safe by changing the policy in the same commit."""
    policies = {argocd.applications_sync(m.spec) for m in (appset, now) if m is not None}
    if policies & argocd.DELETING_POLICIES:
        return None
    return " and ".join(sorted(policies))


def _generated(change: Change, appset: Manifest, now: Manifest | None) -> Change:
    """An Application its ApplicationSet no longer generates, or whose ApplicationSet goes."""
    name = f"ApplicationSet {appset.ref.namespace}/{appset.ref.name}"
    policy = _keeping_policy(appset, now)
    if policy is not None:
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
    # The Application may sync the candidate's revision under the spec deployed before (base)
    # or under the candidate's: it prunes the object when either would.
    leaves = [_prune_kept(annotations, m, name) for m in (app, now)]
    if all(leaves):
        return replace(change, orphaned=leaves[-1])
    if not any(argocd.prunes_automatically(m.spec) for m in (app, now)):
        return replace(
            change,
            cause=f"{name} no longer deploys it; it does not prune automatically, but the next "
            "sync with prune deletes it (a merge-queue job's argocd app sync --prune, or a "
            "person's)",
        )
    which = ""
    if leaves[1]:  # the candidate's spec would leave it; the deployed one prunes it first
        which = " under the spec deployed now, which may sync the candidate's revision first"
    elif leaves[0]:
        which = " under the candidate's spec"
    return replace(
        change,
        cause=f"{name} no longer deploys it, and prunes automatically "
        f"(syncPolicy.automated.prune){which}",
    )


def _prune_kept(annotations: dict[str, str], app: Manifest, name: str) -> str:
    """Why Application `app` (one spec of it) leaves an object it no longer deploys, or ""."""
    prune = argocd.option(annotations, app.spec, "Prune")
    if prune == "false":
        return f"it has Prune=false: {name} leaves it"
    if prune == argocd.CONFIRM:
        return (
            f"it has Prune=confirm: {name} prunes it only once a person confirms, so it is no "
            "speculative loss"
        )
    return ""


def _application_stays(app: Manifest, base: Inventory, head: Inventory) -> str:
    """Why an Application that leaves the candidate stays in the cluster, or "": its
    ApplicationSet's `applicationsSync` does not let the controller delete it, or the
    Application that deploys it (an app of apps) stays and does not prune it."""
    who = f"Application {app.ref.namespace}/{app.ref.name}"
    parent_ref = application_of(app.root)
    if parent_ref is not None:
        parent, parent_now = base.get(parent_ref), head.get(parent_ref)
        if parent is None or parent_now is None:
            return ""  # deployed from the entry point, or its parent goes too: it goes
        name = f"Application {parent_ref.namespace}/{parent_ref.name}"
        leaves = [_prune_kept(app.annotations, m, name) for m in (parent, parent_now)]
        return f"{who} is not deleted ({leaves[-1]}), and keeps it" if all(leaves) else ""
    appset = appset_of(app.root)
    deployed = base.get(appset) if appset is not None else None
    if appset is None or deployed is None:
        return ""
    policy = _keeping_policy(deployed, head.get(appset))
    if policy is None:
        return ""
    return (
        f"ApplicationSet {appset.namespace}/{appset.name} has applicationsSync: {policy}, so "
        f"{who} is not deleted and keeps it"
    )


def _gone(app: Manifest, head: Inventory) -> str:
    appset = appset_of(app.root)
    if appset is None:
        return "removed"
    if head.get(appset) is None:
        return f"deleted with ApplicationSet {appset.namespace}/{appset.name}"
    return f"no longer generated by ApplicationSet {appset.namespace}/{appset.name}"
