"""Load Kubernetes objects from YAML/JSON streams, keeping the file and line of every object.

Sources are files, directories (read recursively), stdin, or (through `gate.sources.gitsource`)
blobs of a git tree; all end up as `(text, path)` pairs parsed by `parse_stream`. libyaml is used
when PyYAML has it. `kind: List` documents are flattened, so `kubectl get -o yaml` output is valid
input.

Manifests come from the candidate, so parsing is bounded before PyYAML builds anything: a file
over `MAX_MANIFEST_BYTES` is refused unread, and one pass over the event stream (libyaml's parser
keeps its own stack, so it cannot crash on depth) refuses nesting deeper than `MAX_DEPTH` (libyaml's
composer recurses and segfaults on a 200 kB `[[[[...`), aliases that would expand past
`MAX_ALIAS_NODES` nodes (a 611-byte alias bomb is 10^10 nodes to every later walk), and duplicate
mapping keys (PyYAML keeps the last silently; which one the deployer's tool keeps is its business).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gate.model.errors import InputError
from gate.model.objects import RawObject, Source
from gate.model.shapes import shape_problem
from gate.sources import parsecache
from gate.sources.yamlevents import load_documents
from gate.sources.yamlread import KubeLoader as _Loader

#: File name endings read from directories and git trees.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: The largest manifest file read (10 MiB): the biggest real-world CRD bundles are a few MiB.
MAX_MANIFEST_BYTES = 10 * 1024 * 1024
#: Nesting deeper than this is refused (Kubernetes objects, CRD schemas included, stay far below).
MAX_DEPTH = 200
#: Nodes that aliases may add, summed over a stream: generous for `&defaults` reuse, and far
#: below what makes a walk over the documents slow.
MAX_ALIAS_NODES = 100_000
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


def parse_stream(
    text: str,
    path: str,
    *,
    only_objects: bool = False,
    max_chars: int = MAX_MANIFEST_BYTES,
    cache_key: str | None = None,
) -> list[RawObject]:
    """Parse a multi-document YAML (or JSON) stream into objects, each with its line.

    Empty documents are skipped. A syntax error, or a document that is not a Kubernetes object,
    raises `InputError` naming `path:line`. With `only_objects` (directories and git trees, which
    hold other YAML too: Helm values, CI config), documents with neither apiVersion nor kind are
    skipped; one with only one of them is still an error, since it is a broken manifest.
    What parsed cleanly is kept in `gate.sources.parsecache`, under `cache_key` when the caller
    has one that names the content (a git blob id), else under a hash of the text.
    """
    if len(text) > max_chars:
        raise InputError(_too_big(len(text), max_chars), path)
    entry = cache_key or parsecache.key(text, only_objects)
    kept = parsecache.get(entry)
    if kept is not None:
        return relabel(kept, path)
    docs = load_documents(text, MAX_DEPTH)
    if docs is None:  # anchors, tags, an error...: the careful reading, with its exact errors
        docs = _careful_documents(text, path)
    out: list[RawObject] = []
    for line, doc in docs:
        if doc is None:
            continue
        if only_objects and not _looks_like_object(doc):
            continue
        _collect(doc, Source(path, line), out)
    parsecache.put(entry, [(o.body, o.source.line) for o in out])
    return out


def relabel(kept: list[tuple[dict[str, Any], int]], path: str) -> list[RawObject]:
    """Objects kept by `gate.sources.parsecache`, as declared in `path`."""
    return [RawObject(body, Source(path, line)) for body, line in kept]


def _careful_documents(text: str, path: str) -> list[tuple[int, Any]]:
    """The documents of `text` read by PyYAML's loader, after `_check_limits`."""
    try:
        _check_limits(text, path)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", path) from None
    docs: list[tuple[int, Any]] = []
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                docs.append((node.start_mark.line + 1, loader.construct_document(node)))
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", path) from None
    finally:
        loader.dispose()
    return docs


def _yaml_error(exc: yaml.MarkedYAMLError, path: str) -> InputError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}" if mark is not None else path
    problem = exc.problem or exc.context or "invalid YAML"
    return InputError(f"invalid YAML: {problem}", where)


def _too_big(size: int, limit: int) -> str:
    return (
        f"{size / 1024 / 1024:.1f} MiB is over the {limit // 1024 // 1024} MiB limit for one "
        "manifest; split it into several files"
    )


