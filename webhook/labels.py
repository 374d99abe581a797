"""Protected labels: a deployer may not relabel a guarded object out of the webhook's sight.

A webhook's `objectSelector` reads labels, and labels come from the manifests the deployer
applies: one UPDATE that drops (or flips) the label, and the next DELETE never reaches prune-gate.
The keys the selector reads are the policy's `webhook.protectedLabels` (the chart adds them); a
deployer's change to any of them on a guarded object is `GUARD_TAMPERED`. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gate.findings import Code, Finding
from gate.policy import Policy
from gate.refs import ObjectRef


def _label(obj: dict[str, Any], key: str) -> str | None:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    value = labels.get(key) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def _how(was: str | None, now: str | None) -> str:
    if was is None:
        return f'added ("{now}")'
    if now is None:
        return f'removed (was "{was}")'
    return f'changed from "{was}" to "{now}"'


def protected_label_changes(
    ref: ObjectRef, old: dict[str, Any], new: dict[str, Any], policy: Policy, cause: str
) -> Iterator[Finding]:
    """GUARD_TAMPERED for each protected label this UPDATE adds, changes or removes."""
    for key in policy.webhook.protected_labels:
        was, now = _label(old, key), _label(new, key)
        if was == now:
            continue
        yield Finding(
            code=Code.GUARD_TAMPERED,
            ref=ref,
            message=f"{ref.display()} has label {key} {_how(was, now)} by a deployer: the "
            "webhook's objectSelector reads that label, so the change could take the object out "
            "of prune-gate's sight before it is deleted",
            evidence=(
                f"protected label (policy webhook.protectedLabels): {key}",
                f"cause: {cause}",
            ),
            remediation=f"keep label {key} as it is live in the manifest; if the object should "
            f"leave prune-gate's guard, a person relabels it (kubectl label {ref.kubectl()} "
            f"{key}=... --overwrite) or the chart's webhook.objectSelector changes",
            api_version=str(new.get("apiVersion") or ""),
        )
