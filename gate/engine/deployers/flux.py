"""Flux's kustomize-controller: its keep and force marks, its owner labels, its Kustomization.

- Keep: `kustomize.toolkit.fluxcd.io/prune: disabled`, as a label or an annotation, compared
  case-insensitively and not trimmed (fluxcd/pkg ssa `utils.AnyInMetadata`, `strings.EqualFold`);
  read for a prune and for the finalizer of a deleted Kustomization alike.
- Force: `kustomize.toolkit.fluxcd.io/force: enabled` (or the Kustomization's `spec.force: true`,
  which an object's `force: disabled` does not switch off: fluxcd/pkg ssa).
- Owner: the labels `kustomize.toolkit.fluxcd.io/name` and `/namespace` it puts on what it
  applies (`GetOwnerLabels`); its prune skips an object whose labels name another.
- Parent: the Kustomization, whose `status.inventory` lists what it applied and whose finalizer
  (`finalizers.fluxcd.io`) deletes it, unless `spec.prune` is off or `deletionPolicy: Orphan`.
Pure.
"""

from __future__ import annotations

from typing import Any

from gate.engine.deployers.base import Deployer, Event, Found, Meta, Owner, Parent
from gate.model.refs import CLUSTER_SCOPED, ObjectRef

GROUP = "kustomize.toolkit.fluxcd.io"
#: The keep mark (label or annotation) kustomize-controller's prune and finalizer skip.
PRUNE = "kustomize.toolkit.fluxcd.io/prune"
#: The force mark: `enabled` replaces on an immutable change; `disabled` does not switch a
#: Kustomization's `spec.force: true` off.
FORCE = "kustomize.toolkit.fluxcd.io/force"
#: The labels kustomize-controller puts on what it applies.
NAME = "kustomize.toolkit.fluxcd.io/name"
NAMESPACE = "kustomize.toolkit.fluxcd.io/namespace"
#: The annotation that switches post-build substitution off for one object.
SUBSTITUTE = "kustomize.toolkit.fluxcd.io/substitute"
#: The finalizer of every Flux object that deletes what it made (a Kustomization, a HelmRelease).
FINALIZER = "finalizers.fluxcd.io"
#: flux-operator's group: its ResourceSet applies and prunes as a service account too.
OPERATOR_GROUP = "fluxcd.controlplane.io"


def inventory(obj: dict[str, Any]) -> tuple[ObjectRef, ...]:
    """A Kustomization's `status.inventory.entries`: ids `<namespace>_<name>_<group>_<kind>`
    (none of the four may contain `_`)."""
    entries = ((obj.get("status") or {}).get("inventory") or {}).get("entries") or ()
    out = []
    for e in entries:
        parts = str(e.get("id", "")).split("_") if isinstance(e, dict) else []
        if len(parts) == 4 and parts[1] and parts[3]:
            ns, name, group, kind = parts
            out.append(ObjectRef(group, kind, "" if (group, kind) in CLUSTER_SCOPED else ns, name))
    return tuple(out)


def kustomization_facts(spec: dict[str, Any]) -> dict[str, str]:
    """What kustomize-controller's finalizer reads to decide whether it deletes its inventory,
    and whether it force-replaces what it applies: the live view's facts of a Kustomization."""
    return {
        "prune": "true" if spec.get("prune") is True else "false",
        "suspend": "true" if spec.get("suspend") is True else "false",
        "deletionPolicy": str(spec.get("deletionPolicy") or "MirrorPrune"),
        "force": "true" if spec.get("force") is True else "false",
    }


KUSTOMIZATION = Parent(
    GROUP,
    "Kustomization",
    lists="status.inventory",
    applied=inventory,
    finalizers=frozenset({FINALIZER}),
    impersonates=True,
)
#: flux-operator's ResourceSet: it applies (and prunes) the objects it templates as
#: `spec.serviceAccountName`; prune-gate reads nothing it lists.
RESOURCE_SET = Parent(OPERATOR_GROUP, "ResourceSet", impersonates=True)


def force_disabled(annotations: Meta) -> bool:
    """`force: disabled`: a mark that reads like a guard and does nothing under `spec.force`."""
    return str(annotations.get(FORCE, "")).strip().lower() == "disabled"


class Flux(Deployer):
    name = "flux"
    title = "Flux"
    keep_keys = (PRUNE,)
    force_keys = (FORCE,)
    owner_keys = (NAME, NAMESPACE)
    parents = (KUSTOMIZATION, RESOURCE_SET)
    finalizers = {
        FINALIZER: "the Flux controller of this kind: removed once what it applied is "
        "garbage-collected",
    }

    def keeps(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """`prune: disabled` in the annotations, else the labels: both events."""
        for value in (annotations.get(PRUNE), labels.get(PRUNE)):
            if isinstance(value, str) and value.lower() == "disabled":
                return Found(self.name, PRUNE, value)
        return None

    def forces(self, annotations: Meta) -> Found | None:
        if str(annotations.get(FORCE, "")).strip().lower() == "enabled":
            return Found(self.name, FORCE, "enabled")
        return None

    def owner(self, annotations: Meta, labels: Meta) -> Owner | None:
        """The Kustomization the owner labels name (the namespace "" when that label is
        missing, which matches no Kustomization)."""
        name = labels.get(NAME)
        if name is None:
            return None
        return Owner(self.name, labels.get(NAMESPACE) or "", name)

    def owns(self, annotations: Meta, labels: Meta, namespace: str, name: str) -> bool:
        return labels.get(NAME) == name and labels.get(NAMESPACE) == namespace


FLUX = Flux()
