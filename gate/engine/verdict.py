"""Findings -> verdict -> exit code, decided in this one place.

Exit codes: 0 allow or warn; 1 block or defer (by policy); 2 could not decide (raised as a
`GateError` anywhere, mapped by the CLI); 3 internal error (any other exception: a bug).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.model.findings import Finding, Severity
from gate.model.refs import ObjectRef

EXIT_PASS = 0
EXIT_POLICY = 1
EXIT_UNDECIDED = 2
#: An exception no code path expected: a bug, never a verdict (0 or 1) nor "could not decide".
EXIT_BUG = 3


class Verdict(StrEnum):
    """The outcome of one decision, strongest first."""

    BLOCK = "block"
    DEFER = "defer"
    WARN = "warn"
    ALLOW = "allow"

    @property
    def exit_code(self) -> int:
        """0 for allow and warn, 1 for block and defer."""
        return EXIT_POLICY if self in (Verdict.BLOCK, Verdict.DEFER) else EXIT_PASS


@dataclass(frozen=True)
class Exempted:
    """A finding an exemption silenced, kept for the report."""

    finding: Finding
    reason: str
    expires: dt.date


@dataclass(frozen=True)
class Decision:
    """The verdict with the findings behind it (severity applied) and what was exempted."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    exempted: tuple[Exempted, ...] = ()
    #: What the decision was made without, said in every report (a remote resource read, not
    #: fetched): not a finding, nothing to fix.
    notes: tuple[str, ...] = ()
    #: Warnings present identically on base (same code, object and message): they stand
    #: whatever the candidate does, so they are reported apart and do not make the verdict.
    standing: tuple[Finding, ...] = ()


def apply_policy(
    findings: Iterable[Finding],
    policy: Policy,
    context: Context,
    today: dt.date,
    labels_of: Mapping[ObjectRef, dict[str, str]] | None = None,
) -> tuple[list[Finding], list[Exempted]]:
    """Give each finding its severity for this context; drop `off` ones and exempted ones."""
    kept: list[Finding] = []
    exempted: list[Exempted] = []
    for f in findings:
        severity = policy.severity_for(f.code, context, f.suggested)
        if severity is Severity.OFF:
            continue
        labels = (labels_of or {}).get(f.ref, {})
        ex = policy.exemption_for(f.ref, labels, f.code, today)
        f = replace(f, severity=severity)
        if ex is None:
            old = policy.expired_exemption_for(f.ref, labels, f.code, today)
            if old is not None:
                note = (
                    f"an exemption expired on {old.expires.isoformat()} ({old.reason}): fix "
                    "the finding, or renew the exemption in the policy with a new expiry"
                )
                f = replace(f, evidence=(*f.evidence, note))
        if ex is not None:
            exempted.append(Exempted(f, ex.reason, ex.expires))
        else:
            kept.append(f)
    return kept, exempted


def decide(
    findings: Iterable[Finding],
    exempted: Iterable[Exempted] = (),
    standing: Iterable[Finding] = (),
) -> Decision:
    """block if any finding blocks, else defer if any defers, else warn if any, else allow
    (`standing` warnings are kept apart: they weigh nothing)."""
    found = tuple(findings)
    severities = {f.severity for f in found}
    if Severity.BLOCK in severities:
        verdict = Verdict.BLOCK
    elif Severity.DEFER in severities:
        verdict = Verdict.DEFER
    elif Severity.WARN in severities:
        verdict = Verdict.WARN
    else:
        verdict = Verdict.ALLOW
    order = {Severity.BLOCK: 0, Severity.DEFER: 1, Severity.WARN: 2, Severity.OFF: 3}
    ordered = tuple(sorted(found, key=lambda f: (order[f.severity], f.ref, f.code.value)))
    return Decision(verdict, ordered, tuple(exempted), standing=tuple(standing))
