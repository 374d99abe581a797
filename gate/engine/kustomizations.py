"""Which Flux Kustomization of the repository applies an object, and whether it forces.

Flux force-replaces an object whose immutable field changes when its Kustomization has
`spec.force: true` or the object says `kustomize.toolkit.fluxcd.io/force: enabled`; the object's
`force: disabled` does not switch a Kustomization's force off (fluxcd/pkg ssa). So whether a claim
is replaced is read from the repository itself, not from a `--force` flag someone has to remember.

The Kustomizations that may apply an object are the one `--flux-root` tagged it with (its root)
and the candidate's whose `spec.path` holds the object's file (the paths are this repository's, as
`./apps/db` names `apps/db`); what a HelmRelease's chart renders has none (helm-controller applies
it). Under `--live`, the live Kustomization the live object's Flux labels name counts too (one the
repository may not declare at all). Any of them forcing is force: a wrong guess here only turns
one block (an immutable change) into another (a replacement), never a block into a pass. Pure.
"""

from __future__ import annotations

import posixpath

from gate.engine.deployers import FLUX, flux
from gate.model.liveview import LiveView
from gate.model.objects import Inventory, Manifest
from gate.model.refs import ObjectRef

#: Flux's words, as `gate.engine.deployers.flux` defines them (named here for the modules that
#: import them from here).
FLUX_GROUP = flux.GROUP
FLUX_FORCE = flux.FORCE
FLUX_NAME = flux.NAME
FLUX_NAMESPACE = flux.NAMESPACE
#: The tag `--flux-root` gives an object: the Kustomization `flux:NS/NAME` that applies it.
ROOT_PREFIX = "flux:"
#: The tag of what a HelmRelease's chart renders (`helm:NS/NAME`): helm-controller applies it.
HELM_PREFIX = "helm:"


def applying_kustomizations(m: Manifest, head: Inventory) -> list[Manifest]:
    """The candidate's Kustomizations that may apply `m`: the one `--flux-root` tagged it with,
    and every one whose `spec.path` holds its file. All of them, not the likeliest: force from
    any of them replaces the object, and a candidate could add a Kustomization that forces
    nothing to shadow one that does."""
    found: list[Manifest] = []
    if m.root.startswith(ROOT_PREFIX):
        ns, _, name = m.root.removeprefix(ROOT_PREFIX).partition("/")
        tagged = head.get(ObjectRef(FLUX_GROUP, "Kustomization", ns, name))
        found += [tagged] if tagged is not None else []
    if m.root.startswith(HELM_PREFIX) or m.source is None or m.source.path.startswith("<"):
        return found  # a chart's object is applied by helm-controller, whatever its file
    file_dir = _normal(posixpath.dirname(m.source.path))
    for k in head.of_kind(FLUX_GROUP, "Kustomization"):
        path = k.spec.get("path")
        if not isinstance(path, str) or k in found:
            continue
        root = _normal(path)
        if not root or file_dir == root or file_dir.startswith(root + "/"):
            found.append(k)
    return found


def forcing_kustomization(m: Manifest, head: Inventory) -> Manifest | None:
    """The first of `m`'s applying Kustomizations with `spec.force: true`, or None."""
    return next((k for k in applying_kustomizations(m, head) if kustomization_forces(k)), None)


def live_forcing_kustomization(ref: ObjectRef, live: LiveView) -> str:
    """`Kustomization NS/NAME` when the live object's Flux labels name a live Kustomization with
    `spec.force: true` (for a Kustomization the repository does not declare), else ""."""
    obj = live.get(ref)
    owner = FLUX.owner(obj.annotations, obj.labels) if obj is not None else None
    if owner is None or not owner.name or not owner.namespace:
        return ""
    ns, name = owner.namespace, owner.name
    k = live.get(ObjectRef(FLUX_GROUP, "Kustomization", ns, name))
    return f"Kustomization {ns}/{name}" if k is not None and k.facts.get("force") == "true" else ""


def _normal(path: str) -> str:
    """`./apps/db/` -> `apps/db`; the repository root is ``."""
    cleaned = posixpath.normpath(path.strip().lstrip("/") or ".")
    return "" if cleaned == "." else cleaned


def kustomization_forces(k: Manifest) -> bool:
    """`spec.force: true` (a YAML true; Flux's field is a boolean)."""
    return k.spec.get("force") is True


def force_disabled(m: Manifest) -> bool:
    """The manifest says `force: disabled` (`gate.engine.deployers.flux.force_disabled`)."""
    return flux.force_disabled(m.annotations)
