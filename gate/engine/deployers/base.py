"""The deployer seam: what prune-gate knows of one GitOps tool, behind one interface.

A deployer (Flux, Argo CD, Helm, kapp, kubectl's apply --prune) decides what leaves the cluster:
it prunes what it applied and the new revision no longer declares, and deleting its parent object
(a Kustomization, an Application, a HelmRelease, a kapp-controller App) deletes what that parent
applied. Each tool says so with labels and annotations of its own: which objects it owns, the
marks that make it leave an object in place (keep) or delete and recreate it (force), and the
finalizers with which a parent's deletion cascades. A `Deployer` gathers one tool's words; the
registry (`gate.engine.deployers.registry`) asks every deployer, so a rule asks "is this object
kept, and by which mark?" instead of naming keys.

Pure (no I/O, like all of `gate.engine`), and below every other engine module: a deployer
imports only `gate.model`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from gate.model.refs import ObjectRef

#: Labels or annotations, as read from a manifest or a live object.
Meta = Mapping[str, str]
#: No labels (or annotations): what a caller that reads only one of the two passes.
NONE: Meta = {}


class Event(StrEnum):
    """When a keep mark is read: each tool reads its own for each."""

    #: The object leaves what the deployer applies (a sync, an apply, an upgrade prunes it).
    PRUNE = "prune"
    #: The deployer's parent object is deleted (a finalizer, an uninstall deletes what it applied).
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Found:
    """A mark an object carries: which deployer reads it, its key and value.

    A keep mark's value is the object's own (as written, `Prune=false,Delete=false`); a force
    mark's is the setting that forces (`enabled`, `Replace=true`): what a finding quotes."""

    deployer: str
    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}: {self.value}"


@dataclass(frozen=True, slots=True)
class Owner:
    """Which of a deployer's parents applied an object, as its ownership marks name it
    (`namespace` is "" where the mark names none: an Argo CD application, a kapp app id)."""

    deployer: str
    namespace: str
    name: str


def _nothing(obj: dict[str, Any]) -> tuple[ObjectRef, ...]:
    return ()


@dataclass(frozen=True, slots=True)
class Parent:
    """A kind whose deletion deletes what it applied, as far as prune-gate reads it."""

    group: str
    kind: str
    #: Where the live parent lists what it applied (evidence words), "" where prune-gate reads
    #: no such list.
    lists: str = ""
    #: What it applied, read from the raw live object (`lists`); empty where it has none.
    applied: Callable[[dict[str, Any]], tuple[ObjectRef, ...]] = field(
        default=_nothing, compare=False
    )
    #: The finalizers with which its deletion deletes what it applied.
    finalizers: frozenset[str] = frozenset()
    #: Its controller applies and prunes as `spec.serviceAccountName` (and, for Flux,
    #: `spec.kubeConfig`): a candidate that changes it changes who the webhook's guards bind.
    impersonates: bool = False

    @property
    def gk(self) -> tuple[str, str]:
        return (self.group, self.kind)


class Deployer(ABC):
    """One tool's words. A subclass sets the class attributes and answers the three questions;
    adding a tool is one subclass, one line in the registry, and its tests (README, "Adding a
    deployer")."""

    #: Short name, as `--prune-scope` and `Found.deployer` spell it.
    name: ClassVar[str]
    #: The tool as an operator knows it.
    title: ClassVar[str]
    #: Keys of the labels and annotations it reads as keep marks.
    keep_keys: ClassVar[tuple[str, ...]] = ()
    #: Keys of the annotations it reads as force marks.
    force_keys: ClassVar[tuple[str, ...]] = ()
    #: Keys of the labels and annotations with which it marks what it applied.
    owner_keys: ClassVar[tuple[str, ...]] = ()
    #: Its parent kinds.
    parents: ClassVar[tuple[Parent, ...]] = ()
    #: Its finalizers, each with who removes it and when (a key ending in `/` is a prefix).
    finalizers: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    def keeps(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """The mark with which the tool leaves this object in place at `event`, or None."""

    def keeps_live(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """The mark on the LIVE object with which the tool leaves it in place at `event`: its
        keep mark, and for some tools a mark it never applies from git itself (Flux's
        `reconcile: disabled` and `ssa: Ignore`, set by hand), so it counts only read live."""
        return self.keeps(annotations, labels, event)

    def forces(self, annotations: Meta) -> Found | None:
        """The mark with which the tool deletes and recreates the object on a change it cannot
        apply (an immutable field), or None. Most tools have none."""
        return None

    @abstractmethod
    def owner(self, annotations: Meta, labels: Meta) -> Owner | None:
        """The parent whose marks the object carries (what it applied), or None."""

    def owns(self, annotations: Meta, labels: Meta, namespace: str, name: str) -> bool:
        """True when the object carries this tool's marks of the parent `namespace`/`name`."""
        found = self.owner(annotations, labels)
        return found is not None and (found.namespace, found.name) == (namespace, name)
