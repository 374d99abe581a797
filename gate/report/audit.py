"""How `gate audit` prints its answer: a kubectl-style table for a person, JSON for a machine.

Every string that came from the cluster is made inert (`inert`): a claim's name must not write
terminal escapes or CI commands.
"""

from __future__ import annotations

import json
from typing import Any

from gate.engine.audit import Audit, ClaimData, Standing
from gate.model.liveview import retain_command
from gate.report.common import inert

#: The table's columns, as kubectl would head them.
COLUMNS = ("NAMESPACE", "NAME", "VOLUME", "RECLAIM", "STORAGECLASS", "CAPACITY", "SNAPSHOT")

#: Said when the VolumeSnapshot API is not served.
NO_SNAPSHOT_API = (
    "note: VolumeSnapshots (snapshot.storage.k8s.io) are not served in this cluster: no claim "
    "counts as snapshotted"
)


def _row(c: ClaimData, served: bool) -> tuple[str, ...]:
    cls = "<none>" if c.storage_class is None else (c.storage_class or '""')
    return (
        c.namespace,
        c.name,
        c.volume,
        c.reclaim_policy,
        cls,
        c.capacity or "<unknown>",
        c.snapshot_text(served),
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns three spaces apart, as kubectl prints them."""
    cells = [COLUMNS, *(tuple(inert(v) for v in r) for r in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    return ["   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def audit_text(audit: Audit) -> str:
    """The at-risk claims as a table, then the summary, then what to do about them."""
    if not audit.claims_guarded:
        return (
            "PersistentVolumeClaim is not a guarded kind of the policy (guardedKinds): no claim "
            "was audited"
        )
    at_risk = audit.at_risk
    lines: list[str] = []
    if at_risk:
        lines += _table([_row(c, audit.snapshots_served) for c in at_risk])
    else:
        where = f"in namespace {audit.namespace}" if audit.namespace else "in any namespace"
        lines.append(f"No guarded claim {where} would lose its data to a deletion.")
    lines.append("")
    lines.append(inert(audit.summary()))
    if not audit.snapshots_served:
        lines.append(NO_SNAPSHOT_API)
    if at_risk:
        example = retain_command(inert(at_risk[0].volume))
        lines.append(
            "to keep a claim's data whatever deletes it: set its volume to Retain "
            f"({example}), or take a VolumeSnapshot of the claim and wait for readyToUse: true"
        )
    return "\n".join(lines)


def _claim_json(c: ClaimData) -> dict[str, Any]:
    return {
        "namespace": c.namespace,
        "name": c.name,
        "standing": c.standing.value,
        "volume": c.volume or None,
        "reclaimPolicy": c.reclaim_policy or None,
        "storageClassName": c.storage_class,
        "capacity": c.capacity or None,
        "snapshots": list(c.snapshots),
    }


def audit_json(audit: Audit) -> str:
    """`atRisk` lists the claims whose data a deletion would destroy; `safe` and `unbound` the
    others, so a script can check a claim it expects either way; `counts` by standing."""
    by = {s: [_claim_json(c) for c in audit.claims if c.standing is s] for s in Standing}
    doc = {
        "namespace": audit.namespace,
        "claimsGuarded": audit.claims_guarded,
        "volumeSnapshotApi": audit.snapshots_served,
        "counts": {s.value: audit.counts[s] for s in Standing},
        "atRisk": by[Standing.AT_RISK],
        "safe": by[Standing.RETAINED] + by[Standing.SNAPSHOTTED],
        "unbound": by[Standing.UNBOUND],
        "summary": audit.summary(),
    }
    return json.dumps(doc, indent=2)
