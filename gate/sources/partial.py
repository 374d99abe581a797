"""Part of a revision written out for a build, and the proof that the build read nothing else.

When one build of a revision misses the build cache (the candidate changed one app), writing the
whole revision out for it costs more than the build: hundreds of files. The same build at another
revision read a known set of paths (the cache keeps them), and it most likely reads the same now,
so only those are written (`expand`). Whether that was enough is not guessed: the helper names
every read of this build too, and `covers` checks each against the whole export (`ExportPlan`):
the same file there or not, the same directory, the same names listed, everything below a walked
directory. A build whose every read would have been answered the same by the whole export made
the same reads in the same order, so it is the same build; one that read past the part is built
again on the whole export.
"""

from __future__ import annotations

from collections.abc import Iterable

from gate.sources.gitsource import Exported, ExportPlan

#: A read as the build cache keeps it: (kind, path from the repository root); kinds as in
#: tools/kustomize/trace.go.
Read = tuple[str, str]


def expand(reads: Iterable[Read], plan: ExportPlan) -> set[str]:
    """The paths (files and directories) to write for a build that reads `reads`: each file and
    directory read, and everything below a directory it listed or walked. (A listing is what
    Flux's generator scans: a directory new in it is most likely an app added, whose files the
    build reads next; writing only the names would fail that build, and build it twice.)"""
    out: set[str] = set()
    whole = plan.files.keys() | plan.dirs
    for kind, rel in reads:
        out.add(rel)
        if kind in ("list", "tree"):
            out.update(_below(whole, rel))
    out.discard("")
    return out


def covers(reads: Iterable[Read], part: Exported, plan: ExportPlan) -> bool:
    """True when every read was answered by `part` as the whole export would answer it."""
    written = part.files.keys() | part.dirs
    whole = plan.files.keys() | plan.dirs
    for kind, rel in reads:
        if rel == "":
            same = kind != "list" or _names(written, rel) == _names(whole, rel)
        elif kind in ("file", "stat"):
            same = (rel in written) == (rel in whole)
        elif kind == "list":
            same = (rel in written) == (rel in whole) and _names(written, rel) == _names(whole, rel)
        else:  # tree
            same = (rel in written) == (rel in whole) and set(_below(whole, rel)) <= written
        if not same:
            return False
    return True


def _names(paths: Iterable[str], rel: str) -> set[str]:
    """The names directly below directory `rel` among `paths`."""
    prefix = f"{rel}/" if rel else ""
    return {p[len(prefix) :].partition("/")[0] for p in paths if p.startswith(prefix) and p != rel}


def _below(paths: Iterable[str], rel: str) -> list[str]:
    prefix = f"{rel}/" if rel else ""
    return [p for p in paths if p.startswith(prefix) and p != rel]
