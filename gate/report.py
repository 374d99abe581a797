"""Reports: one decision, four renderings (text, json, github, markdown).

A report is read by a person paged at 3 a.m., by a script keying on codes, and by GitHub, which
turns workflow commands into annotations on the file and line of the object. All four say the same
thing in the same order (the order `gate.verdict.decide` chose), so they can be compared line by
line. Pure functions: they return strings and never print, read the environment or the clock; the
CLI decides where the text goes and whether the terminal takes colour.

Everything a manifest can put into a message (annotation values, paths) is untrusted: control
characters are shown escaped in text and markdown, so a value cannot move the cursor or split a
line, and GitHub's escaping rules keep it from starting a workflow command of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gate.check import CheckResult
from gate.context import Context
from gate.findings import Finding, Severity
from gate.verdict import Decision, Exempted, Verdict

#: The formats `render_report` knows, the default first.
FORMATS = ("text", "json", "github", "markdown")

#: Version of the JSON report's shape (`gate/schemas/report.schema.json`). It changes only when a
#: field is removed or changes meaning; new fields may appear without a bump.
SCHEMA_VERSION = 1

#: Annotations of one level GitHub shows per step; the rest stay in the log only.
ANNOTATIONS_PER_LEVEL = 10

#: Bytes a step summary may take: GitHub refuses a summary over 1 MiB per step.
SUMMARY_BUDGET = 1_000_000

#: GitHub annotation level per severity: the three levels keep the three strengths apart, so
#: the level alone says whether a finding failed the check (error, warning) or only informs.
ANNOTATION_LEVEL: dict[Severity, str] = {
    Severity.BLOCK: "error",
    Severity.DEFER: "warning",
    Severity.WARN: "notice",
    Severity.OFF: "notice",
}

#: What the exit code means, per verdict: the last line of the text report.
EXIT_HINT: dict[Verdict, str] = {
    Verdict.BLOCK: "do not deploy this candidate; apply the fixes above, or exempt the object "
    "in prune-gate.yaml with a reason and an expiry",
    Verdict.DEFER: "do not deploy this candidate as it is; deploy it with these objects kept "
    "exactly as in base, so the deletion waits for the merged deploy",
    Verdict.WARN: "the deploy may go ahead; read the warnings above",
    Verdict.ALLOW: "nothing here loses data or wedges a deploy",
}

#: Programs whose invocations in a remediation are shown as commands (code blocks in markdown).
COMMAND_PROGRAMS = ("kubectl", "flux", "argocd", "helm", "kapp", "gate", "git")

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

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_COMMAND = re.compile(
    r"(?:^|(?<=: )|(?<=`))((?:" + "|".join(COMMAND_PROGRAMS) + r") [^;`\n]+)",
)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&#!])")


def render_report(
    result: CheckResult,
    fmt: str,
    *,
    context: Context,
    base: str,
    head: str,
    color: bool = False,
) -> str:
    """Render the decision in `fmt` (one of `FORMATS`), without a trailing newline.

    `base` and `head` label the revisions compared (a SHA, a ref, a path); `color` adds ANSI
    colour to the text format only, and the caller decides it (a TTY, no NO_COLOR).
    """
    decision = result.decision
    if fmt == "text":
        text = render_text(decision, context=context, base=base, head=head, color=color)
        return text if color else inert(text)  # colour is for a terminal, never a CI log
    if fmt == "json":
        return render_json(decision, context=context, base=base, head=head)
    if fmt == "github":
        return render_github(decision, context=context, base=base, head=head)
    if fmt == "markdown":
        return inert(render_markdown(decision, context=context, base=base, head=head))
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def step_summary(result: CheckResult, *, context: Context, base: str, head: str) -> str:
    """Markdown for `$GITHUB_STEP_SUMMARY`, ending in a newline and within GitHub's size cap.

    Annotations are capped at ten per level, so the summary is where every finding is listed;
    when even the summary would be too big, details and then table rows are cut, and it says so.
    """
    decision = result.decision
    text = render_markdown(decision, context=context, base=base, head=head)
    if _size(text) <= SUMMARY_BUDGET:
        return text + "\n"
    rows = len(decision.findings)
    while True:
        text = render_markdown(
            decision, context=context, base=base, head=head, details=False, max_rows=rows
        )
        if _size(text) <= SUMMARY_BUDGET or rows == 0:
            return text + "\n"
        rows //= 2


# --- the verdict in words ---------------------------------------------------------------------


def count(findings: Iterable[Finding], severity: Severity) -> int:
    """How many findings have this severity."""
    return sum(1 for f in findings if f.severity is severity)


def summarize(decision: Decision) -> str:
    """The verdict in one clause: `2 findings block this deploy, 1 more defers a deletion ...`."""
    found = decision.findings
    blocks, defers, warns = (
        count(found, s) for s in (Severity.BLOCK, Severity.DEFER, Severity.WARN)
    )
    parts: list[str] = []
    if blocks:
        parts.append(f"{_n(blocks, 'finding')} {_verb(blocks, 'block')} this deploy")
    if defers:
        who = f"{defers} more" if blocks else _n(defers, "finding")
        parts.append(f"{who} {_verb(defers, 'defer')} a deletion to the merged deploy")
    if warns:
        parts.append(_n(warns, "warning"))
    if not blocks and not defers:
        parts.append("nothing blocks this deploy")
    if decision.exempted:
        parts.append(f"{len(decision.exempted)} exempted by policy")
    return ", ".join(parts)


def verdict_line(decision: Decision, *, context: Context, base: str, head: str) -> str:
    """`BLOCK: 2 findings block this deploy (context speculative, base abc1234, head def5678)`."""
    rest = _verdict_rest(decision, context=context, base=base, head=head)
    return f"{decision.verdict.value.upper()}: {rest}"


def _verdict_rest(decision: Decision, *, context: Context, base: str, head: str) -> str:
    return (
        f"{summarize(decision)} (context {context.value}, base {_label(base)}, head {_label(head)})"
    )


def exit_hint(verdict: Verdict) -> str:
    """`exit 1 (block): do not deploy ...`: what the exit code means and what to do."""
    return f"exit {verdict.exit_code} ({verdict.value}): {EXIT_HINT[verdict]}"


def where(finding: Finding) -> str:
    """`path:line` of the object (in base when it is there), or `` when unknown."""
    return str(finding.source) if finding.source is not None else ""


def commands_in(remediation: str) -> list[str]:
    """Commands a person can run, found in a remediation (`kubectl delete -n app pvc/data`).

    A command starts the text, follows `: ` or opens a code span, and names one of
    `COMMAND_PROGRAMS`; it ends at `;`, a backtick or the end, without a final full stop.
    """
    out: list[str] = []
    for m in _COMMAND.finditer(remediation):
        cmd = m.group(1).strip().rstrip(".,")
        if cmd not in out:
            out.append(cmd)
    return out


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _verb(n: int, verb: str) -> str:
    return f"{verb}s" if n == 1 else verb


def _label(revision: str) -> str:
    """A full SHA shortened to 12 characters (what `git log --oneline` would show, and more)."""
    revision = _visible(revision)
    return revision[:12] if _SHA.fullmatch(revision) else revision


def _visible(text: str) -> str:
    """Show control characters escaped (`\\n`, `\\x1b`): a message stays on one line, inert."""
    return _CONTROL.sub(_escape_control, text)


def _escape_control(m: re.Match[str]) -> str:
    ch = m.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return named.get(ch, f"\\x{ord(ch):02x}")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


# --- text -------------------------------------------------------------------------------------


def render_text(
    decision: Decision, *, context: Context, base: str, head: str, color: bool = False
) -> str:
    """The report for a terminal or a CI log: verdict first, then each finding and its fix."""
    paint = _painter(color)
    verdict = decision.verdict
    lines = [
        paint(verdict.value, verdict.value.upper())
        + ": "
        + _verdict_rest(decision, context=context, base=base, head=head)
    ]
    for f in decision.findings:
        lines.append("")
        src = where(f)
        header = (
            f"{paint(f.severity.value, f.severity.value.ljust(5))} {paint('code', f.code.value)} "
            f"{_visible(f.ref.display())}"
        )
        lines.append(header + (" " + paint("dim", f"({_visible(src)})") if src else ""))
        lines.append(f"  {_visible(f.message)}")
        lines.extend(f"  - {_visible(e)}" for e in f.evidence)
        if f.remediation:
            lines.append(f"  {paint('fix', 'fix:')} {_visible(f.remediation)}")
    if decision.exempted:
        lines.append("")
        lines.append(f"exempted by policy ({len(decision.exempted)}):")
        lines.extend(f"  {_exempted_text(ex, paint)}" for ex in decision.exempted)
    lines.append("")
    lines.append(paint("dim", exit_hint(decision.verdict)))
    return "\n".join(lines)


def _exempted_text(ex: Exempted, paint: Callable[[str, str], str]) -> str:
    f = ex.finding
    src = where(f)
    at = f" ({_visible(src)})" if src else ""
    return (
        f"{paint('code', f.code.value)} {_visible(f.ref.display())}{at}: "
        f"{_visible(ex.reason)} (expires {ex.expires.isoformat()})"
    )


def _painter(color: bool) -> Callable[[str, str], str]:
    def paint(style: str, text: str) -> str:
        return f"{_COLOR[style]}{text}{_RESET}" if color else text

    return paint


# --- json -------------------------------------------------------------------------------------


def report_data(decision: Decision, *, context: Context, base: str, head: str) -> dict[str, Any]:
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
        "source": {"path": source.path, "line": source.line} if source is not None else None,
    }


def render_json(decision: Decision, *, context: Context, base: str, head: str) -> str:
    """The JSON report: two-space indent, keys in documented order, ASCII only."""
    text = json.dumps(report_data(decision, context=context, base=base, head=head), indent=2)
    # `##[` can only occur inside a string here; `\u005b` is the same `[` to a JSON reader.
    return text.replace(_LEGACY_COMMAND, "##\\u005b")


# --- github -----------------------------------------------------------------------------------


def escape_data(text: str) -> str:
    """Escape a workflow command's message, as @actions/core does (`%`, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value: as data, plus `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding) -> str:
    """`::error file=PATH,line=N,title=CODE Kind ns/name::message%0A- evidence%0Afix: ...`."""
    props: list[tuple[str, str]] = []
    src = finding.source
    if src is not None and not src.path.startswith("<"):  # `<stdin>` is no file in the repo
        path = src.path.removeprefix("./")
        props += [("file", path), ("line", str(src.line))]
    props.append(("title", f"{finding.code.value} {finding.ref.display()}"))
    body = [finding.message, *(f"- {e}" for e in finding.evidence)]
    if finding.remediation:
        body.append(f"fix: {finding.remediation}")
    level = ANNOTATION_LEVEL[finding.severity]
    # Control characters from manifests are shown escaped first, so the only line breaks in the
    # annotation are the ones between its parts, and no escape sequence reaches the log viewer.
    joined = ",".join(f"{k}={escape_property(_visible(v))}" for k, v in props)
    return f"::{level} {joined}::{escape_data(chr(10).join(_visible(b) for b in body))}"


