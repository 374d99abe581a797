"""The one Kubernetes client (gate/kube/client.py, gate/kube/watch.py) against a real
kube-apiserver: every verb `gate doctor` and `gate heal` will use, the preconditions that keep a
repair from acting on a changed object, and the complete list and streamed watch of the cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gate.kube.client import (
    ApiStatusError,
    ConflictError,
    KubeClient,
    NotFoundError,
    load_configuration,
    new_api_client,
)
from gate.kube.watch import ListedItems, open_watch

from .kube import Cluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(kube: Cluster) -> Iterator[KubeClient]:
    with KubeClient(load_configuration(kube.kubeconfig, None), 30.0) as client:
        yield client


def _map(name: str, value: str = "1") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": value},
    }


def test_the_verbs_and_their_preconditions(api: KubeClient, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    path = f"{base}/settings"
    assert api.get(path, "get configmap") is None
    api.create(base, _map("settings"), "create configmap", dry_run=True)
    assert api.get(path, "get configmap") is None  # a dry run stores nothing
    made = api.create(base, _map("settings"), "create configmap")
    assert api.get(path, "get configmap") == made

    merged = api.patch(path, {"data": {"w": "2"}}, "patch configmap")
    assert merged["data"] == {"v": "1", "w": "2"}
    ops = [{"op": "test", "path": "/data/v", "value": "1"}, {"op": "remove", "path": "/data/w"}]
    assert api.patch(path, ops, "patch configmap", json_patch=True)["data"] == {"v": "1"}
    failed_test = [{"op": "test", "path": "/data/v", "value": "9"}]
    with pytest.raises(ApiStatusError, match="patch configmap") as failed:
        api.patch(path, failed_test, "patch configmap", json_patch=True)
    assert failed.value.status == 422  # a failed `test` is a precondition: nothing changed

    stale = dict(made)  # read before the patches: its resourceVersion is old
    with pytest.raises(ConflictError, match="update configmap: someone changed it"):
        api.update(path, {**stale, "data": {"v": "lost"}}, "update configmap")
    current = api.get(path, "get configmap")
    assert current is not None and current["data"] == {"v": "1"}

    with pytest.raises(ConflictError):
        api.delete(path, "delete configmap", uid="not-its-uid")
    with pytest.raises(ConflictError):
        api.delete(path, "delete configmap", resource_version=made["metadata"]["resourceVersion"])
    api.delete(path, "delete configmap", uid=made["metadata"]["uid"], dry_run=True)
    assert api.get(path, "get configmap") is not None
    api.delete(
        path,
        "delete configmap",
        uid=made["metadata"]["uid"],
        resource_version=current["metadata"]["resourceVersion"],
    )
    assert api.get(path, "get configmap") is None
    with pytest.raises(NotFoundError, match=r"delete configmap: .* does not serve it"):
        api.delete(path, "delete configmap")


def test_list_all_pages_through(api: KubeClient, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    for i in range(5):
        api.create(base, _map(f"page-{i}"), "create configmap")
    names = [m["metadata"]["name"] for m in api.list_all(base, "list configmaps", page_size=2)]
    assert sorted(n for n in names if n.startswith("page-")) == [f"page-{i}" for i in range(5)]


def test_a_complete_list_then_a_watch_from_its_version(
    api: KubeClient, kube: Cluster, namespace: str
) -> None:
    """The cache's two reads: every page of a list and its resourceVersion, then a watch from
    that version that sees what changed after it, and ends when the server says (no sleep: the
    server closes the stream after `seconds`)."""
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    for i in range(5):
        api.create(base, _map(f"listed-{i}"), "create configmap")
    raw = new_api_client(load_configuration(kube.kubeconfig, None))
    try:
        listed = ListedItems(raw, base, page_size=2)
        items = list(listed)
        version = listed.resource_version
        assert sorted(
            m["metadata"]["name"] for m in items if "listed" in m["metadata"]["name"]
        ) == [f"listed-{i}" for i in range(5)]
        assert version
        api.create(base, _map("after"), "create configmap")
        api.delete(f"{base}/listed-0", "delete configmap")
        seen: list[tuple[str, str]] = []
        with open_watch(raw, base, version, seconds=3) as stream:
            for event in stream:
                name = event.object["metadata"].get("name", "")
                if event.type != "BOOKMARK" and name != "kube-root-ca.crt":  # the CA publisher's
                    seen.append((event.type, name))
                    assert int(event.resource_version) > int(version)
        assert seen == [("ADDED", "after"), ("DELETED", "listed-0")]
    finally:
        raw.close()
