"""What the report says once `gate check --defer-to DIR` has written the candidate with its
deletions held back (issue 37): the deploy goes ahead there, exit 0, so neither the last line nor
a fix may still say "exit 1: do not deploy" or "run it with --defer-to". Through the real console
script, on the exact text."""

from __future__ import annotations

from pathlib import Path

from gate.engine.verdict import Decision, Verdict
from gate.model.findings import ActionKind, Code, Finding, Runner, Severity
from gate.model.refs import ObjectRef
from gate.report.common import DeferredDecision, deferred_into, exit_code, exit_hint
from tests.unit.helpers import claim, doc
from tests.unit.test_cli import gate
from tests.unit.test_defer_to import CONFIG, defer, record_of, retirement, write

DEFERRED_HINT = (
    "exit 0 (defer): deferred into {out}: deploy {out} instead of this candidate, without "
    "pruning; it keeps these objects exactly as in base, so only the merged deploy deletes "
    "them, after these checks run again"
)

DEFERRED_FIX = (
    "deferred: {out} is this candidate with the deletion held back, kept exactly as base "
    "declares it (what was kept and why: {record}); deploy {out} instead of the candidate, "
    "without pruning: kubectl apply --server-side --field-manager=merge-queue "
    "--force-conflicts -R -f {out}; only the merged deploy, after these checks run again, "
    "deletes it"
)

NOT_DEFERRED_HINT = (
    "exit 1 (defer): do not deploy this candidate as it is; deploy it with these objects kept "
    "exactly as in base, so the deletion waits for the merged deploy"
)


def test_the_github_report_ends_with_what_happened_exit_0(tmp_path: Path) -> None:
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    result = defer(base, head, out, "-o", "github")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip("\n").split("\n")
    assert lines[-1] == DEFERRED_HINT.format(out=out)
    (annotation,) = [line for line in lines if line.startswith("::")]
    assert annotation.startswith("::warning ")
    fix = DEFERRED_FIX.format(out=out, record=record_of(out))
    assert annotation.endswith("%0Afix: " + fix)
    assert "--defer-to" not in result.stdout  # it ran: nothing asks for it again


def test_the_text_report_fix_says_deploy_the_directory(tmp_path: Path) -> None:
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    result = defer(base, head, out)
    assert result.returncode == 0, result.stderr
    fix = DEFERRED_FIX.format(out=out, record=record_of(out))
    assert f"\n  fix: {fix}\n" in result.stdout
    assert "--defer-to" not in result.stdout
    assert f"defer: wrote {out}" in result.stderr


def test_the_text_and_markdown_reports_end_with_what_happened_exit_0(tmp_path: Path) -> None:
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    result = defer(base, head, out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n").split("\n")[-1] == DEFERRED_HINT.format(out=out)
    markdown = defer(base, head, tmp_path / "again", "-o", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    last = markdown.stdout.rstrip("\n").split("\n")[-1]
    assert last.startswith("*exit 0 (defer): deferred into ") and "exit 1" not in markdown.stdout


def test_without_defer_to_the_report_still_says_exit_1(tmp_path: Path) -> None:
    base, head = retirement(tmp_path)
    plain = gate(
        *("check", "--base-manifests", str(base), "--head-manifests", str(head)),
        *("--context", "speculative", "-o", "github"),
    )
    assert plain.returncode == 1
    assert plain.stdout.rstrip("\n").split("\n")[-1] == NOT_DEFERRED_HINT
    assert "--defer-to DIR" in plain.stdout  # the fix says how to defer it


def test_a_block_is_not_deferred_and_says_exit_1(tmp_path: Path) -> None:
    """A claim never retired blocks: nothing is written, and the report says so."""
    base = write(tmp_path / "base", {"app.yaml": doc(CONFIG, claim())})
    head = write(tmp_path / "head", {"app.yaml": CONFIG})
    out = tmp_path / "artifact"
    result = defer(base, head, out, "-o", "github")
    assert result.returncode == 1
    assert not out.exists()
    last = result.stdout.rstrip("\n").split("\n")[-1]
    assert last.startswith("exit 1 (block): do not deploy this candidate")


def _finding(severity: Severity) -> Finding:
    return Finding(
        Code.SPECULATIVE_PRUNE,
        ObjectRef("", "PersistentVolumeClaim", "app", "data"),
        "would delete it",
        remediation="run the same gate check with --defer-to DIR",
        severity=severity,
    )


def test_deferred_into_rewrites_only_the_deferred_findings() -> None:
    warn = _finding(Severity.WARN)
    decision = Decision(Verdict.DEFER, (_finding(Severity.DEFER), warn), notes=("a note",))
    deferred = deferred_into(decision, "out", "out.deferred.json")
    assert isinstance(deferred, DeferredDecision)
    assert deferred.verdict is Verdict.DEFER  # the verdict is what it was: a deletion waits
    assert deferred.notes == ("a note",)
    first, second = deferred.findings
    assert first.remediation == DEFERRED_FIX.format(out="out", record="out.deferred.json")
    (step,) = first.actions
    assert (step.kind, step.runner) == (ActionKind.COMMAND, Runner.CI)
    assert step.text.endswith("-R -f out")
    assert second == warn
    assert exit_hint(deferred) == DEFERRED_HINT.format(out="out")
    assert (exit_code(deferred), exit_code(decision)) == (0, 1)
    assert exit_hint(decision) == exit_hint(Verdict.DEFER) == NOT_DEFERRED_HINT
