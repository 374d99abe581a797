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


class Inventory:
    """The objects of one side (base or candidate), by identity, with indexes by kind and by
    namespace kept as objects are added (the rules ask per object, so a scan would be quadratic).
    """

    def __init__(self, manifests: Iterable[Manifest] = ()) -> None:
        self.objects: dict[ObjectRef, Manifest] = {}
        self._by_kind: dict[tuple[str, str], list[Manifest]] = {}
        self._by_ns: dict[str, list[Manifest]] = {}
        for m in manifests:
            self.add(m)

    def add(self, m: Manifest) -> None:
        """Add an object; a second object with the same identity is an error naming both."""
        prior = self.objects.get(m.ref)
        if prior is not None:
            raise DuplicateObjectError(
                f"{m.ref.display()} is declared twice (first at {prior.source})", str(m.source)
            )
        self.objects[m.ref] = m
        self._by_kind.setdefault((m.ref.group, m.ref.kind), []).append(m)
        self._by_ns.setdefault(m.ref.namespace, []).append(m)

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


def learn_scopes(scopes: Scopes, *sides: Iterable[RawObject]) -> None:
    """Teach `scopes` the CRDs declared on any side, before identities are computed."""
    for side in sides:
        for raw in side:
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
    return Manifest(ObjectRef(group, kind, namespace, meta["name"]), api_version, body, raw.source)


def build_inventory(
    raws: Iterable[RawObject], scopes: Scopes, default_namespace: str = "default"
) -> Inventory:
    """Identify every parsed object and index it; duplicates are errors."""
    return Inventory(to_manifest(r, scopes, default_namespace) for r in raws)
