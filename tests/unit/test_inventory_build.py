"""Building the two sides: what is reused between them must not change what either side holds."""

from __future__ import annotations

from typing import Any

from gate.engine.check import build_sides
from gate.model.objects import Inventory, RawObject, Source, build_inventory, to_manifest
from gate.model.refs import Scopes


def _body(kind: str, name: str, namespace: str | None = None, api: str = "v1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": meta}


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Cluster", "names": {"kind": "Widget"}},
}


def _raws(bodies: list[dict[str, Any]], path: str) -> list[RawObject]:
    return [RawObject(b, Source(path, n + 1), root=path) for n, b in enumerate(bodies)]


def _view(inv: Inventory) -> list[tuple[Any, ...]]:
    return [(m.ref, m.api_version, m.body, m.source, m.root) for m in inv]


def test_sides_that_share_bodies_are_built_as_if_each_were_alone() -> None:
    shared = [
        _body("ConfigMap", "a", "app"),
        _body("ConfigMap", "b"),  # the default namespace
        _body("Widget", "w", "app", api="example.com/v1"),  # cluster-scoped by the CRD
        _body("Deployment", "web", "app", api="apps/v1"),
    ]
    base_raw = _raws([*shared, _body("Secret", "gone", "app")], "base")
    head_raw = _raws([_body("Secret", "new", "app"), *reversed(shared), CRD], "head")

    base, head = build_sides(base_raw, head_raw, "team")

    scopes = Scopes()
    scopes.learn_crd(CRD)
    assert _view(base) == _view(build_inventory(base_raw, scopes, "team"))
    assert _view(head) == _view(build_inventory(head_raw, scopes, "team"))
    for m in head:
        if m.ref in base:
            assert base.objects[m.ref].ref is m.ref  # one identity for both sides
        assert m == to_manifest(RawObject(m.body, m.source or Source("", 0)), scopes, "team")
    assert [m.ref.name for m in head.in_namespace("app")] == ["new", "web", "a"]
    assert [m.ref.name for m in head.in_namespace("team")] == ["b"]
    assert [m.ref.namespace for m in head.of_kind("example.com", "Widget")] == [""]


def test_the_same_object_added_twice_is_a_duplicate_not_a_second_entry() -> None:
    m = to_manifest(_raws([_body("ConfigMap", "a", "app")], "x")[0], Scopes())
    inv = Inventory([m, m])
    assert len(inv) == 1
    assert list(inv.of_kind("", "ConfigMap")) == [m]
    assert inv.in_namespace("app") == [m]
    assert inv.duplicates == {m.ref: [m.source, m.source]}


def test_roots_follow_what_is_added() -> None:
    inv = Inventory([to_manifest(r, Scopes()) for r in _raws([_body("ConfigMap", "a")], "one")])
    assert inv.roots() == {"one"}
    inv.add(to_manifest(_raws([_body("ConfigMap", "b")], "two")[0], Scopes()))
    assert inv.roots() == {"one", "two"}
    assert Inventory().roots() == frozenset()
