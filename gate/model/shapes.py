"""The shape of the fields the rules read, checked once at the edge.

A hand-written manifest (or a forged AdmissionReview) can hold an annotation map that is a list,
or a spec that is a string. The API server would reject it; prune-gate must not crash on it. Each
edge calls `shape_problem` and turns a problem into its own error (`file:line` for manifests, a
400 for the webhook), so the rules can trust the shapes they read.
"""

from __future__ import annotations

from typing import Any

_NAMES: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}

#: (path, type): when the field is present (and not null), it must have this type.
_FIELDS: tuple[tuple[tuple[str, ...], type], ...] = (
    (("metadata",), dict),
    (("metadata", "name"), str),
    (("metadata", "namespace"), str),
    (("metadata", "uid"), str),
    (("metadata", "deletionTimestamp"), str),
    (("metadata", "annotations"), dict),
    (("metadata", "labels"), dict),
    (("metadata", "finalizers"), list),
    (("metadata", "ownerReferences"), list),
    (("spec",), dict),
    (("status",), dict),
    (("spec", "resources"), dict),
    (("spec", "resources", "requests"), dict),
    (("spec", "resources", "limits"), dict),
    (("spec", "claimRef"), dict),
    (("spec", "claimRef", "name"), str),
    (("spec", "claimRef", "namespace"), str),
    (("spec", "persistentVolumeClaimRetentionPolicy"), dict),
    (("spec", "names"), dict),
    (("spec", "names", "kind"), str),
    (("spec", "group"), str),
    (("spec", "scope"), str),
    (("spec", "volumeName"), str),
    (("spec", "storageClassName"), str),
    (("spec", "persistentVolumeReclaimPolicy"), str),
    (("spec", "versions"), list),
    (("spec", "volumeClaimTemplates"), list),
    (("spec", "template"), dict),
    (("spec", "template", "spec"), dict),
    (("spec", "template", "spec", "volumes"), list),
    (("spec", "jobTemplate"), dict),
    (("spec", "jobTemplate", "spec"), dict),
    (("spec", "jobTemplate", "spec", "template"), dict),
    (("spec", "jobTemplate", "spec", "template", "spec"), dict),
    (("spec", "jobTemplate", "spec", "template", "spec", "volumes"), list),
    (("spec", "volumes"), list),
)
#: Lists whose items must be objects.
_LISTS_OF_OBJECTS = (
    ("metadata", "ownerReferences"),
    ("spec", "volumeClaimTemplates"),
    ("spec", "versions"),
    ("spec", "template", "spec", "volumes"),
    ("spec", "jobTemplate", "spec", "template", "spec", "volumes"),
    ("spec", "volumes"),
)


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def shape_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with the shape of `obj` (one sentence), or None when it can be trusted."""
    for path, kind in _FIELDS:
        value = _get(obj, path)
        if value is not None and not isinstance(value, kind):
            return f"{'.'.join(path)} must be {_NAMES[kind]}, not {type(value).__name__}"
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
    finalizers = _get(obj, ("metadata", "finalizers")) or []
    if not all(isinstance(f, str) for f in finalizers):
        return "metadata.finalizers must be a list of strings"
    for path in _LISTS_OF_OBJECTS:
        items = _get(obj, path) or []
        if not all(isinstance(i, dict) for i in items):
            return f"{'.'.join(path)} must be a list of objects"
    return None
