"""`gate history` as pure parts: replay the gate commit by commit, one row per commit, a summary.

A team tries prune-gate on its own past before adopting it: every first-parent commit of a range
is checked against its first parent, as the merged deploy of that commit would have been. Each
revision is read once and reused as the next commit's base (`RevisionCache`), and a commit the
gate cannot decide (a `GateError`: a malformed manifest, a failed render) is a row of its own, so
one broken revision never hides the other 299.

The reading of revisions and the clock are the caller's (`read`, `clock`): nothing here does I/O.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.engine.remotes import compare_remotes
from gate.model.errors import GateError, InputError
from gate.model.findings import Finding
from gate.model.kinds import check_guarded_kinds, declared_custom_kinds
from gate.model.objects import RawObject

#: The verdict of a commit the gate could not decide (what `gate check` exits 2 for).
ERROR = "error"

#: Every verdict a row can have, in the summary's order.
ROW_VERDICTS = ("allow", "warn", "block", "defer", ERROR)

#: The context a replayed commit is judged in: it has been merged, its deploy ran.
HISTORY_CONTEXT = Context.MERGED


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of the range: its sha, its first parent (None for a root commit)
    and its subject line."""

    sha: str
    parent: str | None
    subject: str


@dataclass(frozen=True)
class Revision:
    """What one revision holds: its objects, and the paths asked for that it lacks (read as
    empty there)."""

    objects: tuple[RawObject, ...]
    missing: tuple[str, ...] = ()
    #: What reading it had to say (the root `--flux-root auto` found, Kustomizations skipped
    #: by `--flux-ignore-source`): the commit's row carries its head's.
    notes: tuple[str, ...] = ()
    #: The remote resources its builds left out: (kustomization file, URL) (`gate.engine.remotes`).
    remote: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class HistoryRow:
    """One commit's outcome: `verdict` is a `Verdict` value or `error`; `objects` is the count on
    the head side (None when the head could not be read); `error` is the reason of an `error`."""

    sha: str
    subject: str
    verdict: str
    codes: tuple[str, ...]
    objects: int | None
    seconds: float
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()
    #: The revision the commit was compared with when it is not its parent (the parent could not
    #: be built: its last buildable ancestor).
    base: str | None = None


@dataclass(frozen=True)
class HistorySummary:
    """The range in one line: how many commits, how many of each verdict, seconds per commit."""

    commits: int
    counts: dict[str, int]
    seconds: float

    @property
    def seconds_per_commit(self) -> float:
        return self.seconds / self.commits if self.commits else 0.0


class RevisionCache:
    """Revisions by commit sha, each read once: a commit's head is the next commit's base.

    A revision that cannot be read is cached as its error, so both commits that compare it say
    why. Only the `size` revisions used last are kept: a first-parent replay reads a commit's
    head, then its base, and the next commit's base is that head, used two reads ago.
    """

    def __init__(self, read: Callable[[str], Revision], size: int = 3) -> None:
        self._read = read
        self._size = size
        self._cache: OrderedDict[str, Revision | GateError] = OrderedDict()

    def get(self, sha: str) -> Revision:
        """The revision at `sha`; raises the `GateError` that reading it raised."""
        if sha not in self._cache:
            try:
                self._cache[sha] = self._read(sha)
            except GateError as exc:
                self._cache[sha] = exc
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(sha)
        got = self._cache[sha]
        if isinstance(got, GateError):
            raise got
        return got


def check_commit(
    base_raw: Sequence[RawObject],
    head_raw: Sequence[RawObject],
    *,
    policy: Policy,
    today: dt.date,
    default_namespace: str = "default",
    extra_findings: Sequence[Finding] = (),
) -> CheckResult:
    """What `gate check` (git mode, without `--live`) decides for one pair of revisions, in the
    merged context; raises `GateError` where it would exit 2. `extra_findings`: those made
    beside the objects (REMOTE_CONTENT_UNKNOWN)."""
    if not base_raw and not head_raw:
        raise InputError(
            "no Kubernetes objects at this commit nor at its parent: check the paths "
            "(kustomizations need --render kustomize)"
        )
    declared = declared_custom_kinds(r.body for r in (*base_raw, *head_raw))
    check_guarded_kinds(policy.guarded_kinds, declared, live=False)
    return check_objects(
        base_raw,
        head_raw,
        context=HISTORY_CONTEXT,
        policy=policy,
        today=today,
        default_namespace=default_namespace,
        extra_findings=extra_findings,
    )


