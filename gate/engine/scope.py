"""Prune scopes: which live objects a deployer owns, and so which ones it will prune.

A commit's removals are only half of what a deploy deletes. Flux, Argo CD and Helm prune every live
object they own that the new revision no longer declares, including objects that no manifest in
base ever declared (created by an older revision, by hand, or by a revert that base never saw).
`--prune-scope` names the deployer; its ownership marks select the live objects it owns, and
"live-owned minus candidate" is the prune set, checked by the same rules as static removals.

Pure: ownership is read from labels and annotations already in a `LiveView` projection.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass

from gate.engine.deployers import ARGOCD, FLUX, HELM, Deployer, argocd, flux
from gate.engine.plan import Action, Change
from gate.model.errors import InputError
from gate.model.liveview import LiveObject
from gate.model.objects import Inventory
from gate.model.refs import ObjectRef

#: The deployers `--prune-scope` names, each reading its own ownership marks
#: (`gate.engine.deployers`); `label` is a plain selector.
SCOPED: dict[str, Deployer] = {d.name: d for d in (FLUX, ARGOCD, HELM)}
DEPLOYERS = (*SCOPED, "label")
SCOPE_USAGE = (
    "flux:NAMESPACE/NAME, argocd:NAMESPACE/NAME, argocd:APP, helm:NAMESPACE/RELEASE or "
    "label:SELECTOR (e.g. flux:flux-system/apps, argocd:argocd/shop, helm:shop/db, "
    "label:app.kubernetes.io/part-of=shop)"
)

#: Kinds scanned for ownership: everything a prune of them can lose data or wedge a deploy with,
#: plus the workloads whose removal takes consumers away. Pods and ReplicaSets are made by
#: controllers, not deployers, and are left out.
SCANNED_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "PersistentVolumeClaim"),
        ("", "PersistentVolume"),
        ("", "Namespace"),
        ("apps", "StatefulSet"),
        ("apps", "Deployment"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("snapshot.storage.k8s.io", "VolumeSnapshot"),
    }
)

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One term of an equality-based label selector: `k=v`, `k!=v`, `k` or `!k`."""

    key: str
    op: str  # "=", "!=", "exists", "!exists"
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when the labels satisfy this term (as the API server evaluates it)."""
        if self.op == "=":
            return labels.get(self.key) == self.value
        if self.op == "!=":
            return labels.get(self.key) != self.value
        if self.op == "exists":
            return self.key in labels
        return self.key not in labels


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a kubectl-style equality selector (`a=b,c!=d,e,!f`); set-based terms are errors."""
    terms: list[Requirement] = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            raise InputError(f"label selector {text!r} has an empty term")
        if " in " in term or " notin " in term or "(" in term:
            raise InputError(
                f"label selector term {term!r} is set-based; only equality terms are supported "
                "(key=value, key!=value, key, !key)"
            )
        if "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            req = Requirement(key, "!=", value)
        elif "=" in term:
            key, value = (p.strip() for p in term.split("==" if "==" in term else "=", 1))
            req = Requirement(key, "=", value)
        elif term.startswith("!"):
            req = Requirement(term[1:].strip(), "!exists")
        else:
            req = Requirement(term, "exists")
        if not _KEY.match(req.key) or not _VALUE.match(req.value):
            raise InputError(
                f"label selector term {term!r} is not a valid label key and value "
                "(keys look like [prefix/]name, values are alphanumeric with -_.)"
            )
        terms.append(req)
    return tuple(terms)


