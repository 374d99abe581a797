"""The fast way to read a manifest: Python objects built straight from libyaml's events.

PyYAML's loader makes three passes in Python over every node (compose, resolve, construct) and
`gate.sources.manifests` adds a fourth for its limits; on 10,000 objects that was 85% of a run.
This reads libyaml's event stream once and builds dicts, lists and scalars as it goes, reading
plain scalars exactly as `gate.sources.yamlread.KubeLoader` does (YAML 1.1 without timestamps or
`=`), memoised, since keys and small values repeat on every object.

It covers what manifests are made of and nothing else: anchors, and aliases of scalars (`name:
&app web` then `*app`, as Flux repositories write them), within the caller's limit on aliases; no
aliases of collections, explicit tags, merge keys or complex keys, no duplicate keys (by value,
or by text as the careful reader compares them: `1` and `'1'`) or anchors, nesting within the
limit. On anything else, a syntax error included, it returns None and the
caller reads the text the careful way, which gives the exact error or the exact reading; so a
document it accepts reads exactly as PyYAML reads it.

When the optional native reader (`prune_gate_yaml`, built from `native/`) is installed, the same
pass runs in native code, several times faster; plain scalars that may not be strings are still
read by `_plain` here, so both read every value alike. `PRUNE_GATE_NATIVE_YAML=off` turns it off.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType
from typing import Any

import yaml
from yaml.nodes import ScalarNode

from gate.sources.yamlread import KubeLoader

_CParser: Any
try:
    from yaml._yaml import CParser as _CParser
except ImportError:  # PyYAML built without libyaml: every text takes the careful way
    _CParser = None


#: Nodes that aliases may add, summed over a stream: generous for `&defaults` reuse, and far
#: below what makes a walk over the documents slow. The careful reader refuses more
#: (`gate.sources.manifests`); the fast readers leave more to it.
MAX_ALIAS_NODES = 100_000

_STR = "tag:yaml.org,2002:str"
_SCALARS = {
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
}
_NO_KEY: Any = object()
_UNSUPPORTED: Any = object()


class _UnsupportedError(Exception):
    """The text uses something this reader leaves to the careful one."""


_LOADER = KubeLoader("")
_LOADER_LOCK = threading.Lock()
_PLAIN: dict[str, Any] = {}


def _plain(value: str) -> Any:
    """A plain scalar as KubeLoader reads it (the resolver, then the constructor of its tag).

    The one loader keeps per-document state: base and candidate may be read in two threads."""
    with _LOADER_LOCK:
        tag = _LOADER.resolve(ScalarNode, value, (True, False))
        if tag == _STR:
            result: Any = value
        elif tag in _SCALARS:
            result = _LOADER.construct_object(ScalarNode(tag, value))
        else:  # a merge key `<<`, or a tag this reader does not build
            result = _UNSUPPORTED
    if len(_PLAIN) < 100_000:
        _PLAIN[value] = result
    return result


def _resolved_first() -> tuple[str | None, bool]:
    """The characters a plain scalar must start with for a resolver to claim it, and whether
    the empty one is claimed; None when a resolver claims any (the native reader is not used)."""
    keys = KubeLoader.yaml_implicit_resolvers.keys()
    if None in keys:
        return None, True
    return "".join(k for k in keys if k), "" in keys


def _native_reader(first: str | None) -> ModuleType | None:
    """The native reader, unless it is turned off, not installed, or the resolvers would claim
    plain scalars it takes for strings (none known does)."""
    if first is None:
        return None
    if os.environ.get("PRUNE_GATE_NATIVE_YAML", "").lower() in ("off", "0", "false", "no"):
        return None
    try:
        return importlib.import_module("prune_gate_yaml")
    except ImportError:
        return None


#: One text at a time in the native reader. It keeps its memo of scalars under a mutex of its
#: own while it calls `_plain` back, and Python may hand the GIL to another thread during that
#: call: a second thread entering the reader then waited for the mutex holding the GIL, which
#: the first needed to return: both sides of `gate check` hung for good. This lock is waited
#: for with the GIL released. (The reader holds the GIL as it reads, so nothing ran in parallel.)
_NATIVE_LOCK = threading.Lock()

_NATIVE_FIRST, _NATIVE_EMPTY = _resolved_first()
_NATIVE = _native_reader(_NATIVE_FIRST)
#: Which reader reads texts here, down to the build of the native one: part of the parse
#: cache's key, so another reader (or a rebuilt one) is a new cache.
READER_ID = "python" if _NATIVE is None else f"native {_NATIVE.__version__} {_NATIVE.BUILD}"


def load_documents(
    text: str, max_depth: int, max_aliases: int = MAX_ALIAS_NODES
) -> list[tuple[int, Any]] | None:
    """Every document of `text` with the line of its root node, or None to read it carefully.
    Past `max_aliases` aliases (of scalars, so one node each, as the careful reader counts
    them), the text is read carefully. The two readers below take no alias unless told."""
    if _CParser is None:
        return None
    if _NATIVE is not None:
        return native_documents(text, max_depth, max_aliases=max_aliases)
    return python_documents(text, max_depth, max_aliases)


def native_documents(
    text: str, max_depth: int, *, scanner: bool = True, max_aliases: int = 0
) -> list[tuple[int, Any]] | None:
    """`load_documents` by the native reader (which must be installed): by its own scanner for
    the plain YAML most manifests are, by libyaml's events for the rest (or, without `scanner`,
    for all)."""
    assert _NATIVE is not None
    with _NATIVE_LOCK:
        docs: list[tuple[int, Any]] | None = _NATIVE.load_documents(
            text,
            max_depth,
            _plain,
            _UNSUPPORTED,
            _NATIVE_FIRST,
            _NATIVE_EMPTY,
            scanner,
            max_aliases,
        )
    return docs


def python_documents(
    text: str, max_depth: int, max_aliases: int = 0
) -> list[tuple[int, Any]] | None:
    """`load_documents` in Python, over PyYAML's libyaml events."""
    parser = _CParser(text)
    try:
        return _build(parser, max_depth, max_aliases)
    except (_UnsupportedError, yaml.YAMLError):
        return None
    finally:
        parser.dispose()


