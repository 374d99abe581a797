"""The shape of the fields the rules read, checked once at the edge, on the kinds they read them.

A hand-written manifest (or a forged AdmissionReview) can hold an annotation map that is a list,
or a claim's spec that is a string. The API server would reject it; prune-gate must not crash on
it, nor read past it (a volume list that is not a list would hide a consumer). Each edge calls
`shape_problem` and turns a problem into its own error (`file:line` for manifests, a 400 for the
webhook), so the rules can trust the shapes they read.

Only what a rule, the plan or a live projection reads is checked: `metadata` on every kind (the
API server gives every kind the same ObjectMeta, and the rules read its annotations, labels and
owners on any kind), and a few spec fields on the built-in kinds that hold them. Everything else is
opaque: custom resources of kinds prune-gate has never heard of are normal input, and their spec
is theirs (kro's ResourceGraphDefinition has a `spec.resources` list, where a claim has a map).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gate.model.refs import group_of
from gate.model.workloads import POD_SPEC_PATHS

_NAMES: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
_PLURALS: dict[type, str] = {dict: "objects", list: "lists", str: "strings"}

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Shape:
    """What is checked on one kind: fields and, for lists, their items."""

    #: (path, type): when the field is present (and not null), it must have this type. Every
    #: shorter path it runs through must be an object, and is checked first.
    fields: tuple[tuple[Path, type], ...] = ()
    #: (list path, path inside an item, type): each item of the list at `list path`, when the
    #: list is present, must have this type at the inner path (`()` is the item itself; an
    #: inner field is checked when present and not null).
    items: tuple[tuple[Path, Path, type], ...] = ()


#: Every kind: ObjectMeta, which the rules read on any object (keep and retire annotations,
#: protected labels, owners, finalizers and deletion state in the webhook).
_META = _Shape(
    fields=(
        (("metadata",), dict),
        (("metadata", "name"), str),
        (("metadata", "namespace"), str),
        (("metadata", "uid"), str),
        (("metadata", "deletionTimestamp"), str),
        (("metadata", "annotations"), dict),
        (("metadata", "labels"), dict),
        (("metadata", "finalizers"), list),
        (("metadata", "ownerReferences"), list),
    ),
    items=(
        (("metadata", "finalizers"), (), str),
        (("metadata", "ownerReferences"), (), dict),
    ),
)


def _pod_spec(path: Path) -> _Shape:
    """A workload's pod spec: the volumes whose claims are its consumers."""
    volumes = (*path, "volumes")
    return _Shape(
        fields=((path, dict), (volumes, list)),
        items=(
            (volumes, (), dict),
            (volumes, ("persistentVolumeClaim",), dict),
            (volumes, ("persistentVolumeClaim", "claimName"), str),
        ),
    )


_CLAIM = _Shape(
    fields=(
        (("spec",), dict),
        (("spec", "resources"), dict),
        (("spec", "resources", "requests"), dict),
        (("spec", "resources", "limits"), dict),
        (("spec", "volumeName"), str),
        (("spec", "storageClassName"), str),
    )
)
_VOLUME = _Shape(
    fields=(
        (("spec",), dict),
        (("spec", "claimRef"), dict),
        (("spec", "claimRef", "name"), str),
        (("spec", "claimRef", "namespace"), str),
        (("spec", "persistentVolumeReclaimPolicy"), str),
    )
)
_STATEFULSET_CLAIMS = _Shape(
    fields=(
        (("spec",), dict),
        (("spec", "persistentVolumeClaimRetentionPolicy"), dict),
        (("spec", "volumeClaimTemplates"), list),
    ),
    items=(
        (("spec", "volumeClaimTemplates"), (), dict),
        (("spec", "volumeClaimTemplates"), ("metadata",), dict),
        (("spec", "volumeClaimTemplates"), ("metadata", "name"), str),
    ),
)
_CRD = _Shape(
    fields=(
        (("spec",), dict),
        (("spec", "group"), str),
        (("spec", "scope"), str),
        (("spec", "names"), dict),
        (("spec", "names", "kind"), str),
        (("spec", "versions"), list),
    ),
    items=((("spec", "versions"), (), dict),),
)

