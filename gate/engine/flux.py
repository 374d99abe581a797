"""Which Flux Kustomization applies an object, and what it does when it stops applying it.

`--flux-root` tags every object with the Kustomization that applies it (`flux:NS/NAME`, see
`gate.sources.flux`). An object that leaves the candidate is then deleted only if that
Kustomization prunes: with `spec.prune: false` it stays, unmanaged; a removed Kustomization
deletes what it applied unless `spec.prune` is off or `spec.deletionPolicy: Orphan`
(kustomize-controller's finalizer; `Delete` and `WaitForTermination` delete even without prune).
The cause a finding shows says which Kustomization, and what about it changed. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gate.engine.deployers import helm
from gate.engine.kustomizations import FLUX_GROUP, HELM_PREFIX, ROOT_PREFIX
from gate.engine.plan import Action, Change
from gate.model.objects import Inventory, Manifest
from gate.model.refs import ObjectRef

HELM_GROUP = helm.GROUP
#: Flux's source objects (GitRepository, OCIRepository, Bucket, HelmRepository, HelmChart, ...):
#: what source-controller fetches, which Kustomizations and releases build from.
SOURCE_GROUP = "source.toolkit.fluxcd.io"
#: The fields of a Kustomization that decide what it applies.
POINTING = ("path", "targetNamespace", "sourceRef")


def parent_ref(root: str) -> ObjectRef | None:
    """The Kustomization (`flux:NS/NAME`) or HelmRelease (`helm:NS/NAME`) a root tag names, or
    None for any other root."""
    for prefix, group, kind in (
        (ROOT_PREFIX, FLUX_GROUP, "Kustomization"),
        (HELM_PREFIX, HELM_GROUP, "HelmRelease"),
    ):
        if root.startswith(prefix):
            ns, _, name = root.removeprefix(prefix).partition("/")
            return ObjectRef(group, kind, ns, name)
    return None


def _prunes(k: Manifest) -> bool:
    return k.spec.get("prune") is True


def deletes_when_removed(k: Manifest) -> bool:
    """Whether a removed Kustomization's finalizer deletes what it applied: never when it is
    suspended (kustomize-controller `finalizerShouldDeleteResources`), nor with deletionPolicy
    Orphan; with Delete or WaitForTermination always; with MirrorPrune (the default) when it
    prunes."""
    policy = str(k.spec.get("deletionPolicy") or "MirrorPrune")
    if policy == "Orphan" or k.spec.get("suspend") is True:
        return False
    return policy in ("Delete", "WaitForTermination") or _prunes(k)


def was_rendered(release: ObjectRef, base: Inventory) -> bool:
    """True when base holds what HelmRelease `release` installs (its chart was rendered)."""
    return f"{HELM_PREFIX}{release.namespace}/{release.name}" in base.roots()


def was_read(kustomization: ObjectRef, base: Inventory) -> bool:
    """True when `--flux-root` built what Kustomization `kustomization` applies in base: its
    objects carry its root tag, or it was itself reached from a Flux entry point (whose reader
    builds every Kustomization it reaches, or stops: an empty build applied nothing)."""
    if f"{ROOT_PREFIX}{kustomization.namespace}/{kustomization.name}" in base.roots():
        return True
    m = base.get(kustomization)
    return m is not None and m.root.startswith(ROOT_PREFIX)


def root_removed(root: str, base: Inventory, head: Inventory) -> bool:
    """True when the root is a Kustomization the candidate removes: its objects go on purpose."""
    ref = parent_ref(root)
    return ref is not None and ref in base and ref not in head


def explain_removals(changes: Iterable[Change], base: Inventory, head: Inventory) -> list[Change]:
    """Each DELETE of an object a Kustomization applied, with the cause in that Kustomization's
    terms, or marked `orphaned` when Flux will leave it in the cluster."""
    return [_explained(c, base, head) for c in changes]


def _explained(change: Change, base: Inventory, head: Inventory) -> Change:
    if change.action is not Action.DELETE or change.base is None:
        return change
    ref = parent_ref(change.base.root)
    parent = base.get(ref) if ref is not None else None
    if ref is None or parent is None:
        return change
    name = f"{ref.kind} {ref.namespace}/{ref.name}"
    now = head.get(ref)
    if ref.kind == "HelmRelease":
        if now is None:
            return replace(
                change,
                cause=f"{name} is removed: helm-controller uninstalls the "
                "release, which deletes what its chart made",
            )
        return replace(change, cause=f"{name}'s chart no longer makes it: the upgrade deletes it")
    if now is None:
        if not deletes_when_removed(parent):
            why = _kept_by(parent)
            return replace(change, orphaned=f"{name} is removed with {why}: Flux leaves it")
        return replace(change, cause=f"{name} is removed (prune on): Flux deletes what it applied")
    if not _prunes(now):
        return replace(change, orphaned=f"{name} has spec.prune off: Flux leaves it")
    moved = [f for f in POINTING if parent.spec.get(f) != now.spec.get(f)]
    if moved:
        what = "; ".join(
            f"spec.{f} changes from {_show(parent.spec.get(f))} to {_show(now.spec.get(f))}"
            for f in moved
        )
        unread = " (a source prune-gate does not read)" if "sourceRef" in moved else ""
        cause = f"{name} no longer applies it and prunes it: {what}{unread}"
        return replace(change, cause=cause + _suspended(now))
    return replace(change, cause=f"{name} no longer applies it, and prunes it" + _suspended(now))


def _suspended(k: Manifest) -> str:
    """A staying Kustomization that is suspended applies and prunes nothing now, and prunes
    what left it when it is resumed (kustomize-controller skips a suspended reconcile): still a
    deletion, said as such."""
    if k.spec.get("suspend") is not True:
        return ""
    return " (it has spec.suspend: true: the prune happens when it is resumed)"


def _kept_by(k: Manifest) -> str:
    """What makes a removed Kustomization leave what it applied (`deletes_when_removed` False)."""
    if k.spec.get("suspend") is True:
        return "spec.suspend: true"
    if k.spec.get("deletionPolicy") == "Orphan":
        return "spec.deletionPolicy: Orphan"
    return "spec.prune off"


def _show(value: object) -> str:
    if isinstance(value, dict):
        kind, ns, nm = value.get("kind", ""), value.get("namespace", ""), value.get("name", "")
        return f"{kind} {ns + '/' if ns else ''}{nm}".strip()
    return "unset" if value in (None, "") else str(value)
