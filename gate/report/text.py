"""The text report: for a person at a terminal or reading a CI log."""

from __future__ import annotations

from collections.abc import Callable

from gate.engine.context import Context
from gate.engine.verdict import Decision, Exempted
from gate.report.common import exit_hint, verdict_rest, visible, where

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
) -> str:
    """The report for a terminal or a CI log: verdict first, then each finding and its fix;
    standing warnings counted in one line, listed with `show_standing`."""
    paint = painter(color)
    verdict = decision.verdict
    lines = [
        paint(verdict.value, verdict.value.upper())
        + ": "
        + verdict_rest(decision, context=context, base=base, head=head)
    ]
    for f in decision.findings:
        lines.append("")
        src = where(f)
        header = (
            f"{paint(f.severity.value, f.severity.value.ljust(5))} {paint('code', f.code.value)} "
            f"{visible(f.ref.display())}"
        )
        lines.append(header + (" " + paint("dim", f"({visible(src)})") if src else ""))
        lines.append(f"  {visible(f.message)}")
        lines.extend(f"  - {visible(e)}" for e in f.evidence)
        if f.remediation:
            lines.append(f"  {paint('fix', 'fix:')} {visible(f.remediation)}")
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
    lines.append(paint("dim", exit_hint(decision.verdict)))
    return "\n".join(lines)


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