#: What is read beyond metadata, by (group, kind). A kind not here is opaque past its metadata.
SHAPES: dict[tuple[str, str], tuple[_Shape, ...]] = {
    ("", "PersistentVolumeClaim"): (_CLAIM,),
    ("", "PersistentVolume"): (_VOLUME,),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (_CRD,),
}
for _kind, _path in POD_SPEC_PATHS.items():
    SHAPES[_kind] = (*SHAPES.get(_kind, ()), _pod_spec(_path))
SHAPES[("apps", "StatefulSet")] = (_STATEFULSET_CLAIMS, *SHAPES[("apps", "StatefulSet")])


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _field_problem(obj: dict[str, Any], path: Path, kind: type) -> str | None:
    value: Any = obj
    last = len(path) - 1
    for n, key in enumerate(path):  # every prefix must be an object, the field itself `kind`
        value = value.get(key)
        if value is None:
            return None
        want = kind if n == last else dict
        if not isinstance(value, want):
            return f"{'.'.join(path[: n + 1])} must be {_NAMES[want]}, not {type(value).__name__}"
    return None


def _item_problem(obj: dict[str, Any], path: Path, inner: Path, kind: type) -> str | None:
    items = _get(obj, path)
    if not isinstance(items, list):
        return None
    where = ".".join(path)
    for i, item in enumerate(items):
        if not inner:
            if not isinstance(item, kind):
                return f"{where} must be a list of {_PLURALS[kind]}"
            continue
        problem = _field_problem(item, inner, kind) if isinstance(item, dict) else None
        if problem is not None:
            return f"{where}[{i}].{problem}"
    return None


def _string_values(obj: dict[str, Any]) -> str | None:
    for path in (("metadata", "annotations"), ("metadata", "labels")):
        values = _get(obj, path) or {}
        bad = next((k for k, v in values.items() if not isinstance(v, str)), None)
        if bad is not None:
            value = values[bad]
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            return (
                f'{".".join(path)}.{bad} must be a string (quote it: "{shown}"), '
                f"not {type(value).__name__}"
            )
    return None


def shape_problem(obj: dict[str, Any], kind: tuple[str, str] | None = None) -> str | None:
    """What is wrong with the shape of `obj` (one sentence), or None when it can be trusted.

    `kind` is (group, kind) when the caller knows it better than the object says (the webhook's
    `request.kind`); by default it is read from the object's apiVersion and kind.

    Every object of every check passes here, and nearly all fit: a quick pass over a tree
    compiled from the shapes says so; only an object it cannot vouch for takes the exact pass,
    which finds the first problem in the order the shapes list them and words it.
    """
    fits = _check_for(obj) if kind is None else _CHECKS.get(kind, _META_CHECK)
    if fits(obj):
        return None
    return _problem(obj, kind)


def _problem(obj: dict[str, Any], kind: tuple[str, str] | None) -> str | None:
    """The exact pass: the first problem, in the order the shapes list their checks."""
    if kind is None:
        kind = _kind_of(obj)
    shapes = (_META, *SHAPES.get(kind, ()))
    for shape in shapes:
        for path, want in shape.fields:
            problem = _field_problem(obj, path, want)
            if problem is not None:
                return problem
        if shape is _META:
            problem = _string_values(obj)
            if problem is not None:
                return problem
        for path, inner, want in shape.items:
            problem = _item_problem(obj, path, inner, want)
            if problem is not None:
                return problem
    return None


def _kind_of(obj: dict[str, Any]) -> tuple[str, str]:
    return (group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or ""))


# --- the quick pass ---------------------------------------------------------------------------
#
# Every object of every check passes `shape_problem`, and nearly all fit. The shapes of a kind are
# merged into one tree of the fields they read, and the tree is turned into straight-line Python
# (as `dataclasses` writes `__init__`): a walk over the tree would cost a call per field, twice
# the time on a 10,000-object check. The quick pass checks exact types, so it can only be
# stricter than the exact pass: whatever it cannot vouch for, the exact pass finds and words.

Check = Callable[[Any], bool]


