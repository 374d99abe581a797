"""Invariants of the plan, checked with generated inputs (derandomized, so CI is repeatable)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from gate.engine.plan import compute_plan
from gate.model.objects import (
    Inventory,
    RawObject,
    Source,
    build_inventory,
    learn_scopes,
    to_manifest,
)
from gate.model.refs import ObjectRef, Scopes

KINDS = [
    ("v1", "PersistentVolumeClaim"),
    ("v1", "ConfigMap"),
    ("v1", "PersistentVolume"),
    ("v1", "Namespace"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1beta2", "StatefulSet"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("autoscaling/v2beta2", "HorizontalPodAutoscaler"),
    ("example.com/v1", "Widget"),
]
names = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=6)
namespaces = st.sampled_from([None, "", "default", "app"])


@st.composite
def objects(draw: st.DrawFn) -> dict[str, object]:
    api_version, kind = draw(st.sampled_from(KINDS))
    meta: dict[str, object] = {"name": draw(names)}
    ns = draw(namespaces)
    if ns is not None:
        meta["namespace"] = ns
    spec = draw(st.dictionaries(st.sampled_from(["a", "b", "accessModes"]), st.integers(0, 3)))
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def _inventory(objs: list[dict[str, object]], default_ns: str = "default") -> Inventory:
    raws = [RawObject(o, Source("gen.yaml", i + 1)) for i, o in enumerate(objs)]
    scopes = Scopes()
    learn_scopes(scopes, raws)
    seen: dict[ObjectRef, RawObject] = {}
    for r in raws:  # keep the first of each identity: duplicates are tested elsewhere
        seen.setdefault(to_manifest(r, scopes, default_ns).ref, r)
    return build_inventory(seen.values(), scopes, default_ns)


@settings(derandomize=True, max_examples=200)
@given(st.lists(objects(), max_size=25))
def test_a_side_compared_with_itself_has_no_changes(objs: list[dict[str, object]]) -> None:
    inv = _inventory(objs)
    assert compute_plan(inv, inv, force_all=True) == []


@settings(derandomize=True, max_examples=200)
@given(st.lists(objects(), max_size=25))
def test_version_and_default_namespace_do_not_change_identity(
    objs: list[dict[str, object]],
) -> None:
    """Rewriting apiVersion within a group, or spelling out the default namespace, is no change."""
    inv = _inventory(objs)
    rewritten = []
    for o in objs:
        meta = o["metadata"]
        assert isinstance(meta, dict)
        o2: dict[str, object] = {**o, "metadata": dict(meta)}
        o2["apiVersion"] = {"apps/v1beta2": "apps/v1", "autoscaling/v2beta2": "autoscaling/v2"}.get(
            str(o["apiVersion"]), o["apiVersion"]
        )
        meta2 = o2["metadata"]
        assert isinstance(meta2, dict)
        if not meta2.get("namespace"):
            meta2["namespace"] = "default"
        rewritten.append(o2)
    inv2 = _inventory(rewritten)
    assert set(inv.objects) == set(inv2.objects)
    removed = [c for c in compute_plan(inv, inv2) if c.action == "delete"]
    assert removed == []


@settings(derandomize=True, max_examples=200)
@given(st.lists(objects(), max_size=25), st.lists(objects(), max_size=25))
def test_deletions_are_exactly_base_minus_head(
    a: list[dict[str, object]], b: list[dict[str, object]]
) -> None:
    base, head = _inventory(a), _inventory(b)
    deleted = {c.ref for c in compute_plan(base, head) if c.action == "delete"}
    assert deleted == set(base.objects) - set(head.objects)
