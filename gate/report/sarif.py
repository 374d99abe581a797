"""SARIF 2.1.0, for GitHub code scanning: one rule per finding code, one result per finding.

Code scanning keeps an alert open across runs by its fingerprint and shows it on the analysed
commit (the candidate), so a result stands where the annotation stands: the candidate's line when
placement found one, else where base declared the object (a file the candidate removed has no line
of its own); base's place is a related location whenever the two differ. The fingerprint is the
object and the code, never the line: an alert follows the object when lines move. Exempted
findings are results with an external suppression carrying the policy's reason, so an exemption
shows as a dismissed alert, not as nothing.

Each rule carries its code's page (`gate codes CODE`): `help.markdown` the docs page, `help.text`
the same for a terminal, `helpUri` the page on the docs site, and in its properties GitHub's
`security-severity` (derived from the default severity and the harm, `gate.model.codepages`),
`precision` (`medium` for the codes that say what the gate cannot see, `high` for the rest) and
`tags` (`security`, which GitHub needs to read the security severity, and the harm).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gate import __version__
from gate.engine.context import Context
from gate.engine.placement import FILE_LEVEL
from gate.engine.verdict import Decision
from gate.model.codepages import PAGES, Harm, docs_url, security_severity
from gate.model.findings import CODES, MEANING, Code, Finding, Severity
from gate.model.objects import Source
from gate.report.codepage import page_markdown, page_text
from gate.report.common import LEGACY_COMMAND, verdict_line

#: The schema a SARIF 2.1.0 log names (SchemaStore's copy of the OASIS schema).
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

#: SARIF result level per severity: the same three strengths as the annotations.
LEVEL: dict[Severity, str] = {
    Severity.BLOCK: "error",
    Severity.DEFER: "warning",
    Severity.WARN: "note",
    Severity.OFF: "none",
}

#: Rules in a fixed order, so a result's `ruleIndex` is the same in every run.
RULES: tuple[Code, ...] = tuple(Code)


def render_sarif(decision: Decision, *, context: Context, base: str, head: str) -> str:
    """The SARIF log as JSON text (two-space indent, ASCII only)."""
    text = json.dumps(sarif_data(decision, context=context, base=base, head=head), indent=2)
    return text.replace(LEGACY_COMMAND, "##\\u005b")  # inert in a log, the same `[` to a reader


def sarif_data(decision: Decision, *, context: Context, base: str, head: str) -> dict[str, Any]:
    """The SARIF log as plain data: one run of prune-gate."""
    results = [_result(f) for f in decision.findings]
    for ex in decision.exempted:
        suppression = {
            "kind": "external",
            "justification": f"{ex.reason} (exempted until {ex.expires.isoformat()})",
        }
        results.append({**_result(ex.finding), "suppressions": [suppression]})
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "prune-gate",
                        "version": __version__,
                        "rules": [_rule(code) for code in RULES],
                    }
                },
                "automationDetails": {"id": f"prune-gate/{context.value}/"},
                "invocations": [
                    {
                        "executionSuccessful": True,
                        "properties": {
                            "verdict": decision.verdict.value,
                            "exitCode": decision.verdict.exit_code,
                            "summary": verdict_line(
                                decision, context=context, base=base, head=head
                            ),
                        },
                        **_notifications(decision.notes),
                    }
                ],
                "properties": {"context": context.value, "base": base, "head": head},
                "results": results,
            }
        ],
    }


def _notifications(notes: tuple[str, ...]) -> dict[str, Any]:
    """The report's notes as SARIF tool notifications (none: the key is left out)."""
    if not notes:
        return {}
    return {
        "toolExecutionNotifications": [{"level": "note", "message": {"text": n}} for n in notes]
    }


def _rule(code: Code) -> dict[str, Any]:
    """The code as a SARIF reporting descriptor: its meaning, its page, and how GitHub ranks it."""
    page = PAGES[code]
    return {
        "id": code.value,
        "name": "".join(part.capitalize() for part in code.value.split("_")),
        "shortDescription": {"text": MEANING[code]},
        "fullDescription": {"text": page.what.replace("`", ""), "markdown": page.what},
        "helpUri": docs_url(code),
        "help": {"text": page_text(code), "markdown": page_markdown(code, links=False)},
        "defaultConfiguration": {"level": LEVEL[CODES[code].severity]},
        "properties": {
            "tags": ["security", "kubernetes", "gitops", page.harm.value],
            "precision": "medium" if page.harm is Harm.BLIND else "high",
            "security-severity": security_severity(code),
        },
    }


def _result(finding: Finding) -> dict[str, Any]:
    primary = _primary(finding)
    result: dict[str, Any] = {
        "ruleId": finding.code.value,
        "ruleIndex": RULES.index(finding.code),
        "level": LEVEL[finding.severity],
        "message": {"text": _message(finding)},
        "locations": [_location(primary)] if primary is not None else [],
        "partialFingerprints": {"pruneGateObject/v1": _fingerprint(finding)},
        "properties": {
            "object": {
                "apiVersion": finding.api_version,
                "kind": finding.ref.kind,
                "namespace": finding.ref.namespace or None,
                "name": finding.ref.name,
            },
            "severity": finding.severity.value,
            "commands": finding.commands(),
        },
    }
    base = finding.source
    if base is not None and primary is not None and base != primary and _in_repository(base):
        result["relatedLocations"] = [
            {**_location(base, "declared here in base"), "id": 1},
        ]
    return result


def _primary(finding: Finding) -> Source | None:
    """The candidate's line when there is one, else where base declared it; None for an object
    no file declares (only live)."""
    head = finding.head_source
    if head is not None and head.line != FILE_LEVEL and _in_repository(head):
        return head
    base = finding.source
    if base is not None and _in_repository(base):
        return base
    return head if head is not None and _in_repository(head) else None


def _in_repository(source: Source) -> bool:
    return not source.path.startswith("<")  # `<stdin>`, `<live>`: no file code scanning shows


def _location(source: Source, message: str = "") -> dict[str, Any]:
    physical: dict[str, Any] = {
        "artifactLocation": {"uri": source.path.removeprefix("./"), "uriBaseId": "%SRCROOT%"}
    }
    if source.line != FILE_LEVEL:
        physical["region"] = {"startLine": source.line}
    location: dict[str, Any] = {"physicalLocation": physical}
    if message:
        location["message"] = {"text": message}
    return location


def _message(finding: Finding) -> str:
    """What, why, evidence and the fix, as the other reports say them."""
    lines = [f"{finding.ref.display()}: {finding.message}"]
    lines += [f"- {e}" for e in finding.evidence]
    if finding.remediation:
        lines.append(f"fix: {finding.remediation}")
    return "\n".join(lines)


def _fingerprint(finding: Finding) -> str:
    ref = finding.ref
    key = "\x00".join((finding.code.value, ref.group, ref.kind, ref.namespace, ref.name))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
