"""Raw API objects for the doctor and heal tests: the shapes the API server answers with."""

from __future__ import annotations

import datetime as dt
from typing import Any

T0 = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)


def stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(
    name: str,
    namespace: str = "",
    uid: str | None = None,
    deletion: dt.datetime | None = None,
    grace: int | None = None,
    finalizers: tuple[str, ...] = (),
    owners: tuple[dict[str, Any], ...] = (),
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "name": name,
        "uid": uid or f"uid-{name}",
        "resourceVersion": "7",
        "creationTimestamp": stamp(T0 - dt.timedelta(days=1)),
    }
    if namespace:
        m["namespace"] = namespace
    if deletion is not None:
        m["deletionTimestamp"] = stamp(deletion)
        m["deletionGracePeriodSeconds"] = 0 if grace is None else grace
    if finalizers:
        m["finalizers"] = list(finalizers)
    if owners:
        m["ownerReferences"] = list(owners)
    if annotations:
        m["annotations"] = annotations
    if labels:
        m["labels"] = labels
    return m


def owner(kind: str, name: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": True,
    }


def pod(
    name: str,
    namespace: str = "shop",
    node: str = "n1",
    claims: tuple[str, ...] = (),
    phase: str = "Running",
    ephemeral: tuple[str, ...] = (),
    **kw: Any,
) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    volumes += [{"name": e, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for e in ephemeral]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}], "volumes": volumes}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": meta(name, namespace, **kw),
        "spec": spec,
        "status": {"phase": phase, "startTime": stamp(T0 - dt.timedelta(hours=2))},
    }


def node(
    name: str = "n1",
    ready: str = "True",
    since: dt.datetime = T0 - dt.timedelta(days=1),
    taints: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "metadata": meta(name),
        "spec": {"taints": [{"key": t, "effect": "NoExecute"} for t in taints]},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown",
                    "lastTransitionTime": stamp(since),
                    "lastHeartbeatTime": stamp(since),
                }
            ]
        },
    }


def claim(
    name: str,
    namespace: str = "shop",
    volume: str = "",
    deletion: dt.datetime | None = None,
    finalizers: tuple[str, ...] = ("kubernetes.io/pvc-protection",),
    storage_class: str | None = "standard",
    **kw: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    if volume:
        spec["volumeName"] = volume
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {
        "metadata": meta(name, namespace, deletion=deletion, finalizers=finalizers, **kw),
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def volume(
    name: str,
    claim_name: str,
    namespace: str = "shop",
    claim_uid: str | None = None,
    phase: str = "Bound",
    policy: str = "Delete",
    **kw: Any,
) -> dict[str, Any]:
    return {
        "metadata": meta(
            name, finalizers=kw.pop("finalizers", ("kubernetes.io/pv-protection",)), **kw
        ),
        "spec": {
            "persistentVolumeReclaimPolicy": policy,
            "storageClassName": "standard",
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": claim_name,
                "uid": claim_uid if claim_uid is not None else f"uid-{claim_name}",
                "resourceVersion": "3",
            },
        },
        "status": {"phase": phase},
    }


def namespace(
    name: str,
    deletion: dt.datetime | None = None,
    conditions: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    return {
        "metadata": meta(name, deletion=deletion),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {
            "phase": "Terminating" if deletion else "Active",
            "conditions": [
                {"type": t, "status": "True", "reason": "SomeReason", "message": m}
                for t, m in conditions
            ],
        },
    }