def _build(parser: Any, max_depth: int, max_aliases: int) -> list[tuple[int, Any]]:
    """The documents of the events; anchors kept per document as PyYAML keeps them (a scalar's
    value, or _NO_KEY for a collection's, which no alias here may name)."""
    scalar, mapping_start, sequence_start = (
        yaml.ScalarEvent,
        yaml.MappingStartEvent,
        yaml.SequenceStartEvent,
    )
    collection_end = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    plain_cache = _PLAIN
    docs: list[tuple[int, Any]] = []
    stack: list[Any] = []  # the open collections, innermost last
    keys: list[Any] = []  # for each open collection: its pending key, or _NO_KEY
    # for each open collection: the texts of its keys that are not strings, once it has one
    odd_keys: list[set[str] | None] = []
    anchors: dict[str, Any] = {}
    aliases = 0
    get_event = parser.get_event
    while True:
        event = get_event()
        if event is None:
            return docs
        cls = event.__class__
        if cls is scalar:
            if event.tag is not None:
                raise _UnsupportedError
            if event.implicit[0]:
                value = plain_cache.get(event.value, _NO_KEY)
                if value is _NO_KEY:
                    value = _plain(event.value)
                if value is _UNSUPPORTED:
                    raise _UnsupportedError
            else:
                value = event.value
            opened = False
        elif cls is mapping_start or cls is sequence_start:
            if not event.implicit:
                raise _UnsupportedError
            if len(stack) >= max_depth:
                raise _UnsupportedError
            value = {} if cls is mapping_start else []
            opened = True
        elif cls in collection_end:
            stack.pop()
            keys.pop()
            odd_keys.pop()
            continue
        elif cls is yaml.AliasEvent:
            aliases += 1
            # an alias at a root names no anchor (the document's own come after it); nor is
            # one read as a key
            as_key = bool(stack) and stack[-1].__class__ is dict and keys[-1] is _NO_KEY
            if not stack or as_key or aliases > max_aliases:
                raise _UnsupportedError
            value = anchors.get(event.anchor, _NO_KEY)
            if value is _NO_KEY:  # undefined, or a collection's
                raise _UnsupportedError
            opened = False
        else:  # stream and document start and end
            continue
        if cls is not yaml.AliasEvent:
            if not stack:
                anchors.clear()  # a document's root: anchors are per document
            if event.anchor is not None:
                if event.anchor in anchors:  # PyYAML refuses a duplicate anchor
                    raise _UnsupportedError
                anchors[event.anchor] = _NO_KEY if opened else value
        if not stack:
            docs.append((event.start_mark.line + 1, value))
        else:
            parent = stack[-1]
            if parent.__class__ is list:
                parent.append(value)
            else:
                key = keys[-1]
                if key is _NO_KEY:
                    if opened or value in parent:  # a complex key, or a duplicate
                        raise _UnsupportedError
                    odd = odd_keys[-1]
                    if odd is not None or value.__class__ is not str:
                        odd_keys[-1] = _same_text(parent, odd, value, event.value)
                    keys[-1] = value
                else:
                    parent[key] = value
                    keys[-1] = _NO_KEY
        if opened:
            stack.append(value)
            keys.append(_NO_KEY)
            odd_keys.append(None)


def _same_text(
    parent: dict[Any, Any], odd: set[str] | None, key: Any, text: str
) -> set[str] | None:
    """The texts of `parent`'s keys that are not strings, with `key`'s (written `text`) when it
    is not one; `_UnsupportedError` when a key already there has its text, as a value Python
    takes for another: `1` and `'1'`, `true` and `"true"`, `~` and `'~'` (or two `.nan`). The
    careful reader compares keys by their text and refuses that as a duplicate, and so does
    kustomize ("mapping key "1" already defined"); a dict would keep both."""
    if odd is not None and text in odd:
        raise _UnsupportedError
    if key.__class__ is str:
        return odd
    if text in parent:
        raise _UnsupportedError
    if odd is None:
        odd = set()
    odd.add(text)
    return odd