def replay(
    commits: Sequence[Commit],
    cache: RevisionCache,
    *,
    policy: Policy,
    today: dt.date,
    clock: Callable[[], float],
    default_namespace: str = "default",
) -> Iterator[HistoryRow]:
    """One row per commit, in order; a `GateError` on either side is an `error` row, and the
    replay goes on. A root commit is compared with an empty base.

    A commit whose parent cannot be built (a malformed manifest, a failed render) is compared
    with the last revision of the replay that could: Flux applied nothing from the broken one,
    so the cluster still holds that ancestor's objects, and this commit's deploy (a fix, say)
    changes them. The row says so (`base`, a note)."""
    buildable: tuple[str, Revision] | None = None  # the last revision read whole, and its sha
    for commit in commits:
        start = clock()
        objects: int | None = None
        notes: list[str] = []
        base_sha: str | None = None
        parent: Revision | GateError | None = None
        if commit.parent is not None:
            try:
                parent = cache.get(commit.parent)
            except GateError as exc:
                parent = exc
            else:
                buildable = (commit.parent, parent)
        try:
            head = cache.get(commit.sha)
            objects = len(head.objects)
            if parent is None:
                notes.append("root commit: the base is empty")
                base = Revision((), head.missing)
            elif isinstance(parent, GateError):
                base, base_sha, said = _ancestor(parent, commit.parent or "", buildable)
                notes.append(said)
            else:
                base = parent
            notes.extend(path_notes(base, head, commit.sha))
            notes.extend(head.notes)
            remote, remote_notes = compare_remotes(set(base.remote), set(head.remote), False)
            notes.extend(remote_notes)
            result = check_commit(
                base.objects,
                head.objects,
                policy=policy,
                today=today,
                default_namespace=default_namespace,
                extra_findings=remote,
            )
        except GateError as exc:
            yield error_row(commit, str(exc), clock() - start, objects, tuple(notes), base_sha)
            continue
        yield result_row(commit, result, clock() - start, tuple(notes), base_sha)


def _ancestor(
    exc: GateError, parent: str, buildable: tuple[str, Revision] | None
) -> tuple[Revision, str, str]:
    """For a parent that cannot be read (`exc`): the last buildable ancestor's revision, its
    sha and a note saying so; with none in the replay, the parent's error."""
    if buildable is None:
        raise GateError(
            f"the parent {parent[:12]} cannot be read, nor any ancestor in the range: {exc}"
        ) from exc
    sha, revision = buildable
    note = (
        f"the parent {parent[:12]} cannot be built ({_first_line(str(exc))}): judged "
        f"against its last buildable ancestor {sha[:12]}, what the cluster still holds"
    )
    return revision, sha, note


def _first_line(text: str, width: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= width else line[: width - 3] + "..."


def path_notes(base: Revision, head: Revision, sha: str) -> list[str]:
    """A note for each path one side has and the other lacks (a root added or removed, read as
    empty where it is missing); a path both lack changes nothing and goes unsaid."""
    notes = [
        f"{p} is not at {sha[:12]}: read as empty (the commit removes it)"
        for p in head.missing
        if p not in base.missing
    ]
    notes.extend(
        f"{p} is not at the parent: read as empty (the commit adds it)"
        for p in base.missing
        if p not in head.missing
    )
    return notes


def result_row(
    commit: Commit,
    result: CheckResult,
    seconds: float,
    notes: tuple[str, ...] = (),
    base: str | None = None,
) -> HistoryRow:
    """The row of a decided commit: its verdict, its codes (each once, in report order)."""
    findings = result.decision.findings
    return HistoryRow(
        sha=commit.sha,
        subject=commit.subject,
        verdict=result.decision.verdict.value,
        codes=tuple(dict.fromkeys(f.code.value for f in findings)),
        objects=len(result.head),
        seconds=seconds,
        findings=findings,
        notes=notes,
        base=base,
    )


def error_row(
    commit: Commit,
    reason: str,
    seconds: float,
    objects: int | None = None,
    notes: tuple[str, ...] = (),
    base: str | None = None,
) -> HistoryRow:
    """The row of a commit the gate could not decide, with the reason."""
    return HistoryRow(
        sha=commit.sha,
        subject=commit.subject,
        verdict=ERROR,
        codes=(),
        objects=objects,
        seconds=seconds,
        error=reason,
        notes=notes,
        base=base,
    )


def summarize(rows: Sequence[HistoryRow]) -> HistorySummary:
    """Counts per verdict (every verdict present, zero or not) and the total seconds."""
    counts = dict.fromkeys(ROW_VERDICTS, 0)
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    return HistorySummary(len(rows), counts, sum(r.seconds for r in rows))