def render_github(decision: Decision, *, context: Context, base: str, head: str) -> str:
    """One annotation per finding, then the verdict line (and a note if GitHub will hide some)."""
    lines = [annotation(f) for f in decision.findings]
    lines.append(_plain_line(verdict_line(decision, context=context, base=base, head=head)))
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
        lines.append(_plain_line(f"exempted: {_exempted_text(ex, _painter(False))}"))
    lines.append(exit_hint(decision.verdict))
    return "\n".join(lines)


def _plain_line(text: str) -> str:
    """A log line that cannot be read as a workflow command (one line: breaks shown escaped)."""
    return _inert_line(_visible(text))


#: The runner's legacy command prefix, recognised anywhere in a line (`::` only at its start).
_LEGACY_COMMAND = "##["


def inert(text: str) -> str:
    """`text` for a log GitHub's runner parses (stdout and stderr alike): line breaks kept, other
    control characters shown escaped, and no line readable as a workflow command.

    The runner trims leading whitespace before looking for `::`, so a space is no guard: such a
    line is prefixed with `| `; the legacy `##[` is matched anywhere, so it is broken up.
    """
    return "\n".join(_inert_line(_visible(line)) for line in text.split("\n"))


def _inert_line(line: str) -> str:
    line = line.replace(_LEGACY_COMMAND, "## [")
    return f"| {line}" if line.lstrip().startswith("::") else line


# --- markdown ---------------------------------------------------------------------------------


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
        f"context `{context.value}` · base {_md_code(_label(base))} · "
        f"head {_md_code(_label(head))}",
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
        for cmd in commands_in(f.remediation):
            out += ["", *_md_block(cmd)]
    return out


def _md_block(command: str) -> list[str]:
    fence = "```"
    while fence in command:
        fence += "`"
    return [f"{fence}sh", _visible(command), fence]


def _md(text: str) -> str:
    """Inline markdown from a message: code spans kept, everything else escaped, one line."""
    parts: Sequence[str] = _visible(text).split("`")
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
    text = _visible(text).replace("`", "'").replace("|", "\\|")
    return f"`{text}`" if text else ""