@dataclass(frozen=True, slots=True)
class PruneScope:
    """A deployer's ownership: `flux`, `argocd`, `helm` or a plain label selector."""

    deployer: str
    namespace: str = ""
    name: str = ""
    selector: tuple[Requirement, ...] = ()

    def __str__(self) -> str:
        if self.deployer == "argocd" and not self.namespace:
            return f"argocd:{self.name}"
        if self.deployer == "label":
            return "label:" + ",".join(_term(r) for r in self.selector)
        return f"{self.deployer}:{self.namespace}/{self.name}"

    def owns(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
        """True when an object with these labels and annotations belongs to this deployer (its
        ownership marks: `Deployer.owns`)."""
        deployer = SCOPED.get(self.deployer)
        if deployer is ARGOCD and self.namespace:
            # Argo CD names an Application outside its own namespace `NS_NAME` in its tracking
            # marks (`Application.InstanceName`); which namespace is its own is not known here,
            # so either name counts: a wider prune set is checked, never a narrower one.
            return any(
                deployer.owns(annotations, labels, "", app)
                for app in (self.name, f"{self.namespace}_{self.name}")
            )
        if deployer is not None:
            return deployer.owns(annotations, labels, self.namespace, self.name)
        return all(r.matches(labels) for r in self.selector)


def _term(r: Requirement) -> str:
    if r.op == "exists":
        return r.key
    if r.op == "!exists":
        return f"!{r.key}"
    return f"{r.key}{r.op}{r.value}"


def parse_scope(text: str) -> PruneScope:
    """Parse `--prune-scope`; a malformed value is an `InputError` that shows the accepted forms."""
    deployer, sep, rest = text.partition(":")
    deployer = deployer.strip().lower()
    rest = rest.strip()
    if not sep or deployer not in DEPLOYERS or not rest:
        raise InputError(f"--prune-scope {text!r} is not one of {SCOPE_USAGE}")
    if deployer == "label":
        return PruneScope("label", selector=parse_selector(rest))
    if deployer == "argocd" and "/" not in rest:
        return PruneScope("argocd", name=rest)
    namespace, slash, name = rest.partition("/")
    if not slash or not namespace or not name or "/" in name:
        if deployer == "argocd":
            raise InputError(
                f"--prune-scope {text!r}: argocd needs argocd:NAMESPACE/NAME (the Application's "
                "namespace and name: its live status.resources is the prune set) or argocd:APP "
                "(its tracking marks)"
            )
        what = "NAMESPACE/NAME" if deployer == "flux" else "NAMESPACE/RELEASE"
        raise InputError(
            f"--prune-scope {text!r}: {deployer} needs {deployer}:{what} (the namespace of the "
            f"{'Kustomization' if deployer == 'flux' else 'release'} and its name)"
        )
    return PruneScope(deployer, namespace=namespace, name=name)


def owned_objects(
    scope: PruneScope,
    objects: Iterable[LiveObject],
    controlled: Container[ObjectRef] = (),
    kinds: Container[tuple[str, str]] = SCANNED_KINDS,
) -> list[ObjectRef]:
    """Live objects of the scanned kinds this deployer owns, sorted.

    Objects with a controller owner (`controlled`: a claim a StatefulSet made from its template)
    are skipped: their labels are copied from a template, and the deployer never prunes them.
    """
    return sorted(
        o.ref
        for o in objects
        if (o.ref.group, o.ref.kind) in kinds
        and o.ref not in controlled
        and scope.owns(o.labels, o.annotations)
    )


def prune_set(
    scope: PruneScope,
    objects: Iterable[LiveObject],
    candidate: Container[ObjectRef],
    controlled: Container[ObjectRef] = (),
    kinds: Container[tuple[str, str]] = SCANNED_KINDS,
    inventory: Iterable[ObjectRef] | None = None,
) -> list[ObjectRef]:
    """Live-owned minus candidate: what the deployer deletes when it applies the candidate.

    With an `inventory` (a Flux Kustomization's `status.inventory`, the exact set
    kustomize-controller prunes from), the owned objects are its live entries of the scanned
    kinds; labels decide only where there is none (a label can be copied or stripped, the
    inventory is what the controller itself reads)."""
    if inventory is None:
        owned = owned_objects(scope, objects, controlled, kinds)
    else:
        live = {o.ref for o in objects}
        owned = sorted({r for r in inventory if (r.group, r.kind) in kinds and r in live})
    return [r for r in owned if r not in candidate]


#: Where each parent lists what its deployer applied, and so prunes from.
_LISTS = {"Kustomization": flux.KUSTOMIZATION.lists, "Application": argocd.APPLICATION.lists}


def scope_parent(scope: PruneScope) -> ObjectRef | None:
    """The live object whose own list says what the scope's deployer prunes: the Kustomization
    of `flux:NS/NAME` (`status.inventory`), the Application of `argocd:NS/NAME`
    (`status.resources`). None for scopes read from ownership marks only."""
    if scope.deployer == "flux":
        return ObjectRef(flux.GROUP, "Kustomization", scope.namespace, scope.name)
    if scope.deployer == "argocd" and scope.namespace:
        return ObjectRef(argocd.GROUP, "Application", scope.namespace, scope.name)
    return None


def prune_changes(
    scope: PruneScope, refs: Iterable[ObjectRef], base: Inventory, from_inventory: bool = False
) -> list[Change]:
    """One DELETE `Change` per pruned object, with its base manifest when base declares it."""
    parent = scope_parent(scope) if from_inventory else None
    owned = (
        f"in the {_LISTS[parent.kind]} of {parent.kind} {parent.namespace}/{parent.name}"
        if parent is not None
        else f"owned by {scope}"
    )
    cause = f"pruned: {owned} and not in the candidate"
    return [Change(ref, Action.DELETE, base.get(ref), None, cause) for ref in refs]
