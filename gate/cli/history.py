"""`gate history`: replay the gate over a range of commits, one row per first-parent commit.

Each commit C of `git rev-list --first-parent --reverse A..B` is checked against its first
parent C^1 in the `merged` context (what its deploy did), with the policy of the range's end B.
Every revision is read (or rendered) once: C's objects are the next commit's base.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from gate.cli.common import (
    POLICY_FILE,
    argocd_options,
    argocd_reading,
    fail,
    fetch_charts_option,
    flux_source_options,
    parse_flux_ignore,
    parse_flux_source,
    say,
    text_or_json_option,
)
from gate.model.errors import GateError, GitError, InputError

if TYPE_CHECKING:
    from gate.app.sides import GitReading
    from gate.engine.history import Commit, HistoryRow, Revision

# The engine, the sources and the report are imported when the replay runs: `gate history
# --help` costs click and the option table (test_startup).


@click.command("history")
@click.option(
    "--repo",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Git repository.",
)
@click.option(
    "--range",
    "range_",
    required=True,
    metavar="A..B",
    help="The commits to replay: every first-parent commit after A up to B.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="DIR",
    help="Directory in the repository to read (repeatable; default: the whole tree). A path a "
    "revision lacks is read as empty there, with a note on the row.",
)
@click.option(
    "--render",
    type=click.Choice(["none", "kustomize"]),
    default="none",
    show_default=True,
    help="Build each --path with kustomize at each revision.",
)
@click.option(
    "--flux-root",
    "flux_roots",
    multiple=True,
    metavar="DIR",
    help="A Flux cluster entry point (repeatable; auto: the one each revision declares): each "
    "revision is what its Kustomizations apply, as in `gate check --flux-root` (instead of "
    "--path and --render).",
)
@flux_source_options
@fetch_charts_option
@argocd_options
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help=f"Policy file (default: {POLICY_FILE} at the range's end B). Inside the repository it "
    "is read at B, as `gate check` reads it at the base; outside, from disk.",
)
@click.option(
    "-n",
    "--namespace",
    default="default",
    show_default=True,
    help="Namespace of namespaced objects that declare none.",
)
@text_or_json_option
@click.option(
    "--first-parent",
    is_flag=True,
    default=True,
    help="Follow the first parent of merges (the default and only mode: a merge is compared "
    "with the branch it merged into).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="One line per commit on stderr while it runs (default: when stderr is a terminal).",
)
def history_command(
    repo: str,
    range_: str,
    paths: Sequence[str],
    render: str,
    flux_roots: Sequence[str],
    flux_sources: Sequence[str],
    flux_ignores: Sequence[str],
    fetch_charts: bool,
    config_path: str | None,
    namespace: str,
    fmt: str,
    first_parent: bool,
    progress: bool | None,
    **argo: Any,
) -> None:
    """Replay the gate over past commits: how would it have judged each one?

    Each first-parent commit C of A..B is compared with its first parent C^1 in the `merged`
    context (the commit is on the branch; its deploy ran), with the policy at B (or --config).
    A commit the gate cannot decide (a malformed manifest, a failed render) is a row with
    verdict `error` and the reason; the replay goes on.

    Columns: commit, subject, verdict, codes, objects (on the commit's side), seconds. Exit
    codes: 0 when the replay ran, whatever the verdicts; 2 on bad arguments or an unreadable
    repository.
    """
    from gate.app.policy import policy_at
    from gate.app.sides import ARGOCD_ROOT_ALONE, AUTO_ROOT, FLUX_ROOT_ALONE, GitReading
    from gate.engine.history import RevisionCache, replay, summarize
    from gate.report.history import progress_line, render_history_json, render_history_text
    from gate.sources.clock import utc_today

    del first_parent  # the only mode
    try:
        start, end = _parse_range(range_)
        if render == "kustomize" and not paths:
            raise InputError("--render kustomize needs at least one --path to build")
        if flux_roots and (paths or render != "none"):
            raise InputError(FLUX_ROOT_ALONE)
        argo_roots = tuple(argo["argocd_roots"])
        if argo_roots and (paths or render != "none" or flux_roots):
            raise InputError(ARGOCD_ROOT_ALONE + ", and --flux-root")
        argo_options = argocd_reading(argo)
        sources = [parse_flux_source(s) for s in flux_sources]
        ignores = tuple(parse_flux_ignore(s) for s in flux_ignores)
        commits, end_sha = _commits(repo, start, end)
        if not commits:
            raise GitError(f"no commits in {range_}: is {start} an ancestor of {end}?")
        roots = (*flux_roots, *argo_roots)
        _require_paths(repo, [*paths, *(r for r in roots if r != AUTO_ROOT)], commits)
        policy = policy_at(repo, end_sha, config_path, say)
    except GateError as exc:
        fail(str(exc))
    reading = GitReading(
        repo,
        render,
        tuple(flux_roots),
        tuple(sources),
        ignores,
        fetch_charts=fetch_charts,
        argocd_roots=argo_roots,
        argocd=argo_options,
    )
    reader = _reader(reading, paths)
    _renderers(reading, reset=True)
    show = sys.stderr.isatty() if progress is None else progress
    rows: list[HistoryRow] = []
    rows_iter = replay(
        commits,
        RevisionCache(reader),
        policy=policy,
        today=utc_today(),
        clock=time.perf_counter,
        default_namespace=namespace,
    )
    for index, row in enumerate(rows_iter, start=1):
        rows.append(row)
        if show:
            click.echo(progress_line(index, len(commits), row), err=True)
    summary = summarize(rows)
    used = _renderers(reading)
    if fmt == "json":
        click.echo(render_history_json(rows, summary, range_=range_, renderers=used))
    else:
        click.echo(render_history_text(rows, summary, renderers=used))


def _renderers(reading: GitReading, *, reset: bool = False) -> list[str]:
    """The renderers the replay's builds ran (none when it reads files one by one); `reset`
    starts the count."""
    if not reading.builds:
        return []
    from gate.sources import render  # only built replays load it

    if reset:
        render.reset_renderers()
    return render.renderers_used()


def _parse_range(range_: str) -> tuple[str, str]:
    """`A..B` into (A, B); `A...B` and a missing side are refused (they mean something else)."""
    start, sep, end = range_.partition("..")
    if not sep or not start or not end or end.startswith("."):
        raise InputError(
            f"--range {range_!r}: give two revisions as A..B (the commits after A up to B, "
            "e.g. HEAD~300..HEAD)"
        )
    return start, end


def _commits(repo: str, start: str, end: str) -> tuple[list[Commit], str]:
    """The first-parent commits after `start` up to `end`, oldest first, and `end`'s sha."""
    from gate.engine.history import Commit
    from gate.sources import gitsource

    commits = [Commit(*c) for c in gitsource.first_parent_log(repo, start, end)]
    return commits, gitsource.resolve_revision(repo, end)


def _require_paths(repo: str, paths: Sequence[str], commits: Sequence[Commit]) -> None:
    """A --path that no revision of the range has is a typo, not an empty root (the ends are
    looked at first: a root there is the usual case)."""
    from gate.app.sides import existing_paths

    shas = [commits[-1].sha, *(c.parent for c in commits[:1] if c.parent)]
    shas.extend(c.sha for c in commits[:-1])
    absent = set(paths)
    for sha in shas:
        if not absent:
            return
        absent &= set(existing_paths(repo, sha, sorted(absent))[1])
    if absent:
        raise GitError(
            f"--path {', '.join(sorted(absent))}: not in the repository at any revision of the "
            "range (paths are from the repository root)"
        )


def _reader(reading: GitReading, paths: Sequence[str]) -> Callable[[str], Revision]:
    """Read one revision as `gate check` reads it (`GitReading`): the objects under the paths
    (or Flux entry points) it has; a path it lacks is read as empty there, with a note (a root
    that does not exist yet, or any more, holds nothing there)."""
    from gate.app.sides import AUTO_ROOT, ArgoSide, FluxSide, existing_paths
    from gate.engine.history import Revision
    from gate.sources.remote import LEDGER

    roots = reading.argocd_roots or reading.flux_roots
    wanted = roots or tuple(paths)

    def read(sha: str) -> Revision:
        auto = [p for p in wanted if roots and p == AUTO_ROOT]
        present, missing = existing_paths(reading.repo, sha, [p for p in wanted if p not in auto])
        if roots:
            missing = [f"{p} does not exist at {sha[:12]}: read as empty" for p in missing]
        side = reading.side(sha, sha, [*auto, *present])
        objects = side.read() if auto or present or not wanted else []
        notes = tuple(side.notes) if isinstance(side, FluxSide | ArgoSide) else ()
        remote = frozenset(LEDGER.skipped(sha)) if reading.builds else frozenset()
        if reading.builds:
            notes = (*notes, *LEDGER.patch_notes(sha))
        return Revision(tuple(objects), tuple(missing), notes, remote)

    return read
