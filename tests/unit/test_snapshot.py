"""The snapshot's pure parts: pagination, optional APIs, controlled objects, custom resource counts,
error messages; and retirement status built on the same live view. No network: a fake `Lister`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gate.engine.kustomizations import FLUX_NAME, FLUX_NAMESPACE
from gate.engine.policy import Policy
from gate.engine.retire import Stage, render_json, render_text, retire_statuses
from gate.engine.scope import parse_scope
from gate.kube.client import status_error
from gate.kube.resources import PARENTS, RESOURCES, Resource
from gate.kube.snapshot import (
    LIVE_HINT,
    NotServedError,
    count_custom_resources,
    list_items,
    read_live,
    take_snapshot,
)
from gate.model.errors import ClusterError
from gate.model.liveview import LiveObject
from gate.model.objects import build_inventory
from gate.model.refs import ObjectRef, Scopes
from gate.sources.manifests import parse_stream
from tests.unit.helpers import live_pod, live_workload

GUARDED = Policy().guarded_kinds
FLUX = {FLUX_NAME: "apps", FLUX_NAMESPACE: "flux-system"}
ANN = "prune-gate.io/retire"


class FakeLister:
    """Serves lists from memory, `page` items at a time, and records every request."""

    def __init__(self, lists: dict[str, list[dict[str, Any]]], remaining: bool = True) -> None:
        self.lists = lists
        self.remaining = remaining
        self.requests: list[tuple[str, dict[str, str]]] = []

    def get_json(self, path: str, query: list[tuple[str, str]], what: str) -> dict[str, Any]:
        q = dict(query)
        self.requests.append((path, q))
        if path not in self.lists:
            raise NotServedError(404, f"{what}: not served (404)")
        items = self.lists[path]
        start = int(q.get("continue", "0"))
        end = start + int(q["limit"])
        meta: dict[str, Any] = {}
        if end < len(items):
            meta["continue"] = str(end)
            if self.remaining:
                meta["remainingItemCount"] = len(items) - end
        return {"kind": "List", "metadata": meta, "items": items[start:end]}


def path(kind: str) -> str:
    return next(r.path for r in RESOURCES if r.kind == kind)


def pvc(name: str, ns: str = "app", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, **meta}, "spec": {}}


def crd(
    group: str = "example.com", kind: str = "Widget", plural: str = "widgets"
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{plural}.{group}", "labels": FLUX},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1alpha1", "served": True, "storage": False},
                {"name": "v1", "served": True, "storage": True},
            ],
        },
    }


def test_lists_follow_continue_one_request_per_page() -> None:
    lister = FakeLister({path("PersistentVolumeClaim"): [pvc(f"c{i}") for i in range(7)]})
    res = next(r for r in RESOURCES if r.kind == "PersistentVolumeClaim")
    pages = list(list_items(lister, res, page_size=3))
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [q.get("continue") for _, q in lister.requests] == [None, "3", "6"]
    assert all(q["limit"] == "3" for _, q in lister.requests)


def test_snapshot_fills_the_live_state_and_skips_optional_apis() -> None:
    lists: dict[str, list[dict[str, Any]]] = {r.path: [] for r in RESOURCES if not r.optional}
    lists[path("PersistentVolumeClaim")] = [
        pvc("data"),
        pvc("data-db-0", ownerReferences=[{"kind": "StatefulSet", "controller": True}]),
    ]
    lists[path("Pod")] = [live_pod("web-1", "data")]
    lists[path("CustomResourceDefinition")] = [crd()]
    snap = take_snapshot(FakeLister(lists), GUARDED, page_size=1)
    assert snap.state.get(ObjectRef("", "PersistentVolumeClaim", "app", "data")) is not None
    assert [u.name for u in snap.state.claim_users("app", "data")] == ["web-1"]
    assert snap.controlled == {ObjectRef("", "PersistentVolumeClaim", "app", "data-db-0")}
    assert snap.custom_kinds["widgets.example.com"].version == "v1"  # the storage version
    assert snap.skipped == ["VolumeSnapshot (snapshot.storage.k8s.io): API not installed"]
    stat = next(s for s in snap.stats if s.kind == "PersistentVolumeClaim")
    assert (stat.items, stat.pages) == (2, 2)
    assert "2 PersistentVolumeClaim" in snap.summary()


def test_a_missing_required_api_is_an_error() -> None:
    with pytest.raises(ClusterError, match="not served"):
        take_snapshot(FakeLister({}), GUARDED, page_size=10)


def test_a_list_without_items_is_an_error() -> None:
    class Odd(FakeLister):
        def get_json(self, path: str, query: list[tuple[str, str]], what: str) -> dict[str, Any]:
            return {"kind": "Status"}

    res = Resource("", "v1", "Pod", "pods")
    with pytest.raises(ClusterError, match="list pods: the API server answered a 'Status'"):
        list(list_items(Odd({}), res, 10))


@pytest.mark.parametrize("remaining", [True, False])
def test_custom_resources_counted_with_one_request_or_by_pages(remaining: bool) -> None:
    lists: dict[str, list[dict[str, Any]]] = {r.path: [] for r in RESOURCES if not r.optional}
    lists[path("CustomResourceDefinition")] = [crd()]
    lists["/apis/example.com/v1/widgets"] = [pvc(f"w{i}") for i in range(5)]
    lister = FakeLister(lists, remaining=remaining)
    snap = take_snapshot(lister, GUARDED, page_size=2)
    before = len(lister.requests)
    count_custom_resources(lister, snap, ["widgets.example.com", "gone.example.com"], 2)
    assert snap.state.custom_resource_count("example.com", "Widget") == 5
    assert len(lister.requests) - before == (1 if remaining else 4)


def test_read_live_prunes_owned_objects_and_counts_pruned_crds() -> None:
    lists: dict[str, list[dict[str, Any]]] = {r.path: [] for r in RESOURCES if not r.optional}
    lists[path("PersistentVolumeClaim")] = [
        pvc("kept", labels=FLUX),
        pvc("orphan", labels=FLUX),
        pvc("data-db-0", labels=FLUX, ownerReferences=[{"controller": True}]),
    ]
    lists[path("CustomResourceDefinition")] = [crd()]
    lists["/apis/example.com/v1/widgets"] = [pvc("w1")]
    head_text = (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: kept, namespace: app}\n"
    )
    head = build_inventory(parse_stream(head_text, "head.yaml"), Scopes(), "default")
    base = build_inventory([], Scopes(), "default")
    scopes = [
        parse_scope("flux:flux-system/apps"),
        parse_scope("label:kustomize.toolkit.fluxcd.io/name=apps"),
    ]
    read = read_live(FakeLister(lists), Policy(), base, head, scopes)
    assert [c.ref.name for c in read.prune_changes] == ["orphan", "widgets.example.com"]
    assert all("flux:flux-system/apps" in c.cause for c in read.prune_changes)  # no duplicates
    assert read.snapshot.state.custom_resource_count("example.com", "Widget") == 1


def test_read_live_lists_flux_and_argo_parents_when_served() -> None:
    empty = build_inventory([], Scopes(), "default")
    lists: dict[str, list[dict[str, Any]]] = {r.path: [] for r in RESOURCES if not r.optional}
    absent = read_live(FakeLister(dict(lists)), Policy(), empty, empty)
    assert absent.snapshot.skipped == [
        f"{r.kind} ({r.group}): API not installed" for r in (*RESOURCES, *PARENTS) if r.optional
    ]
    inventory = {"entries": [{"id": "app_data__PersistentVolumeClaim", "v": "v1"}]}
    lists["/apis/kustomize.toolkit.fluxcd.io/v1/kustomizations"] = [
        {
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "status": {"inventory": inventory},
        }
    ]
    resources = [{"kind": "PersistentVolumeClaim", "namespace": "app", "name": "data"}]
    lists["/apis/argoproj.io/v1alpha1/applications"] = [
        {"metadata": {"name": "shop", "namespace": "argocd"}, "status": {"resources": resources}}
    ]
    state = read_live(FakeLister(lists), Policy(), empty, empty).snapshot.state
    data = [ObjectRef("", "PersistentVolumeClaim", "app", "data")]
    ks = ObjectRef("kustomize.toolkit.fluxcd.io", "Kustomization", "flux-system", "apps")
    assert state.applied_by(ks) == data
    assert state.applied_by(ObjectRef("argoproj.io", "Application", "argocd", "shop")) == data
    assert "kustomizations.kustomize.toolkit.fluxcd.io" in LIVE_HINT


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (401, "rejected the credentials (401 Unauthorized) (bad token)"),
        (403, "forbidden (403) (bad token); gate check --live needs get and list on pods"),
        (410, "continue token expired"),
        (500, "answered 500 (bad token)"),
    ],
)
def test_status_errors_say_what_and_how_to_fix(status: int, says: str) -> None:
    raw = json.dumps({"kind": "Status", "message": "bad token"}).encode()
    err = status_error("list pods", "https://k:6443", status, raw, LIVE_HINT)
    assert str(err).startswith("list pods: ")
    assert says in str(err)
    assert isinstance(status_error("list x", "h", 404, b"not json"), NotServedError)


# --- retirement status ----------------------------------------------------------------------


def _snap(*claims: dict[str, Any], pods: tuple[dict[str, Any], ...] = (), extra: Any = None) -> Any:
    lists: dict[str, list[dict[str, Any]]] = {r.path: [] for r in RESOURCES if not r.optional}
    lists[path("PersistentVolumeClaim")] = list(claims)
    lists[path("Pod")] = list(pods)
    lists.update(extra or {})
    return take_snapshot(FakeLister(lists), GUARDED, page_size=50)


def _statuses(snap: Any, **kw: Any) -> Any:
    objects: list[LiveObject] = list(snap.state.objects.values())
    return retire_statuses(objects, snap.state, ANN, **kw)


def test_retire_status_stages() -> None:
    deploy = live_workload("web", "b")
    snap = _snap(
        pvc("a", annotations={ANN: "moved"}),
        pvc("b", annotations={ANN: "moved"}),
        pvc("c", annotations={ANN: "moved"}, deletionTimestamp="2026-12-02T10:00:00Z"),
        pvc("d", annotations={ANN: "moved"}),
        pvc("unmarked"),
        pods=(live_pod("job-1", "d", phase="Succeeded"), live_pod("web-1", "b")),
        extra={path("Deployment"): [deploy]},
    )
    by_name = {s.ref.name: s for s in _statuses(snap)}
    assert set(by_name) == {"a", "b", "c", "d"}
    assert by_name["a"].stage is Stage.READY and by_name["a"].safe_to_remove
    b = by_name["b"]
    assert b.stage is Stage.WAITING and not b.safe_to_remove
    assert b.waits_on() == [
        "pod app/web-1 on node n1 (Running) mounts it",
        "Deployment app/web mounts it in its pod template",
    ]
    assert "remove the claim from Deployment app/web" in b.next_step(ANN)
    assert by_name["c"].stage is Stage.TERMINATING
    assert "kubectl delete pod -n app job-1" in by_name["d"].next_step(ANN)
    (named,) = _statuses(snap, name="unmarked")
    assert named.stage is Stage.NOT_MARKED and "stage 1" in named.next_step(ANN)
    assert _statuses(snap, namespace="other") == []


def test_retire_status_warns_when_data_goes_with_the_claim() -> None:
    claim = pvc("a", annotations={ANN: "moved"})
    claim["spec"] = {"volumeName": "pv-1"}
    pv = {"metadata": {"name": "pv-1"}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}
    snap = _snap(claim, extra={path("PersistentVolume"): [pv]})
    (status,) = _statuses(snap)
    assert "PersistentVolume pv-1 has reclaimPolicy Delete" in status.data_warning
    text = render_text([status], ANN)
    assert text.splitlines()[0] == 'claim app/a  prune-gate.io/retire: "moved"'
    assert "safe to remove from the manifests now: yes" in text
    doc = json.loads(render_json([status], ANN))
    assert doc["claims"][0]["stage"] == "ready" and doc["claims"][0]["safeToRemove"] is True


def test_a_deployments_replicaset_is_not_a_second_consumer() -> None:
    def workload(name: str, owner: str | None) -> dict[str, Any]:
        if owner:
            return live_workload(
                name, ownerReferences=[{"kind": owner, "name": "x", "controller": True}]
            )
        return live_workload(name)

    snap = _snap(
        extra={
            path("Deployment"): [workload("web", None)],
            path("ReplicaSet"): [workload("web-1a", "Deployment"), workload("ro-1b", "Rollout")],
        }
    )
    assert [r.display() for r in snap.state.claim_consumers("app", "data")] == [
        "Deployment app/web",
        "ReplicaSet app/ro-1b",
    ]
    assert ObjectRef("apps", "ReplicaSet", "app", "web-1a") in snap.controlled
