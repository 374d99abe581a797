"""`shape_problem`'s quick pass may only ever be stricter than the exact pass.

The quick pass (closures compiled from `SHAPES`) says an object fits; the exact pass
finds and words the first problem. If the quick pass let through an object the exact pass
faults, a list where a rule expects a map would reach the rules. Derandomized.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.model import shapes
from gate.model.shapes import SHAPES, shape_problem

_POD = {
    "volumes": [
        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "e", "ephemeral": {}},
    ]
}
_META = {
    "name": "x",
    "namespace": "app",
    "uid": "u",
    "deletionTimestamp": "2026-01-01T00:00:00Z",
    "annotations": {"a": "b"},
    "labels": {"c": "d"},
    "finalizers": ["f"],
    "ownerReferences": [{"kind": "K", "name": "o"}],
}
#: One object of every kind `SHAPES` reads, with every field it reads present and well formed.
WELL_FORMED: list[dict[str, Any]] = [
    {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _META,
        "spec": {
            "resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": "2Gi"}},
            "volumeName": "pv",
            "storageClassName": "fast",
        },
    },
    {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": _META,
        "spec": {
            "claimRef": {"name": "data", "namespace": "app"},
            "persistentVolumeReclaimPolicy": "Delete",
        },
    },
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": _META,
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Backup"},
            "versions": [{"name": "v1"}],
        },
    },
    {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _META,
        "spec": {
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
            "volumeClaimTemplates": [{"metadata": {"name": "pg"}}],
            "template": {"spec": _POD},
        },
    },
    {"apiVersion": "v1", "kind": "Pod", "metadata": _META, "spec": _POD},
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _META,
        "spec": {"template": {"spec": _POD}},
    },
    {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _META,
        "spec": {"jobTemplate": {"spec": {"template": {"spec": _POD}}}},
    },
    {"apiVersion": "example.com/v1", "kind": "Anything", "metadata": _META, "spec": "opaque"},
]


def _places() -> list[tuple[str | int, ...]]:
    """Every place a check reads, what it runs through, and a few places past them; `0` is a
    list's first item."""
    places: set[tuple[str | int, ...]] = {
        ("metadata", "annotations", "a"),
        ("metadata", "labels", "c"),
        ("spec", "x"),
    }
    for shape_list in SHAPES.values():
        for shape in (shapes._META, *shape_list):
            places.update(path for path, _ in shape.fields)
            places.update((*path, 0, *inner) for path, inner, _ in shape.items)
    prefixes = {place[:n] for place in places for n in range(1, len(place))}
    return sorted(places | prefixes, key=str)


PLACES = _places()
ODD: list[Any] = [
    None,
    "s",
    0,
    True,
    1.5,
    [],
    ["a"],
    [None],
    [{}],
    [1],
    {},
    {"a": 1},
    {"name": 2},
    {"claimName": ["x"]},
    [{"metadata": []}],
    [{"persistentVolumeClaim": "x"}],
]


def _set(obj: dict[str, Any], place: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A copy of `obj` with `value` at `place`, through whatever is there (objects made where
    nothing is; a place that runs through a scalar is left alone)."""
    out = copy.deepcopy(obj)
    node: Any = out
    for key, after in itertools.pairwise(place):
        if isinstance(key, int):
            if not isinstance(node, list) or not node:
                return out
            node = node[0]
            continue
        if not isinstance(node, dict):
            return out
        if node.get(key) is None:
            node[key] = [] if isinstance(after, int) else {}
        node = node[key]
    last = place[-1]
    if isinstance(last, int):
        if isinstance(node, list):
            node[:1] = [value]
    elif isinstance(node, dict):
        node[last] = value
    return out


@pytest.mark.parametrize("obj", WELL_FORMED, ids=lambda o: o["kind"])
def test_a_well_formed_object_is_vouched_for_by_the_quick_pass(obj: dict[str, Any]) -> None:
    assert shapes._check_for(obj)(obj)
    assert shape_problem(obj) is None


@settings(derandomize=True, max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(WELL_FORMED),
    st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(ODD)), min_size=1, max_size=3),
    st.sampled_from([None, ("", "PersistentVolumeClaim"), ("apps", "StatefulSet"), ("x", "Y")]),
)
def test_the_quick_pass_never_lets_through_what_the_exact_pass_faults(
    obj: dict[str, Any],
    changes: list[tuple[tuple[str | int, ...], Any]],
    kind: tuple[str, str] | None,
) -> None:
    for place, value in changes:
        obj = _set(obj, place, value)
    exact = shapes._problem(obj, kind)
    quick = shapes._check_for(obj) if kind is None else shapes._CHECKS.get(kind, shapes._META_CHECK)
    if quick(obj):
        assert exact is None
    assert shape_problem(obj, kind) == exact


def test_every_kind_read_has_a_compiled_check() -> None:
    assert set(shapes._CHECKS) == set(SHAPES)
