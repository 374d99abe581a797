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

from collections.abc import Callable
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
# merged into one tree of the fields they read, and the tree into closures, one per object or
# list it walks into: the exact pass walks each field's path from the top and words what it
# finds, four times the cost on a 10,000-object check. The quick pass checks exact types, so it
# can only be stricter than the exact pass: whatever it cannot vouch for, the exact pass finds.

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


def _plain(node: _Node) -> bool:
    """A value only its type is checked on."""
    return node.want is not None and not node.children and not node.values and node.item is None


def _compile(node: _Node) -> Check:
    """Whether a value (not null) has `node`'s shape, as a closure made for the kind of node it
    is: a call for each object or list the check walks into, none for a field only typed."""
    if node.item is not None:
        assert not node.children and not node.values  # a list: _want refuses an object's fields
        return _list_check(node.want, node.item)
    if node.values:
        assert not node.children  # annotations and labels: strings, no fields read
        return _strings_check()
    return _object_check(node.want, node.children)


def _object_check(want: type | None, children: dict[str, _Node]) -> Check:
    """An object and the fields read from it (`want` None: an item that, when an object, has
    fields read from it, and is let be when it is anything else)."""
    # key -> (type, the check of its own fields or None): a field only typed takes no call
    table = {k: (c.want, None if _plain(c) else _compile(c)) for k, c in children.items()}
    fields = tuple((k, t, check) for k, (t, check) in table.items())
    size = len(fields)

    def fits(value: Any) -> bool:
        if type(value) is not dict:
            return want is None  # an item only an inner field constrains: not an object, fine
        if len(value) < size:  # ObjectMeta: a few of the eight fields checked
            for key, v in value.items():
                f = table.get(key)
                if f is None or v is None:
                    continue
                if type(v) is not f[0] or (f[1] is not None and not f[1](v)):
                    return False
            return True
        get = value.get
        for key, t, check in fields:
            v = get(key)
            if v is None:
                continue
            if type(v) is not t or (check is not None and not check(v)):
                return False
        return True

    return fits


def _strings_check() -> Check:
    """Annotations and labels: an object whose values are all strings."""

    def fits(value: Any) -> bool:
        if type(value) is not dict:
            return False
        return all(type(v) is str for v in value.values())

    return fits


def _list_check(want: type | None, item: _Node) -> Check:
    if _plain(item):  # finalizers, ownerReferences: a type per item, no call
        item_type = item.want

        def fits_plain(value: Any) -> bool:
            if type(value) is not list:
                return want is None
            return all(type(v) is item_type for v in value)

        return fits_plain
    item_check = _compile(item)

    def fits(value: Any) -> bool:
        if type(value) is not list:
            return want is None  # items are checked when it is a list
        return all(item_check(v) for v in value)

    return fits


_META_CHECK = _compile(_tree((_META,)))
_CHECKS: dict[tuple[str, str], Check] = {k: _compile(_tree((_META, *v))) for k, v in SHAPES.items()}
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
