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

from dataclasses import dataclass
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
    """
    if kind is None:
        kind = (group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or ""))
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
