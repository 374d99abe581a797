"""Read the ledger of `gate doctor` and `gate heal`: one paginated list per kind, projected at
once (`gate.engine.ledger`), so a cluster of thousands of pods costs a few requests and little
memory. Every failure is a `ClusterError` (exit 2): a doctor that cannot see must not say
"nothing is stuck"."""

from __future__ import annotations

from collections.abc import Iterable

from gate.engine import ledger as lg
from gate.kube.client import NotFoundError
from gate.kube.resources import RESOURCES, Resource, resource_for
from gate.kube.snapshot import Lister, list_objects

NODES = Resource("", "v1", "Node", "nodes")
_CORE = {"Pod", "PersistentVolumeClaim", "PersistentVolume", "Namespace", "Node"}


def _core(kind: str) -> Resource:
    resource = resource_for("", kind)
    assert resource is not None, kind
    return resource


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
    for pod in list_objects(lister, _core("Pod"), page_size, namespace):
        ledger.add_pod(lg.project_pod(pod))
    for claim in list_objects(lister, _core("PersistentVolumeClaim"), page_size, namespace):
        ledger.add_claim(lg.project_claim(claim))
    for volume in list_objects(lister, _core("PersistentVolume"), page_size, None):
        ledger.add_volume(lg.project_volume(volume))
    for node in list_objects(lister, NODES, page_size, None):
        ledger.add_node(lg.project_node(node))
    for ns in list_objects(lister, _core("Namespace"), page_size, None):
        ledger.add_namespace(lg.project_namespace(ns))
    ledger.read |= _CORE
    wanted = set(guarded_kinds)
    for res in RESOURCES:
        if res.kind in _CORE or (res.group, res.kind) not in wanted:
            continue
        scoped = namespace if res.kind != "CustomResourceDefinition" else None
        try:
            for item in list_objects(lister, res, page_size, scoped):
                if (item.get("metadata") or {}).get("deletionTimestamp"):
                    ledger.add_other(lg.meta_of(item, res.api_version, res.kind, res.group))
        except NotFoundError:
            if not res.optional:
                raise
            continue
        ledger.read.add(res.kind)
    return ledger
