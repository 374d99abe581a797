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

import os
import posixpath
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gate.model.errors import InputError
from gate.model.objects import RawObject, Source
from gate.model.shapes import shape_problem
from gate.sources import parsecache
from gate.sources.yamlevents import MAX_ALIAS_NODES as MAX_ALIAS_NODES
from gate.sources.yamlevents import load_documents
from gate.sources.yamlread import KubeLoader as _Loader

#: File name endings read from directories and git trees.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: The largest manifest file read (10 MiB): the biggest real-world CRD bundles are a few MiB.
MAX_MANIFEST_BYTES = 10 * 1024 * 1024
#: Nesting deeper than this is refused (Kubernetes objects, CRD schemas included, stay far below).
MAX_DEPTH = 200
#: kustomize's own configuration files: inputs to a build, not objects.
KUSTOMIZATION_NAMES = frozenset({"kustomization.yaml", "kustomization.yml", "Kustomization"})


def helm_chart_dirs(paths: Iterable[str]) -> frozenset[str]:
    """Directories (posix, relative) that hold a Helm chart: a `Chart.yaml` is in them.

    Their files are templates and values, not manifests: directory and tree reads skip them;
    render the chart first (`helm template`) and compare the output instead.
    """
    return frozenset(
        posixpath.dirname(p) for p in paths if p == "Chart.yaml" or p.endswith("/Chart.yaml")
    )


def in_any_dir(path: str, dirs: frozenset[str]) -> bool:
    """True when posix `path` is inside one of `dirs` ("" is the root)."""
    if not dirs:
        return False
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
    return parse_uncached(
        text, path, only_objects=only_objects, cache_key=entry, max_chars=max_chars
    )


def parse_uncached(
    text: str, path: str, *, only_objects: bool, cache_key: str, max_chars: int = MAX_MANIFEST_BYTES
) -> list[RawObject]:
    """`parse_stream` for a text the caller already looked up in the cache (in a batch) and
    did not find: parsed, and kept under `cache_key` when it parses cleanly."""
    if len(text) > max_chars:
        raise InputError(_too_big(len(text), max_chars), path)
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
    parsecache.put(cache_key, [(o.body, o.source.line) for o in out])
    return out


def relabel(kept: list[tuple[dict[str, Any], int]], path: str, root: str = "") -> list[RawObject]:
    """Objects kept by `gate.sources.parsecache`, as declared in `path` (read from `root`)."""
    return [RawObject(body, Source(path, line), root) for body, line in kept]


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
        files = _files_under(p)
        charts = helm_chart_dirs(files)
        root = p.as_posix()  # labels are what `(p / rel).as_posix()` gives, without a Path each
        prefix = "" if root == "." else root if root.endswith("/") else root + "/"
        named = [
            (prefix + rel if os.sep == "/" else str(p / rel), prefix + rel)
            for rel in files
            if rel.endswith(MANIFEST_SUFFIXES)
            and rel.rpartition("/")[2] not in KUSTOMIZATION_NAMES
            and not in_any_dir(rel, charts)
        ]
        return _read_files(named, only_objects=True)
    if p.is_file():
        return _read_files([(str(p), str(path))], only_objects=False)
    raise InputError("no such file or directory", str(path))


def _files_under(root: Path) -> list[str]:
    """The files under `root` as relative posix paths, hidden ones (a part starting with a dot)
    left out, in the order of their path parts; symlinked directories are not entered, and
    unreadable ones are left out (as `os.walk` does).

    `os.scandir`'s entries know their type without a stat per file (but for symlinks)."""
    found: list[str] = []
    folders = [(os.fspath(root), "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    if not entry.is_symlink():
                        folders.append((entry.path, prefix + name + "/"))
                    continue
                if entry.is_file():
                    found.append(prefix + name)
            except OSError:
                continue
    return sorted(found, key=lambda rel: rel.split("/"))


#: Files read, looked up in the parse cache and parsed at a time: a few queries per directory
#: instead of one per file, and a bound on the texts held at once.
_BATCH = 256


def _read_files(files: Sequence[tuple[str, str]], *, only_objects: bool) -> list[RawObject]:
    """The objects of each (name to open, label) file, in order; an error of a file (reading or
    parsing) is raised in its turn, before anything after it is parsed."""
    out: list[RawObject] = []
    for at in range(0, len(files), _BATCH):
        labels = [label for _, label in files[at : at + _BATCH]]
        read = [_read_text(name, label, only_objects) for name, label in files[at : at + _BATCH]]
        have = parsecache.recall(r[0] for r in read if not isinstance(r, InputError))
        unknown: dict[str, tuple[str, str]] = {}  # one parse per content, whatever its files
        for label, r in zip(labels, read, strict=True):
            if not isinstance(r, InputError) and r[0] not in have and r[0] not in unknown:
                unknown[r[0]] = (r[1], label)
        # Each text parsed when its first file is reached, so nothing after an error is parsed.
        # (In threads it measured slower on 2 cores, the bench input cold: the native reader
        # 0.37-0.41 s CPU -> 0.55-0.75 s with two; it builds Python objects under the GIL, and
        # the shape checks are Python.)
        parsed = (
            parse_uncached(text, label, only_objects=only_objects, cache_key=k)
            for k, (text, label) in unknown.items()
        )
        for label, r in zip(labels, read, strict=True):
            if isinstance(r, InputError):
                raise r
            known = have.get(r[0])
            if known is None:  # the first file with this content: the next parse, in order
                objects = next(parsed)
                out.extend(objects)
                have[r[0]] = [(o.body, o.source.line) for o in objects]
                parsecache.remember(r[0], have[r[0]])
            else:
                out.extend(relabel(known, label))
    return out


def _read_text(name: str, label: str, only_objects: bool) -> tuple[str, str] | InputError:
    """(cache key, text) of the file `name`, or the error to raise in its turn."""
    try:  # os, not a Path per file: on a warm cache pathlib cost more than the reads
        size = os.stat(name).st_size  # noqa: PTH116
        if size > MAX_MANIFEST_BYTES:
            return InputError(_too_big(size, MAX_MANIFEST_BYTES), label)
        fd = os.open(name, os.O_RDONLY)
        try:
            data = os.read(fd, size + 1)
            more = os.read(fd, 1 << 16) if data else b""
            while more:  # it grew since the stat: read it all
                data += more
                more = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return InputError(f"cannot read: {exc}", label)
    return parsecache.bytes_key(data, only_objects), text