@dataclass(slots=True)
class _Frame:
    """One open collection during `_check_limits`: its anchor, size so far, and keys seen."""

    anchor: str | None
    mapping: bool
    size: int = 0
    keys: dict[str, int] = field(default_factory=dict)
    at_key: bool = True


def _check_limits(text: str, path: str) -> None:
    """Refuse, at `path:line`, what would make parsing or any later walk blow up (see module doc).

    Runs over parse events only, with an explicit stack: linear in the text whatever its shape.
    """
    sizes: dict[str, int] = {}  # anchor -> expanded node count
    stack: list[_Frame] = []
    added = 0  # nodes that aliases add to the stream
    for event in yaml.parse(text, Loader=_Loader):
        line = event.start_mark.line + 1 if event.start_mark is not None else 1
        if isinstance(event, yaml.DocumentStartEvent):
            sizes.clear()  # anchors are per document
            continue
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            _key(stack, None, line, path)
            if len(stack) >= MAX_DEPTH:
                raise InputError(f"nested deeper than {MAX_DEPTH} levels", f"{path}:{line}")
            stack.append(_Frame(event.anchor, isinstance(event, yaml.MappingStartEvent)))
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            frame = stack.pop()
            _add(stack, sizes, frame.anchor, frame.size + 1)
            continue
        if isinstance(event, yaml.ScalarEvent):
            plain = event.implicit[0] and event.tag is None
            _key(stack, event.value if not (plain and event.value == "<<") else None, line, path)
            _add(stack, sizes, event.anchor, 1)
        elif isinstance(event, yaml.AliasEvent):
            _key(stack, None, line, path)
            size = sizes.get(event.anchor or "", 1)
            added += size
            if added > MAX_ALIAS_NODES:
                raise InputError(
                    f"aliases expand to more than {MAX_ALIAS_NODES} nodes (`*{event.anchor}` "
                    f"here repeats {size}); a YAML alias bomb? Write the objects out instead",
                    f"{path}:{line}",
                )
            _add(stack, sizes, None, size)


def _add(stack: list[_Frame], sizes: dict[str, int], anchor: str | None, size: int) -> None:
    """Count a finished node into its parent and, when it is anchored, remember its size."""
    if anchor is not None:
        sizes[anchor] = size
    if stack:
        stack[-1].size += size


def _key(stack: list[_Frame], key: str | None, line: int, path: str) -> None:
    """Track key/value position in the innermost mapping; a repeated scalar key is an error."""
    if not stack or not stack[-1].mapping:
        return
    frame = stack[-1]
    if frame.at_key and key is not None:
        first = frame.keys.get(key)
        if first is not None:
            raise InputError(
                f"duplicate key {key!r}: first at {path}:{first}, again at line {line} (YAML "
                "tools disagree on which one wins; keep one)",
                f"{path}:{line}",
            )
        frame.keys[key] = line
    frame.at_key = not frame.at_key


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
        text = sys.stdin.read(MAX_MANIFEST_BYTES + 1)
        if len(text) > MAX_MANIFEST_BYTES:
            raise InputError(_too_big(len(text), MAX_MANIFEST_BYTES), stdin_label)
        return parse_stream(text, stdin_label)
    p = Path(path)
    if p.is_dir():
        out: list[RawObject] = []
        files = _files_under(p)
        charts = helm_chart_dirs(files)
        for rel in files:
            name = posixpath.basename(rel)
            if (
                posixpath.splitext(name)[1] in MANIFEST_SUFFIXES
                and name not in KUSTOMIZATION_NAMES
                and not in_any_dir(rel, charts)
            ):
                label = (Path(path) / rel).as_posix()
                out.extend(_read_file(p / rel, label, only_objects=True))
        return out
    if p.is_file():
        return _read_file(p, str(path))
    raise InputError("no such file or directory", str(path))


def _files_under(root: Path) -> list[str]:
    """The files under `root` as relative posix paths, hidden ones (a part starting with a dot)
    left out, in the order of their path parts; symlinked directories are not entered."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(folder, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        # os.path, not a Path per file: on a warm cache that costs more than the reads
        found.extend(
            prefix + n
            for n in names
            if not n.startswith(".") and os.path.isfile(os.path.join(folder, n))  # noqa: PTH113, PTH118
        )
    return sorted(found, key=lambda rel: rel.split("/"))


def _read_file(f: Path, label: str, *, only_objects: bool = False) -> list[RawObject]:
    try:
        size = f.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise InputError(_too_big(size, MAX_MANIFEST_BYTES), label)
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
