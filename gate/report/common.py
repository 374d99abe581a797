"""What every rendering shares: the verdict in words, where a finding is, and making
untrusted text inert.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gate.engine.context import Context
from gate.engine.placement import FILE_LEVEL, RemovedFrom
from gate.engine.verdict import Decision, Verdict
from gate.model.findings import Finding, Runner, Severity, command

#: What the exit code means, per verdict: the last line of the text report.
EXIT_HINT: dict[Verdict, str] = {
    Verdict.BLOCK: "do not deploy this candidate; apply the fixes above, or exempt the object "
    "in prune-gate.yaml with a reason and an expiry",
    Verdict.DEFER: "do not deploy this candidate as it is; deploy it with these objects kept "
    "exactly as in base, so the deletion waits for the merged deploy",
    Verdict.WARN: "the deploy may go ahead; read the warnings above",
    Verdict.ALLOW: "nothing here loses data or wedges a deploy",
}


@dataclass(frozen=True)
class DeferredDecision(Decision):
    """A `defer` decision once `gate check --defer-to` has written the candidate with every
    deferred deletion held back into `directory` (what was kept and why: `record`): the deploy
    goes ahead there, so the exit code is 0, and a report says "deploy DIR", not "run
    --defer-to"."""

    directory: str = ""
    record: str = ""


def deploy_command(directory: str) -> str:
    """How the speculative deploy applies the artifact: as it is, without pruning."""
    return (
        "kubectl apply --server-side --field-manager=merge-queue --force-conflicts "
        f"-R -f {directory}"
    )


def deferred_into(decision: Decision, directory: str, record: str) -> DeferredDecision:
    """`decision` as it stands once its deferred deletions are held back in `directory`: each
    `defer` finding's fix is to deploy that directory (done by `--defer-to`), not to run
    `--defer-to`."""
    fix = (
        f"deferred: {directory} is this candidate with the deletion held back, kept exactly as "
        f"base declares it (what was kept and why: {record}); deploy {directory} instead of "
        f"the candidate, without pruning: {deploy_command(directory)}; only the merged deploy, "
        "after these checks run again, deletes it"
    )
    step = command(deploy_command(directory), Runner.CI)
    findings = tuple(
        replace(f, remediation=fix, actions=(step,)) if f.severity is Severity.DEFER else f
        for f in decision.findings
    )
    return DeferredDecision(
        decision.verdict,
        findings,
        decision.exempted,
        decision.notes,
        decision.standing,
        directory=directory,
        record=record,
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


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
    rest = verdict_rest(decision, context=context, base=base, head=head)
    return f"{decision.verdict.value.upper()}: {rest}"


def verdict_rest(decision: Decision, *, context: Context, base: str, head: str) -> str:
    return (
        f"{summarize(decision)} (context {context.value}, base {label(base)}, head {label(head)})"
    )


def exit_hint(outcome: Verdict | Decision) -> str:
    """`exit 1 (block): do not deploy ...`: what the exit code means and what to do. Given the
    decision, it also says what `--defer-to` did: `exit 0 (defer): deferred into DIR: ...`."""
    if isinstance(outcome, DeferredDecision):
        where = visible(outcome.directory)
        return (
            f"exit 0 (defer): deferred into {where}: deploy {where} instead of this candidate, "
            "without pruning; it keeps these objects exactly as in base, so only the merged "
            "deploy deletes them, after these checks run again"
        )
    verdict = outcome.verdict if isinstance(outcome, Decision) else outcome
    return f"exit {verdict.exit_code} ({verdict.value}): {EXIT_HINT[verdict]}"


def exit_code(decision: Decision) -> int:
    """The exit code `gate check` ends with: the verdict's, or 0 once `--defer-to` has held
    every deferred deletion back (`DeferredDecision`)."""
    return 0 if isinstance(decision, DeferredDecision) else decision.verdict.exit_code


def where(finding: Finding) -> str:
    """`path:line` of the object (in base when it is there), or `` when unknown; then where the
    candidate shows it, when that is elsewhere: `a.yaml:12, head a.yaml:9`."""
    src = str(finding.source) if finding.source is not None else ""
    head = head_note(finding)
    return f"{src}, {head}" if src and head else src


def head_note(finding: Finding) -> str:
    """Where the candidate shows the object, when that is not where `source` says (else ``):
    `head a.yaml:9` (its own first line there), `removed from a.yaml` (the candidate keeps the
    file, not the object), or `removed with its file`."""
    head, src = finding.head_source, finding.source
    if head is None or head == src:
        return ""
    if isinstance(head, RemovedFrom):
        return f"removed from {head.path}"
    if head.line == FILE_LEVEL:
        return "removed with its file"
    return f"head {head}"


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _verb(n: int, verb: str) -> str:
    return f"{verb}s" if n == 1 else verb


def label(revision: str) -> str:
    """A full SHA shortened to 12 characters (what `git log --oneline` would show, and more)."""
    revision = visible(revision)
    return revision[:12] if _SHA.fullmatch(revision) else revision


def visible(text: str) -> str:
    """Show control characters escaped (`\\n`, `\\x1b`): a message stays on one line, inert."""
    return _CONTROL.sub(_escape_control, text)


def _escape_control(m: re.Match[str]) -> str:
    ch = m.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return named.get(ch, f"\\x{ord(ch):02x}")


def plain_line(text: str) -> str:
    """A log line that cannot be read as a workflow command (one line: breaks shown escaped)."""
    return _inert_line(visible(text))


#: The runner's legacy command prefix, recognised anywhere in a line (`::` only at its start).
LEGACY_COMMAND = "##["


def inert(text: str) -> str:
    """`text` for a log GitHub's runner parses (stdout and stderr alike): line breaks kept, other
    control characters shown escaped, and no line readable as a workflow command.

    The runner trims leading whitespace before looking for `::`, so a space is no guard: such a
    line is prefixed with `| `; the legacy `##[` is matched anywhere, so it is broken up.
    """
    return "\n".join(_inert_line(visible(line)) for line in text.split("\n"))


def _inert_line(line: str) -> str:
    line = line.replace(LEGACY_COMMAND, "## [")
    return f"| {line}" if line.lstrip().startswith("::") else line
