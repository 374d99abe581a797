"""Read the ledger of `gate doctor` and `gate heal`: one paginated list per kind, projected at
once (`gate.engine.ledger`), so a cluster of thousands of pods costs a few requests and little
memory. Every failure is a `ClusterError` (exit 2): a doctor that cannot see must not say
"nothing is stuck"."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gate.engine import ledger as lg
from gate.kube.client import NotFoundError
from gate.kube.resources import RESOURCES, Resource, resource_for
from gate.kube.snapshot import Lister, list_items
from gate.model.refs import api_path

NODES = Resource("", "v1", "Node", "nodes")
_CORE = {"Pod", "PersistentVolumeClaim", "PersistentVolume", "Namespace", "Node"}


def _core(kind: str) -> Resource:
    resource = resource_for("", kind)
    assert resource is not None, kind
    return resource


def _items(lister: Lister, res: Resource, page_size: int, namespace: str | None) -> Iterable[Any]:
    path = api_path(res.api_version, res.plural, namespace) if namespace else None
    for page in list_items(lister, res, page_size, path):
        yield from (i for i in page if isinstance(i, dict))


def read_ledger(
    lister: Lister,
    page_size: int,
    namespace: str | None = None,
    guarded_kinds: Iterable[tuple[str, str]] = (),
) -> lg.Ledger:
    """Pods and claims (of `namespace`, or all), and every volume, node and namespace; of the
    other guarded kinds, the objects being deleted. An optional API that is not served (404)
    is skipped; anything else that fails raises."""
    ledger = lg.Ledger()
    for pod in _items(lister, _core("Pod"), page_size, namespace):
        ledger.add_pod(lg.project_pod(pod))
    for claim in _items(lister, _core("PersistentVolumeClaim"), page_size, namespace):
        ledger.add_claim(lg.project_claim(claim))
    for volume in _items(lister, _core("PersistentVolume"), page_size, None):
        ledger.add_volume(lg.project_volume(volume))
    for node in _items(lister, NODES, page_size, None):
        ledger.add_node(lg.project_node(node))
    for ns in _items(lister, _core("Namespace"), page_size, None):
        ledger.add_namespace(lg.project_namespace(ns))
    ledger.read |= _CORE
    wanted = set(guarded_kinds)
    for res in RESOURCES:
        if res.kind in _CORE or (res.group, res.kind) not in wanted:
            continue
        scoped = namespace if res.kind != "CustomResourceDefinition" else None
        try:
            for item in _items(lister, res, page_size, scoped):
                if (item.get("metadata") or {}).get("deletionTimestamp"):
                    ledger.add_other(lg.meta_of(item, res.api_version, res.kind, res.group))
        except NotFoundError:
            if not res.optional:
                raise
            continue
        ledger.read.add(res.kind)
    return ledger
