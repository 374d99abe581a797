"""Every deployer prune-gate knows, and the questions the rules ask all of them at once.

A rule asks here, never by a key: "is this object kept from a prune (or from its parent's
deletion), and by which mark?" (`keep_mark`), "would a deployer force-replace it?"
(`force_mark`), "which deployer's parent applied it?" (`owners`), "is this kind a parent, and of
which deployer?" (`parent_of`), "who removes this finalizer?" (`finalizer_owner`). The order of
`DEPLOYERS` is the order marks are looked for (the first found is the one a finding quotes).
Pure.
"""

from __future__ import annotations

from gate.engine.deployers.argocd import ARGOCD
from gate.engine.deployers.base import NONE, Deployer, Event, Found, Meta, Owner, Parent
from gate.engine.deployers.flux import FLUX
from gate.engine.deployers.helm import HELM
from gate.engine.deployers.kapp import KAPP
from gate.engine.deployers.kubectl import KUBECTL

#: Every deployer, in the order their marks are looked for.
DEPLOYERS: tuple[Deployer, ...] = (FLUX, ARGOCD, HELM, KAPP, KUBECTL)
BY_NAME: dict[str, Deployer] = {d.name: d for d in DEPLOYERS}
#: Every parent kind, with its deployer.
PARENTS: dict[tuple[str, str], tuple[Deployer, Parent]] = {
    p.gk: (d, p) for d in DEPLOYERS for p in d.parents
}
#: The parents whose live object lists what they applied (read into the live view).
LISTING: dict[tuple[str, str], Parent] = {gk: p for gk, (_, p) in PARENTS.items() if p.lists}
#: Parents whose controller applies and prunes as `spec.serviceAccountName`.
IMPERSONATING: tuple[tuple[str, str], ...] = tuple(
    gk for gk, (_, p) in PARENTS.items() if p.impersonates
)


def keep_mark(annotations: Meta, labels: Meta = NONE, event: Event = Event.PRUNE) -> Found | None:
    """The first deployer's mark that keeps the object at `event`, or None. A caller that
    passes no labels reads annotations only (Flux alone reads its mark as a label too)."""
    for d in DEPLOYERS:
        found = d.keeps(annotations, labels, event)
        if found is not None:
            return found
    return None


def live_keep_mark(
    annotations: Meta, labels: Meta = NONE, event: Event = Event.PRUNE
) -> Found | None:
    """`keep_mark` read on a LIVE object: also the marks a tool honours only there (Flux's
    `reconcile: disabled`, which its apply never writes)."""
    for d in DEPLOYERS:
        found = d.keeps_live(annotations, labels, event)
        if found is not None:
            return found
    return None


def force_mark(annotations: Meta) -> Found | None:
    """The first deployer's mark that makes it delete and recreate the object on a change it
    cannot apply, or None."""
    for d in DEPLOYERS:
        found = d.forces(annotations)
        if found is not None:
            return found
    return None


def owners(annotations: Meta, labels: Meta) -> tuple[Owner, ...]:
    """Every deployer parent whose ownership marks the object carries."""
    found = (d.owner(annotations, labels) for d in DEPLOYERS)
    return tuple(o for o in found if o is not None)


def parent_of(group: str, kind: str) -> tuple[Deployer, Parent] | None:
    """The deployer and parent description of a kind, or None for a kind that is no parent."""
    return PARENTS.get((group, kind))


def finalizer_owner(name: str) -> str | None:
    """Who removes a deployer's finalizer, and when; None for one no deployer has."""
    for d in DEPLOYERS:
        if name in d.finalizers:
            return d.finalizers[name]
    for d in DEPLOYERS:
        for prefix, owner in d.finalizers.items():
            if prefix.endswith("/") and name.startswith(prefix):
                return owner
    return None


def keys() -> frozenset[str]:
    """Every label and annotation key some deployer reads."""
    return frozenset(k for d in DEPLOYERS for k in (*d.keep_keys, *d.force_keys, *d.owner_keys))
