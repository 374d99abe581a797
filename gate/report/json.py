"""The JSON report: for programs (its shape is `gate/schemas/report.schema.json`)."""

from __future__ import annotations

import json
from typing import Any

from gate.engine.context import Context
from gate.engine.placement import FILE_LEVEL
from gate.engine.plantree import PlanTree
from gate.engine.verdict import Decision
from gate.model.findings import Finding
from gate.model.objects import Source
from gate.report.common import LEGACY_COMMAND
from gate.report.tree import plan_data

#: Version of the JSON report's shape (`gate/schemas/report.schema.json`). It changes only when a
#: field is removed or changes meaning; new fields may appear without a bump.
SCHEMA_VERSION = 1


def report_data(
    decision: Decision, *, context: Context, base: str, head: str, tree: PlanTree | None = None
) -> dict[str, Any]:
    """The JSON report as plain data, keys in documented order (see the report schema)."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "verdict": decision.verdict.value,
        "context": context.value,
        "base": base,
        "head": head,
        "findings": [finding_data(f) for f in decision.findings],
        "exempted": [
            {
                **finding_data(ex.finding),
                "exemption": {"reason": ex.reason, "expires": ex.expires.isoformat()},
            }
            for ex in decision.exempted
        ],
        # What the decision was made without (a remote resource not fetched): only when any.
        **({"notes": list(decision.notes)} if decision.notes else {}),
        **(
            {
                "standingCount": len(decision.standing),
                "standing": [finding_data(f) for f in decision.standing],
            }
            if decision.standing
            else {}
        ),
        **({"plan": plan_data(tree)} if tree is not None else {}),
    }


def finding_data(finding: Finding) -> dict[str, Any]:
    """One finding as JSON data; `namespace` is null for cluster-scoped objects."""
    ref = finding.ref
    source = finding.source
    return {
        "code": finding.code.value,
        "severity": finding.severity.value,
        "object": {
            "apiVersion": finding.api_version,
            "kind": ref.kind,
            "namespace": ref.namespace or None,
            "name": ref.name,
        },
        "message": finding.message,
        "evidence": list(finding.evidence),
        "remediation": finding.remediation,
        "actions": [
            {
                "kind": a.kind.value,
                "runner": a.runner.value,
                "text": a.text,
                "source": _source(a.source),
            }
            for a in finding.actions
        ],
        "source": _source(source),
        **({"headSource": _head_source(finding.head_source)} if finding.head_source else {}),
    }


def _source(source: Source | None) -> dict[str, Any] | None:
    return {"path": source.path, "line": source.line} if source is not None else None


def _head_source(source: Source) -> dict[str, Any]:
    """Where the candidate shows the finding; `line` null for the file as a whole."""
    return {"path": source.path, "line": None if source.line == FILE_LEVEL else source.line}


def render_json(
    decision: Decision, *, context: Context, base: str, head: str, tree: PlanTree | None = None
) -> str:
    """The JSON report: two-space indent, keys in documented order, ASCII only."""
    data = report_data(decision, context=context, base=base, head=head, tree=tree)
    text = json.dumps(data, indent=2)
    # `##[` can only occur inside a string here; `\u005b` is the same `[` to a JSON reader.
    return text.replace(LEGACY_COMMAND, "##\\u005b")
