"""`gate history`'s renderings: a table for a person, JSON for a program.

Commit subjects, paths and error messages are untrusted text: the table shows their control
characters escaped (a subject cannot move the cursor or start a workflow command), and the JSON
escapes `##[` as `gate check -o json` does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gate.engine.history import HISTORY_CONTEXT, ROW_VERDICTS, HistoryRow, HistorySummary
from gate.report.common import LEGACY_COMMAND, inert, visible
from gate.report.json import SCHEMA_VERSION, finding_data

#: The confined renderer's name (gate.sources.render.HELPER; reports do not import sources).
HELPER = "prune-gate-kustomize"

#: Width of the subject column; longer subjects end in `...`.
SUBJECT_WIDTH = 48
#: Width of the reason under an error row in the table (the JSON has it whole).
REASON_WIDTH = 240

_HEADER = ("COMMIT", "SUBJECT", "VERDICT", "CODES", "OBJECTS", "SECONDS")


def truncate(text: str, width: int) -> str:
    """`text` on one line, at most `width` characters (`...` marks a cut)."""
    line = visible(" ".join(text.split()))
    return line if len(line) <= width else line[: width - 3] + "..."


def table_row(row: HistoryRow) -> tuple[str, ...]:
    """The six cells of a row: short sha, subject, verdict, codes, objects, seconds."""
    return (
        row.sha[:10],
        truncate(row.subject, SUBJECT_WIDTH),
        row.verdict,
        ",".join(row.codes) or "-",
        "-" if row.objects is None else str(row.objects),
        f"{row.seconds:.2f}",
    )


def summary_line(summary: HistorySummary) -> str:
    """`300 commits: 280 allow, 3 warn, 2 block, 0 defer, 15 error; 1.92 s per commit`."""
    counts = ", ".join(f"{summary.counts.get(v, 0)} {v}" for v in ROW_VERDICTS)
    noun = "commit" if summary.commits == 1 else "commits"
    return (
        f"{summary.commits} {noun} (context {HISTORY_CONTEXT.value}): {counts}; "
        f"{summary.seconds_per_commit:.2f} s per commit ({summary.seconds:.1f} s in all)"
    )


def renderer_line(renderers: Sequence[str]) -> str | None:
    """`renderer: prune-gate-kustomize (confined)`, or the fallback named as such; None when
    nothing was built."""
    if not renderers:
        return None
    named = [
        f"{r} (confined)" if r == HELPER else f"{r} (fallback: {HELPER} is not on PATH)"
        for r in renderers
    ]
    return "renderer: " + ", ".join(named)


def render_history_text(
    rows: Sequence[HistoryRow], summary: HistorySummary, *, renderers: Sequence[str] = ()
) -> str:
    """The table, an error's reason under its row, the renderer that built (if any), and the
    summary line."""
    cells = [_HEADER, *(table_row(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_HEADER))]
    right = {4, 5}  # numbers align right

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if i in right else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [line(_HEADER)]
    for row, values in zip(rows, cells[1:], strict=True):
        out.append(line(values))
        if row.error is not None:
            out.append(f"  error: {truncate(row.error, REASON_WIDTH)}")
        out.extend(f"  note: {truncate(n, REASON_WIDTH)}" for n in row.notes)
    out.append("")
    said = renderer_line(renderers)
    if said is not None:
        out.append(said)
    out.append(summary_line(summary))
    return inert("\n".join(out))


def row_data(row: HistoryRow) -> dict[str, Any]:
    """One commit as JSON data: the table's fields, the findings as `gate check -o json` has
    them, and for an `error` row the reason."""
    return {
        "sha": row.sha,
        "subject": row.subject,
        "verdict": row.verdict,
        "codes": list(row.codes),
        "objects": row.objects,
        "seconds": round(row.seconds, 3),
        "findings": [finding_data(f) for f in row.findings],
        "error": row.error,
        "notes": list(row.notes),
        "base": row.base,
    }


def history_data(
    rows: Sequence[HistoryRow],
    summary: HistorySummary,
    *,
    range_: str,
    renderers: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole replay as plain data: the range, the renderers that built (`prune-gate-kustomize`,
    or a fallback's `kubectl kustomize` / `kustomize build`; empty when nothing was built), one
    object per commit, the summary."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "context": HISTORY_CONTEXT.value,
        "range": range_,
        "renderers": list(renderers),
        "commits": [row_data(r) for r in rows],
        "summary": {
            "commits": summary.commits,
            **{v: summary.counts.get(v, 0) for v in ROW_VERDICTS},
            "seconds": round(summary.seconds, 3),
            "secondsPerCommit": round(summary.seconds_per_commit, 3),
        },
    }


def render_history_json(
    rows: Sequence[HistoryRow],
    summary: HistorySummary,
    *,
    range_: str,
    renderers: Sequence[str] = (),
) -> str:
    """The JSON document: two-space indent, ASCII only, `##[` escaped."""
    data = history_data(rows, summary, range_=range_, renderers=renderers)
    text = json.dumps(data, indent=2)
    return text.replace(LEGACY_COMMAND, "##\\u005b")


def progress_line(index: int, total: int, row: HistoryRow) -> str:
    """`[12/300] 1a2b3c4d5e block PVC_REMOVED 1.93s`: one line per commit while the replay runs."""
    sha, _, verdict, codes, _, seconds = table_row(row)
    return inert(f"[{index}/{total}] {sha} {verdict} {codes} {seconds}s")
