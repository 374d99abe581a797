"""Read what `gate audit --live` judges: claims (of a namespace, or all), every volume, and the
VolumeSnapshots, one paginated list each.

Every failure is a `ClusterError` (exit 2): an audit that cannot see must not report "no claim at
risk". Only the VolumeSnapshot API may be missing (its CRDs come with the external snapshotter):
then `snapshots` is None and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.kube.client import NotFoundError
from gate.kube.resources import Resource, resource_for
from gate.kube.snapshot import Lister, list_objects

#: What `gate audit --live` needs, said on a 403.
AUDIT_HINT = (
    "gate audit --live needs list on persistentvolumeclaims (in the namespace, or cluster-wide "
    "with -A), persistentvolumes (cluster-wide) and volumesnapshots.snapshot.storage.k8s.io "
    "(the chart's liveReader ClusterRole has them)"
)


def _resource(group: str, kind: str) -> Resource:
    found = resource_for(group, kind)
    assert found is not None, kind
    return found


@dataclass(frozen=True)
class AuditRead:
    """The raw objects the audit judges."""

    claims: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    #: None: the VolumeSnapshot API is not served.
    snapshots: list[dict[str, Any]] | None


def read_audit(lister: Lister, page_size: int, namespace: str | None) -> AuditRead:
    """Claims and snapshots of `namespace` (None: all), and every PersistentVolume."""
    claims = list(
        list_objects(lister, _resource("", "PersistentVolumeClaim"), page_size, namespace)
    )
    volumes = list(list_objects(lister, _resource("", "PersistentVolume"), page_size, None))
    snap_res = _resource("snapshot.storage.k8s.io", "VolumeSnapshot")
    try:
        snapshots: list[dict[str, Any]] | None = list(
            list_objects(lister, snap_res, page_size, namespace)
        )
    except NotFoundError:
        snapshots = None
    return AuditRead(claims, volumes, snapshots)
