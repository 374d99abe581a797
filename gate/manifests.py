"""Load Kubernetes objects from YAML/JSON streams, keeping the file and line of every object.

Sources are files, directories (read recursively), stdin, or (through `gate.gitsource`) blobs of a
git tree; all end up as `(text, path)` pairs parsed by `parse_stream`. libyaml is used when PyYAML
has it. `kind: List` documents are flattened, so `kubectl get -o yaml` output is valid input.
"""

from __future__ import annotations

import hashlib
import posixpath
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gate.errors import DuplicateObjectError, InputError
from gate.refs import ObjectRef, Scopes, group_of
from gate.shapes import shape_problem

try:
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader

#: File name endings read from directories and git trees.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: kustomize's own configuration files: inputs to a build, not objects.
KUSTOMIZATION_NAMES = frozenset({"kustomization.yaml", "kustomization.yml", "Kustomization"})


def helm_chart_dirs(paths: Iterable[str]) -> frozenset[str]:
    """Directories (posix, relative) that hold a Helm chart: a `Chart.yaml` is in them.

    Their files are templates and values, not manifests: directory and tree reads skip them;
    render the chart first (`helm template`) and compare the output instead.
    """
    return frozenset(posixpath.dirname(p) for p in paths if posixpath.basename(p) == "Chart.yaml")


def in_any_dir(path: str, dirs: frozenset[str]) -> bool:
    """True when posix `path` is inside one of `dirs` ("" is the root)."""
    parts = path.split("/")
    return any("/".join(parts[:i]) in dirs for i in range(len(parts)))


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


def parse_stream(text: str, path: str, *, only_objects: bool = False) -> list[RawObject]:
    """Parse a multi-document YAML (or JSON) stream into objects, each with its line.

    Empty documents are skipped. A syntax error, or a document that is not a Kubernetes object,
    raises `InputError` naming `path:line`. With `only_objects` (directories and git trees, which
    hold other YAML too: Helm values, CI config), documents with neither apiVersion nor kind are
    skipped; one with only one of them is still an error, since it is a broken manifest.
    """
    loader = _Loader(text)
    out: list[RawObject] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            line = node.start_mark.line + 1
            doc = loader.construct_document(node)
            if doc is None:
                continue
            if only_objects and not _looks_like_object(doc):
                continue
            _collect(doc, Source(path, line), out)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"invalid YAML: {problem}", where) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", path) from None
    finally:
        loader.dispose()
    return out


def _looks_like_object(doc: Any) -> bool:
    return isinstance(doc, dict) and ("apiVersion" in doc or "kind" in doc)


def _collect(doc: Any, source: Source, out: list[RawObject]) -> None:
    if not isinstance(doc, dict):
        raise InputError(
            f"expected a Kubernetes object (a mapping), found {type(doc).__name__}", str(source)
        )
    kind = doc.get("kind")
    meta = doc.get("metadata")
    named = isinstance(meta, dict) and bool(meta.get("name"))
    if (
        isinstance(kind, str)
        and kind.endswith("List")
        and isinstance(doc.get("items"), list)
        and not named
    ):
        for item in doc.get("items") or []:
            _collect(item, source, out)
        return
    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        raise InputError("object has no apiVersion", str(source))
    if not isinstance(kind, str) or not kind:
        raise InputError("object has no kind", str(source))
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        if isinstance(meta, dict) and meta.get("generateName"):
            return  # generateName objects are created fresh every time; they are never pruned
        raise InputError(f"{kind} has no metadata.name", str(source))
    problem = shape_problem(doc)
    if problem is not None:
        raise InputError(f"{kind} {meta['name']}: {problem}", str(source))
    out.append(RawObject(doc, source))


def read_path(path: str | Path, stdin_label: str = "<stdin>") -> list[RawObject]:
    """Read a file, a directory (recursively, sorted) or `-` (stdin)."""
    if str(path) == "-":
        return parse_stream(sys.stdin.read(), stdin_label)
    p = Path(path)
    if p.is_dir():
        out: list[RawObject] = []
        files = sorted(f for f in p.rglob("*") if f.is_file() and not _hidden(f, p))
        charts = helm_chart_dirs(f.relative_to(p).as_posix() for f in files)
        for f in files:
            if (
                f.suffix in MANIFEST_SUFFIXES
                and f.name not in KUSTOMIZATION_NAMES
                and not in_any_dir(f.relative_to(p).as_posix(), charts)
            ):
                label = (Path(path) / f.relative_to(p)).as_posix()
                out.extend(_read_file(f, label, only_objects=True))
        return out
    if p.is_file():
        return _read_file(p, str(path))
    raise InputError("no such file or directory", str(path))


def _hidden(f: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in f.relative_to(root).parts)


def _read_file(f: Path, label: str, *, only_objects: bool = False) -> list[RawObject]:
    try:
        data = f.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", label) from None
    key = (hashlib.blake2b(data, digest_size=16).digest(), only_objects)
    known = _BY_CONTENT.get(key)
    if known is not None:  # the same bytes on the other side: reuse the parse, relabelled
        return [RawObject(o.body, Source(label, o.source.line)) for o in known]
    parsed = parse_stream(text, label, only_objects=only_objects)
    if len(_BY_CONTENT) > 100_000:
        _BY_CONTENT.clear()
    _BY_CONTENT[key] = parsed
    return parsed


#: Parsed files by content. Base and candidate renders share most files; parse each once.
#: Parsed bodies are never mutated, so two sides may share them.
_BY_CONTENT: dict[tuple[bytes, bool], list[RawObject]] = {}


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
            body = raw.body
            if (
                body.get("kind") == "CustomResourceDefinition"
                and group_of(str(body.get("apiVersion"))) == "apiextensions.k8s.io"
            ):
                scopes.learn_crd(body)


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
