"""GitHub Actions: workflow-command annotations on the object's file and line in the candidate
(`Finding.head_source`, else where base declares it), and the step summary.
"""

from __future__ import annotations

from gate.engine.check import CheckResult
from gate.engine.context import Context
from gate.engine.placement import FILE_LEVEL, RemovedFrom
from gate.engine.plantree import build_plan_tree
from gate.engine.verdict import Decision
from gate.model.findings import Finding, Severity
from gate.report.common import exit_hint, plain_line, verdict_line, visible
from gate.report.markdown import render_markdown
from gate.report.text import exempted_text, painter
from gate.report.tree import SourceLinks

#: Annotations of one level GitHub shows per step; the rest stay in the log only.
ANNOTATIONS_PER_LEVEL = 10


#: Bytes a step summary may take: GitHub refuses a summary over 1 MiB per step.
SUMMARY_BUDGET = 1_000_000


#: GitHub annotation level per severity, in GitHub's own words: a block is an error (the
#: candidate must not deploy); a defer is a warning (the deletion must wait for the merged
#: deploy, and `--defer-to` lets the deploy go ahead without it); a warning is a warning (it
#: stops nothing, and a person should read it). What only informs (a severity set `off`) is a
#: notice. Whether the check failed is the verdict line's and the exit code's to say.
ANNOTATION_LEVEL: dict[Severity, str] = {
    Severity.BLOCK: "error",
    Severity.DEFER: "warning",
    Severity.WARN: "warning",
    Severity.OFF: "notice",
}


def step_summary(
    result: CheckResult, *, context: Context, base: str, head: str, links: SourceLinks | None = None
) -> str:
    """Markdown for `$GITHUB_STEP_SUMMARY`, ending in a newline and within GitHub's size cap.

    Annotations are capped at ten per level, so the summary is where every finding is listed;
    when even the summary would be too big, details and then table rows are cut, and it says so.
    """
    decision = result.decision
    tree = build_plan_tree(result)
    text = render_markdown(decision, context=context, base=base, head=head, tree=tree, links=links)
    if _size(text) <= SUMMARY_BUDGET:
        return text + "\n"
    rows = sum(1 for _ in tree.entries())
    while True:
        text = render_markdown(
            decision,
            context=context,
            base=base,
            head=head,
            tree=tree,
            links=links,
            details=False,
            max_rows=rows,
        )
        if _size(text) <= SUMMARY_BUDGET or rows == 0:
            return text + "\n"
        rows //= 2


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def escape_data(text: str) -> str:
    """Escape a workflow command's message, as @actions/core does (`%`, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value: as data, plus `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding) -> str:
    """`::error file=PATH,line=N,title=CODE Kind ns/name::message%0A- evidence%0Afix: ...`."""
    props: list[tuple[str, str]] = []
    # The candidate's file and line when known: GitHub shows annotations on the head commit.
    src = finding.head_source or finding.source
    if src is not None and not src.path.startswith("<"):  # `<stdin>` is no file in the repo
        props.append(("file", src.path.removeprefix("./")))
        if src.line != FILE_LEVEL:
            props.append(("line", str(src.line)))
    props.append(("title", f"{finding.code.value} {finding.ref.display()}"))
    body = [finding.message, *_was_at(finding), *(f"- {e}" for e in finding.evidence)]
    if finding.remediation:
        body.append(f"fix: {finding.remediation}")
    level = ANNOTATION_LEVEL[finding.severity]
    # Control characters from manifests are shown escaped first, so the only line breaks in the
    # annotation are the ones between its parts, and no escape sequence reaches the log viewer.
    joined = ",".join(f"{k}={escape_property(visible(v))}" for k, v in props)
    return f"::{level} {joined}::{escape_data(chr(10).join(visible(b) for b in body))}"


def _was_at(finding: Finding) -> list[str]:
    """Where base declared the object, when the annotation stands elsewhere."""
    head, src = finding.head_source, finding.source
    if head is None or src is None or head == src:
        return []
    if isinstance(head, RemovedFrom):
        return [f"was at {src} in base (removed from this file)"]
    if head.line == FILE_LEVEL:
        return [f"was at {src} (removed with its file)"]
    return [f"was at {src} in base"]


def render_github(decision: Decision, *, context: Context, base: str, head: str) -> str:
    """One annotation per finding, then the verdict line (and a note if GitHub will hide some)."""
    lines = [annotation(f) for f in decision.findings]
    lines.append(plain_line(verdict_line(decision, context=context, base=base, head=head)))
    per_level: dict[str, int] = {}
    for f in decision.findings:
        level = ANNOTATION_LEVEL[f.severity]
        per_level[level] = per_level.get(level, 0) + 1
    over = {lvl: n for lvl, n in per_level.items() if n > ANNOTATIONS_PER_LEVEL}
    if over:
        counts = ", ".join(f"{n} {lvl}" for lvl, n in sorted(over.items()))
        lines.append(
            f"GitHub shows at most {ANNOTATIONS_PER_LEVEL} annotations of each level per step "
            f"({counts} here): the step summary and this log list every finding"
        )
    for ex in decision.exempted:
        lines.append(plain_line(f"exempted: {exempted_text(ex, painter(False))}"))
    lines.extend(plain_line(f"note: {n}") for n in decision.notes)
    lines.append(exit_hint(decision))
    return "\n".join(lines)