@dataclass(slots=True)
class _Node:
    """The shape one value must have, merged from every check of a kind that reads it."""

    #: Its type, or None when any will do (an item that only an inner field constrains).
    want: type | None = None
    #: When it is an object: the shapes of the fields read from it.
    children: dict[str, _Node] = field(default_factory=dict)
    #: When it is an object: whether every value must be a string (annotations and labels).
    values: bool = False
    #: When it is a list: the shape of each item (a null item fits only an unconstrained one).
    item: _Node | None = None


def _at(node: _Node, path: Path) -> _Node:
    """The node at `path` below `node`; every node between them must be an object."""
    for n, key in enumerate(path):
        if n:
            _want(node, dict)
        node = node.children.setdefault(key, _Node())
    return node


def _want(node: _Node, want: type) -> None:
    if node.want not in (None, want):  # two checks disagree: a mistake in SHAPES
        raise AssertionError(f"shape wants {node.want} and {want}")
    node.want = want


def _tree(shapes: tuple[_Shape, ...]) -> _Node:
    root = _Node(dict)
    for shape in shapes:
        for path, want in shape.fields:
            _want(_at(root, path), want)
        for path, inner, want in shape.items:
            holder = _at(root, path)
            holder.item = holder.item or _Node()
            _want(_at(holder.item, inner), want)
    for path in (("metadata", "annotations"), ("metadata", "labels")):
        _at(root, path).values = True
    return root


_TYPE_NAMES: dict[type, str] = {dict: "dict", list: "list", str: "str"}


def _emit(node: _Node, var: str, depth: int, lines: list[str], names: Iterator[int]) -> None:
    """Lines that return False unless the value in `var` (not null) has `node`'s shape."""
    pad = "    " * depth
    if node.want is not None:
        lines.append(f"{pad}if type({var}) is not {_TYPE_NAMES[node.want]}: return False")
    if node.children or node.values:
        inner = depth
        if node.want is not dict:
            lines.append(f"{pad}if type({var}) is dict:")
            inner += 1
        for key, child in node.children.items():
            value = f"v{next(names)}"
            lines.append(f"{'    ' * inner}{value} = {var}.get({key!r})")
            _block(f"if {value} is not None:", child, value, inner, lines, names)
        if node.values:
            value = f"v{next(names)}"
            lines.append(f"{'    ' * inner}for {value} in {var}.values():")
            lines.append(f"{'    ' * (inner + 1)}if type({value}) is not str: return False")
    if node.item is not None:
        inner = depth
        if node.want is not list:
            lines.append(f"{pad}if type({var}) is list:")
            inner += 1
        item = f"v{next(names)}"
        _block(f"for {item} in {var}:", node.item, item, inner, lines, names)


def _block(
    head: str, node: _Node, var: str, depth: int, lines: list[str], names: Iterator[int]
) -> None:
    lines.append(f"{'    ' * depth}{head}")
    before = len(lines)
    _emit(node, var, depth + 1, lines, names)
    if len(lines) == before:
        lines.append(f"{'    ' * (depth + 1)}pass")


def _source(shapes: tuple[_Shape, ...]) -> str:
    """The quick pass for these shapes, as the source of a function `fits(value) -> bool`."""
    lines = ["def fits(value):"]
    _emit(_tree(shapes), "value", 1, lines, itertools.count())
    lines.append("    return True")
    return "\n".join(lines)


def _compile(shapes: tuple[_Shape, ...]) -> Check:
    namespace: dict[str, Any] = {}
    exec(_source(shapes), namespace)  # our own source, written from the constants above
    fits: Check = namespace["fits"]
    return fits


_META_CHECK = _compile((_META,))
_CHECKS: dict[tuple[str, str], Check] = {k: _compile((_META, *v)) for k, v in SHAPES.items()}
#: (apiVersion, kind) as objects spell them -> their check, so the group is not parsed per object.
_BY_TYPE: dict[tuple[str, str], Check] = {}


def _check_for(obj: dict[str, Any]) -> Check:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if type(api_version) is not str or type(kind) is not str:
        return _CHECKS.get(_kind_of(obj), _META_CHECK)
    check = _BY_TYPE.get((api_version, kind))
    if check is None:
        check = _CHECKS.get(_kind_of(obj), _META_CHECK)
        if len(_BY_TYPE) < 1024:  # bounded: a webhook sees whatever it is sent
            _BY_TYPE[(api_version, kind)] = check
    return check
