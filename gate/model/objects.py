"""The objects the engine reads: where each was declared, its identity and body, and one side's
inventory. Pure data, built by `gate.sources` from files and git trees and by the webhook from
AdmissionReviews.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gate.model.errors import DuplicateObjectError
from gate.model.refs import ObjectRef, Scopes, group_of


@dataclass(frozen=True, slots=True)
class Source:
    """Where an object was declared: a path (relative where possible) and a 1-based line."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """One declared object: its identity, its full body, and where it came from."""

    ref: ObjectRef
    api_version: str
    body: dict[str, Any] = field(compare=False, repr=False)
    source: Source | None = None
    #: The root it was read from (a --path, a rendered input): what a mass prune is counted by.
    root: str = field(default="", compare=False)

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.body.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def annotations(self) -> dict[str, str]:
        ann = self.metadata.get("annotations")
        return ann if isinstance(ann, dict) else {}

    @property
    def labels(self) -> dict[str, str]:
        lab = self.metadata.get("labels")
        return lab if isinstance(lab, dict) else {}

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.body.get("spec")
        return spec if isinstance(spec, dict) else {}


@dataclass(frozen=True, slots=True)
class RawObject:
    """A parsed document before its identity is known (scopes depend on CRDs of both sides)."""

    body: dict[str, Any]
    source: Source
    root: str = ""


class Inventory:
    """The objects of one side (base or candidate), by identity, with indexes by kind and by
    namespace kept as objects are added (the rules ask per object, so a scan would be quadratic).
    """

    def __init__(self, manifests: Iterable[Manifest] = ()) -> None:
        self.objects: dict[ObjectRef, Manifest] = {}
        #: Objects declared more than once with copies that agree: every place, in order.
        self.duplicates: dict[ObjectRef, list[Source | None]] = {}
        #: The roots of an object declared more than once, when they are not all one root.
        self._more_roots: dict[ObjectRef, set[str]] = {}
        self._by_kind: dict[tuple[str, str], list[Manifest]] = {}
        self._by_ns: dict[str, list[Manifest]] = {}
        self._roots: frozenset[str] | None = None
        for m in manifests:
            self.add(m)

    def add(self, m: Manifest) -> None:
        """Add an object. A second declaration of the same identity (two Flux roots that both
        render a Namespace) is the same object when the copies agree in every field a rule
        reads: it is recorded in `duplicates`; copies that differ there are an error naming
        both places and the field, since which one the cluster gets depends on apply order."""
        ref, known = m.ref, len(self.objects)
        prior = self.objects.setdefault(ref, m)  # one lookup: the objects are many
        if len(self.objects) == known:
            differs = _first_difference(prior, m)
            if differs is not None:
                raise DuplicateObjectError(
                    f"{ref.display()} is declared twice, and the copies differ in {differs} "
                    f"(first at {prior.source})",
                    str(m.source),
                )
            self.duplicates.setdefault(ref, [prior.source]).append(m.source)
            if m.root != prior.root:
                self._more_roots.setdefault(ref, {prior.root}).add(m.root)
            return
        self._roots = None
        self._by_kind.setdefault((ref.group, ref.kind), []).append(m)
        self._by_ns.setdefault(ref.namespace, []).append(m)

    def get(self, ref: ObjectRef) -> Manifest | None:
        return self.objects.get(ref)

    def __contains__(self, ref: object) -> bool:
        return ref in self.objects

    def __iter__(self) -> Iterator[Manifest]:
        return iter(self.objects.values())

    def __len__(self) -> int:
        return len(self.objects)

    def of_kind(self, group: str, kind: str) -> Iterator[Manifest]:
        """Objects of one kind, in declaration order."""
        return iter(self._by_kind.get((group, kind), ()))

    def in_namespace(self, namespace: str) -> list[Manifest]:
        """Objects in one namespace, in declaration order."""
        return self._by_ns.get(namespace, [])

    def roots_of(self, ref: ObjectRef) -> frozenset[str]:
        """Every root that declares `ref` (two Flux Kustomizations may both apply one object;
        `get` returns the first copy), or none when it is not declared."""
        more = self._more_roots.get(ref)
        if more is not None:
            return frozenset(more)
        m = self.objects.get(ref)
        return frozenset() if m is None else frozenset((m.root,))

    def roots(self) -> frozenset[str]:
        """The roots the objects were read from (found once, not per question: a rule asks per
        removed HelmRelease)."""
        if self._roots is None:
            self._roots = frozenset(m.root for m in self.objects.values())
        return self._roots


#: Kinds whose spec a rule or the plan reads (claims, volumes, workloads, CRDs, the parents whose
#: removal cascades): two copies of one of these must agree in spec too.
SPEC_READ_KINDS = frozenset(
    {
        ("", "PersistentVolumeClaim"),
        ("", "PersistentVolume"),
        ("apps", "StatefulSet"),
        ("apps", "Deployment"),
        ("apps", "DaemonSet"),
        ("apps", "ReplicaSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("", "Pod"),
        ("", "ReplicationController"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("kustomize.toolkit.fluxcd.io", "Kustomization"),
        ("helm.toolkit.fluxcd.io", "HelmRelease"),
        ("argoproj.io", "Application"),
    }
)
_META_READ = ("annotations", "labels", "ownerReferences", "finalizers")


def _first_difference(a: Manifest, b: Manifest) -> str | None:
    """The first field a rule reads in which two copies of one object differ, or None."""
    if a.api_version != b.api_version:
        return "apiVersion"
    meta_a, meta_b = a.metadata, b.metadata
    for key in _META_READ:
        if (meta_a.get(key) or None) != (meta_b.get(key) or None):
            return f"metadata.{key}"
    if (a.ref.group, a.ref.kind) in SPEC_READ_KINDS and a.body.get("spec") != b.body.get("spec"):
        return "spec"
    return None


def learn_scopes(scopes: Scopes, *sides: Iterable[RawObject]) -> None:
    """Teach `scopes` the CRDs declared on any side, before identities are computed."""
    for side in sides:
        for raw in side:
            if raw.body.get("kind") == "CustomResourceDefinition":  # no other object teaches one
                scopes.learn_crd(raw.body)


def to_manifest(raw: RawObject, scopes: Scopes, default_namespace: str = "default") -> Manifest:
    """Give a parsed object its identity: group from apiVersion, namespace defaulted if needed."""
    body = raw.body
    api_version: str = body["apiVersion"]
    kind: str = body["kind"]
    meta = body["metadata"]
    group = group_of(api_version)
    if scopes.is_cluster_scoped(group, kind):
        namespace = ""
    else:
        ns = meta.get("namespace")
        namespace = ns if isinstance(ns, str) and ns else default_namespace
    ref = ObjectRef(group, kind, namespace, meta["name"])
    return Manifest(ref, api_version, body, raw.source, raw.root)


def build_inventory(
    raws: Iterable[RawObject],
    scopes: Scopes,
    default_namespace: str = "default",
    like: Inventory | None = None,
) -> Inventory:
    """Identify every parsed object and index it; duplicates are errors.

    `like` is the other side, identified with the same scopes and default namespace: a body
    both sides share (the loader parses identical files once) has the same identity on both,
    so its ref is reused. A candidate shares nearly every body with base, and a lookup of one
    side's object in the other then matches by identity, not field by field.
    """
    shared = {id(m.body): m.ref for m in like} if like is not None else {}
    inventory = Inventory()
    add = inventory.add
    for raw in raws:
        ref = shared.get(id(raw.body))
        if ref is None:
            add(to_manifest(raw, scopes, default_namespace))
        else:
            add(Manifest(ref, raw.body["apiVersion"], raw.body, raw.source, raw.root))
    return inventory
