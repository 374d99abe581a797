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

from gate.sources.buildcache import Read, Seen, TreeIndex
from gate.sources.gitsource import Exported, ExportPlan


def expand(seen: Iterable[Seen], plan: ExportPlan, index: TreeIndex) -> set[str]:
    """The paths (files and directories) to write for a build that read `seen` at another
    revision: each file and directory it read; what a directory it listed holds (the listing
    must be the whole export's), and everything below it when the listing changed since (an
    app added below a directory Flux's generator scans, whose files the build reads next:
    without them it would fail on the part and be built twice); everything below a directory
    it walked."""
    out: set[str] = set()
    whole = plan.files.keys() | plan.dirs
    for kind, rel, saw in seen:
        out.add(rel)
        if kind == "tree" or (kind == "list" and index.fingerprint(kind, rel) != saw):
            out.update(_below(whole, rel))
        elif kind == "list":
            prefix = f"{rel}/" if rel else ""
            out.update(prefix + name for name in _names(whole, rel))
    out.discard("")
    return out


def covers(reads: Iterable[Read], part: Exported, plan: ExportPlan) -> bool:
    """True when every read was answered by `part` as the whole export would answer it."""
    written = part.files.keys() | part.dirs
    whole = plan.files.keys() | plan.dirs
    for kind, rel in reads:
        # the root ("") is a directory in both; any other path must be in both or in neither
        same = rel == "" or (rel in written) == (rel in whole)
        if kind == "list":
            same = same and _names(written, rel) == _names(whole, rel)
        elif kind == "tree":
            same = same and set(_below(whole, rel)) <= written
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
