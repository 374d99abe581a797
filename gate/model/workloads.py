"""Where pod specs live inside workload objects, and which claims they mount.

Shared by the static rules (templates in manifests) and the live projections (pods, templates).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

#: Workload kinds by (group, kind) -> path to the pod spec inside the object.
POD_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("spec",),
    ("", "ReplicationController"): ("spec", "template", "spec"),
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
}


def pod_spec_of(group: str, kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec inside a workload object, or None for other kinds."""
    path = POD_SPEC_PATHS.get((group, kind))
    if path is None:
        return None
    node: Any = body
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def claim_names(pod_spec: dict[str, Any]) -> Iterator[str]:
    """Names of the claims a pod spec mounts by `persistentVolumeClaim.claimName`."""
    for vol in pod_spec.get("volumes") or ():
        if isinstance(vol, dict):
            pvc = vol.get("persistentVolumeClaim")
            if isinstance(pvc, dict) and isinstance(pvc.get("claimName"), str):
                yield pvc["claimName"]


def ephemeral_volume_names(pod_spec: dict[str, Any]) -> Iterator[str]:
    """Names of generic ephemeral volumes; the claim is `<pod name>-<volume name>`."""
    for vol in pod_spec.get("volumes") or ():
        if isinstance(vol, dict) and isinstance(vol.get("ephemeral"), dict):
            name = vol.get("name")
            if isinstance(name, str):
                yield name


def statefulset_claim_matches(sts_name: str, body: dict[str, Any], claim: str) -> bool:
    """True when `claim` is one the StatefulSet's volumeClaimTemplates create (`tpl-sts-N`)."""
    spec = body.get("spec") or {}
    for tpl in spec.get("volumeClaimTemplates") or ():
        tpl_name = ((tpl or {}).get("metadata") or {}).get("name")
        prefix = f"{tpl_name}-{sts_name}-"
        if (
            isinstance(tpl_name, str)
            and claim.startswith(prefix)
            and claim[len(prefix) :].isdigit()
        ):
            return True
    return False


def pod_uses_claim(
    claim: str,
    node: str,
    claims: Iterable[str],
    ephemeral_claims: Iterable[str],
    shut_down: bool,
    owned: bool | None,
) -> bool:
    """pvc-protection's `podUsesPVC`: a scheduled pod (`node` set), in any phase, uses a claim it
    mounts by name; a generic ephemeral volume's claim only while the pod is not shut down and
    only when the claim is controlled by this pod (`owned`; None when not known, which counts
    as owned: the gate errs on the side of "in use")."""
    if not node:
        return False
    if claim in claims:
        return True
    return claim in ephemeral_claims and not shut_down and owned is not False
