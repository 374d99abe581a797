"""Flux's kustomize-controller: its keep and force marks, its owner labels, its Kustomization.

- Keep: `kustomize.toolkit.fluxcd.io/prune: disabled`, as a label or an annotation, compared
  case-insensitively and not trimmed (fluxcd/pkg ssa `utils.AnyInMetadata`, `strings.EqualFold`);
  read for a prune and for the finalizer of a deleted Kustomization alike.
- Force: `kustomize.toolkit.fluxcd.io/force: enabled` (or the Kustomization's `spec.force: true`,
  which an object's `force: disabled` does not switch off: fluxcd/pkg ssa).
- Opt-outs (kustomize-controller `apply` and `prune`, fluxcd/pkg ssa `shouldSkipApply` and
  `Delete`): `kustomize.toolkit.fluxcd.io/reconcile: disabled` or `ssa: Ignore` on the desired
  object or the live one skips its apply; `ssa: IfNotPresent` on the desired object skips the
  apply of an object that exists (it is created, never updated). The prune skips a live object
  carrying `prune: disabled`, `reconcile: disabled` or `ssa: Ignore`: seen with the real
  kustomize-controller 1.9.6 (tests/e2e/test_flux_optouts.py: "garbage collection completed:
  ... ignored skipped"), though its `prune` source lists only the first two as exclusions. A
  `reconcile: disabled` or `ssa: Ignore` written in git is never applied (the object's own
  apply is skipped), so as a keep mark it counts only read live.
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
#: The opt-out of applying and pruning (`disabled`), set on the live object by hand.
RECONCILE = "kustomize.toolkit.fluxcd.io/reconcile"
#: The server-side apply policy: `Ignore` (never applied), `IfNotPresent` (created only).
SSA = "kustomize.toolkit.fluxcd.io/ssa"
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


def _marked(meta: tuple[Meta, Meta], key: str, value: str) -> str | None:
    """fluxcd/pkg ssa `utils.AnyInMetadata` for one key: the label's or the annotation's value
    when it equals `value` case-insensitively (`meta` is (annotations, labels))."""
    for m in meta:
        found = m.get(key)
        if isinstance(found, str) and found and found.lower() == value.lower():
            return found
    return None


def apply_skipped(desired: tuple[Meta, Meta], existing: tuple[Meta, Meta] | None) -> str | None:
    """Why kustomize-controller does not apply this object (`key: value`), or None: `reconcile:
    disabled` or `ssa: Ignore` on the desired object or on the existing (live) one, or `ssa:
    IfNotPresent` on the desired object when it exists (`existing` is not None). Each of
    `desired` and `existing` is (annotations, labels)."""
    for side in (desired, existing):
        if side is None:
            continue
        for key, value in ((RECONCILE, "disabled"), (SSA, "Ignore")):
            found = _marked(side, key, value)
            if found is not None:
                return f"{key}: {found}"
    if existing is not None:
        found = _marked(desired, SSA, "IfNotPresent")
        if found is not None:
            return f"{SSA}: {found}"
    return None


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

    def keeps_live(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """Read live, `reconcile: disabled` and `ssa: Ignore` keep too (see the module
        docstring: the real controller's prune skips both)."""
        found = self.keeps(annotations, labels, event)
        if found is not None:
            return found
        for key, value in ((RECONCILE, "disabled"), (SSA, "Ignore")):
            marked = _marked((annotations, labels), key, value)
            if marked is not None:
                return Found(self.name, key, marked)
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
