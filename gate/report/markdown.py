"""The markdown report (a pull request comment, a step summary): the verdict, the prune plan as
nested lists, then one collapsible block per object."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gate.engine.context import Context
from gate.engine.plantree import PlanTree
from gate.engine.verdict import Decision
from gate.model.findings import ActionKind, Finding, Runner
from gate.report.common import exit_hint, label, summarize, visible, where
from gate.report.text import by_object
from gate.report.tree import SourceLinks, plan_markdown, plan_summary, source_link

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&#!])")


def render_markdown(
    decision: Decision,
    *,
    context: Context,
    base: str,
    head: str,
    tree: PlanTree | None = None,
    links: SourceLinks | None = None,
    details: bool = True,
    max_rows: int | None = None,
) -> str:
    """A heading with the verdict, the prune plan as nested lists (what the deploy deletes,
    force-replaces and orphans, each object's verdict, linked to its lines when `links` says
    where the revisions are), then one collapsible block per object with its findings' evidence
    and fixes. `details=False` and `max_rows` shrink it to fit a size cap."""
    verdict = decision.verdict
    out = [
        f"## prune-gate: {verdict.value.upper()}",
        "",
        f"{_md(_capitalized(summarize(decision)))}.",
        "",
        f"context `{context.value}` · base {_md_code(label(base))} · head {_md_code(label(head))}",
    ]
    if tree is not None and not tree.empty:
        said = plan_summary(tree).removeprefix("plan: ")
        out += ["", f"### What this deploy does: {_md(said)}", ""]
        out += plan_markdown(tree, _md, _md_code, links, max_rows)
    findings = decision.findings
    if findings and details:
        out += ["", "### Findings, one block per object"]
        for group in by_object(findings):
            out += ["", *_md_object(group, links)]
    elif findings:
        out += ["", "Details left out to fit GitHub's size cap: see the job log."]
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
    out += ["", f"*{_md(exit_hint(decision))}*"]
    return "\n".join(out)


def _md_object(findings: list[Finding], links: SourceLinks | None) -> list[str]:
    """One object's findings in a collapsible block: summary line with its strongest severity,
    the object, its codes and where; inside, each code's message, evidence (each line once),
    fix and steps."""
    first = findings[0]
    codes = ", ".join(dict.fromkeys(f.code.value for f in findings))
    src = _md_where(first, links)
    at = f" ({src})" if src else ""
    out = [
        f"<details><summary><b>{first.severity.value}</b> {_md(first.ref.display())}: "
        f"{_md(codes)}</summary>",
        "",
        f"{_md(first.ref.display())}{at}",
    ]
    said: set[str] = set()
    for f in findings:
        weaker = f" ({f.severity.value})" if f.severity is not first.severity else ""
        out += ["", f"**`{f.code.value}`**{weaker}: {_md(f.message)}"]
        fresh = [e for e in f.evidence if e not in said]
        said.update(fresh)
        if fresh:
            out += ["", *(f"- {_md(e)}" for e in fresh)]
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
    out += ["", "</details>"]
    return out


def _md_where(f: Finding, links: SourceLinks | None) -> str:
    """Where the object is, linked to its line in base (and in the candidate) when known."""
    if links is None:
        return _md_code(where(f)) if where(f) else ""
    parts = []
    if f.source is not None:
        parts.append(source_link(f.source, links.base, links, _md_code))
    if f.head_source is not None and f.head_source != f.source:
        parts.append(source_link(f.head_source, links.head, links, _md_code, head=True))
    return ", ".join(parts)


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


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
