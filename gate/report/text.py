"""The text report: for a person at a terminal or reading a CI log."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gate.engine.context import Context
from gate.engine.plantree import PlanTree
from gate.engine.verdict import Decision, Exempted
from gate.model.findings import Finding
from gate.model.refs import ObjectRef
from gate.report.common import exit_hint, verdict_rest, visible, where
from gate.report.tree import plan_text

_COLOR: dict[str, str] = {
    "block": "\x1b[1;31m",
    "defer": "\x1b[1;33m",
    "warn": "\x1b[33m",
    "allow": "\x1b[1;32m",
    "off": "\x1b[2m",
    "code": "\x1b[1m",
    "fix": "\x1b[36m",
    "dim": "\x1b[2m",
}


_RESET = "\x1b[0m"


def render_text(
    decision: Decision,
    *,
    context: Context,
    base: str,
    head: str,
    color: bool = False,
    show_standing: bool = False,
    tree: PlanTree | None = None,
) -> str:
    """The report for a terminal or a CI log: verdict first, then the prune plan as a tree, then
    one block per object with each finding's message, the evidence (each line once) and the
    fixes; standing warnings counted in one line, listed with `show_standing`."""
    paint = painter(color)
    verdict = decision.verdict
    lines = [
        paint(verdict.value, verdict.value.upper())
        + ": "
        + verdict_rest(decision, context=context, base=base, head=head)
    ]
    if tree is not None and not tree.empty:
        lines.append("")
        lines.extend(plan_text(tree, paint))
    for group in by_object(decision.findings):
        lines.append("")
        lines.extend(object_block(group, paint))
    if decision.exempted:
        lines.append("")
        lines.append(f"exempted by policy ({len(decision.exempted)}):")
        lines.extend(f"  {exempted_text(ex, paint)}" for ex in decision.exempted)
    if decision.notes:
        lines.append("")
        lines.extend(f"note: {visible(n)}" for n in decision.notes)
    if decision.standing:
        lines.append("")
        lines.append(standing_line(len(decision.standing), show_standing))
        if show_standing:
            lines.extend(
                f"  {paint('code', f.code.value)} {visible(f.ref.display())}: {visible(f.message)}"
                for f in decision.standing
            )
    lines.append("")
    lines.append(paint("dim", exit_hint(decision)))
    return "\n".join(lines)


def object_block(findings: list[Finding], paint: Callable[[str, str], str]) -> list[str]:
    """One object's findings: its strongest severity, the object and where, then each code's
    message (its own severity when weaker), the evidence not yet said, and its fix."""
    first = findings[0]
    src = where(first)
    severity = first.severity.value
    header = f"{paint(severity, severity.ljust(5))} {visible(first.ref.display())}"
    lines = [header + (" " + paint("dim", f"({visible(src)})") if src else "")]
    said: set[str] = set()
    for f in findings:
        weaker = f" ({f.severity.value})" if f.severity is not first.severity else ""
        lines.append(f"  {paint('code', f.code.value)}{weaker}: {visible(f.message)}")
        for e in f.evidence:
            if e not in said:
                said.add(e)
                lines.append(f"  - {visible(e)}")
        if f.remediation:
            lines.append(f"  {paint('fix', 'fix:')} {visible(f.remediation)}")
    return lines


def by_object(findings: Iterable[Finding]) -> list[list[Finding]]:
    """Findings grouped per object, objects in the order of their first finding (the decision's
    order: strongest first), each object's findings in that order too."""
    groups: dict[ObjectRef, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.ref, []).append(f)
    return list(groups.values())


def standing_line(count: int, shown: bool) -> str:
    """The one line that counts the standing warnings."""
    how = ":" if shown else " (--show-standing lists them)"
    return (
        f"standing ({count}): warning(s) present on base too, the same whatever this change "
        f"does, not counted in the verdict{how}"
    )


def exempted_text(ex: Exempted, paint: Callable[[str, str], str]) -> str:
    f = ex.finding
    src = where(f)
    at = f" ({visible(src)})" if src else ""
    return (
        f"{paint('code', f.code.value)} {visible(f.ref.display())}{at}: "
        f"{visible(ex.reason)} (expires {ex.expires.isoformat()})"
    )


def painter(color: bool) -> Callable[[str, str], str]:
    def paint(style: str, text: str) -> str:
        return f"{_COLOR[style]}{text}{_RESET}" if color else text

    return paint
