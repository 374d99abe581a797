"""The markdown report: a table of findings, then each one's evidence and fix."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gate.engine.context import Context
from gate.engine.verdict import Decision
from gate.model.findings import ActionKind, Finding, Runner
from gate.report.common import exit_hint, label, summarize, visible, where

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&#!])")


def render_markdown(
    decision: Decision,
    *,
    context: Context,
    base: str,
    head: str,
    details: bool = True,
    max_rows: int | None = None,
) -> str:
    """A heading with the verdict, a table of findings, then each finding in detail."""
    verdict = decision.verdict
    out = [
        f"## prune-gate: {verdict.value.upper()}",
        "",
        f"{_md(_capitalized(summarize(decision)))}.",
        "",
        f"context `{context.value}` · base {_md_code(label(base))} · head {_md_code(label(head))}",
    ]
    findings = decision.findings
    if findings:
        shown = findings if max_rows is None else findings[:max_rows]
        out += ["", "| severity | code | object | where |", "| --- | --- | --- | --- |"]
        out += [_md_row(f) for f in shown]
        if len(shown) < len(findings):
            out += ["", f"{len(findings) - len(shown)} more finding(s): see the job log."]
        if details:
            for f in findings:
                out += ["", *_md_details(f)]
        else:
            out += ["", "Details left out to fit GitHub's step summary size: see the job log."]
    if decision.exempted:
        out += ["", f"<details><summary>{len(decision.exempted)} exempted by policy</summary>", ""]
        for ex in decision.exempted:
            f = ex.finding
            src = f" ({_md_code(where(f))})" if where(f) else ""
            out.append(
                f"- `{f.code.value}` {_md(f.ref.display())}{src}: {_md(ex.reason)} "
                f"(expires {ex.expires.isoformat()})"
            )
        out += ["", "</details>"]
    if decision.notes:
        out += ["", *(f"- note: {_md(n)}" for n in decision.notes)]
    if decision.standing:
        n = len(decision.standing)
        summary = f"{n} standing warning(s): present on base too, not counted in the verdict"
        out += ["", f"<details><summary>{summary}</summary>", ""]
        out += [
            f"- `{f.code.value}` {_md(f.ref.display())}: {_md(f.message)}"
            for f in decision.standing
        ]
        out += ["", "</details>"]
    out += ["", f"*{_md(exit_hint(verdict))}*"]
    return "\n".join(out)


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _md_row(f: Finding) -> str:
    cells = [
        f.severity.value,
        f"`{f.code.value}`",
        _md(f.ref.display()),
        _md_code(where(f)) if where(f) else "",
    ]
    return "| " + " | ".join(cells) + " |"


def _md_details(f: Finding) -> list[str]:
    src = f" ({_md_code(where(f))})" if where(f) else ""
    out = [
        f"### {f.severity.value} `{f.code.value}` {_md(f.ref.display())}{src}",
        "",
        _md(f.message),
    ]
    if f.evidence:
        out += ["", *(f"- {_md(e)}" for e in f.evidence)]
    if f.remediation:
        out += ["", f"**fix:** {_md(f.remediation)}"]
    if f.actions:
        out.append("")
    for step, action in enumerate(f.actions, 1):
        who = RUNNER_WORDS[action.runner]
        if action.kind is ActionKind.COMMAND:
            out += [f"{step}. {who}, run:", *_md_block(action.text, indent="   ")]
        else:
            at = f" ({_md_code(str(action.source))})" if action.source else ""
            out.append(f"{step}. {who}: {_md(action.text)}{at}")
    return out


#: Who does a step, as the markdown report says it.
RUNNER_WORDS: dict[Runner, str] = {
    Runner.CI: "in the repository",
    Runner.KUBECTL: "at kubectl",
}


def _md_block(command: str, indent: str = "") -> list[str]:
    fence = "```"
    while fence in command:
        fence += "`"
    return [f"{indent}{fence}sh", f"{indent}{visible(command)}", f"{indent}{fence}"]


def _md(text: str) -> str:
    """Inline markdown from a message: code spans kept, everything else escaped, one line."""
    parts: Sequence[str] = visible(text).split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: the last one is text
        parts = [*parts[:-2], parts[-2] + "\x00" + parts[-1]]
    out: list[str] = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(_md_code(part))
        else:
            out.append(_MD_SPECIAL.sub(r"\\\1", part).replace("\x00", "\\`"))
    return "".join(out)


def _md_code(text: str) -> str:
    """A code span; pipes escaped so it can sit in a table cell."""
    text = visible(text).replace("`", "'").replace("|", "\\|")
    return f"`{text}`" if text else ""
