"""Where the candidate shows a removal: the head-side file and line an annotation should name.

A finding's `source` is where base declares the object. GitHub annotates the head commit's
files, so for an object the candidate no longer declares, base's `path:line` is another object
there, or a file that is gone. This maps the removal to the head side, from file texts only
(the caller reads them; nothing here does I/O):

1. the file stays but its text no longer holds the object: that file as a whole
   (`RemovedFrom`, "removed from FILE"). No line of it shows the object: the line that now
   stands where its text was is a `---` or another object's, and would name the wrong thing;
2. the file is gone (or its text is unchanged: a render no longer includes it): the line of the
   nearest kustomization's `resources:` entry that named it in base and is dropped in head;
3. else (`gate.sources.placement` first asks the Flux Kustomization that applied it: where
   that one was removed, or the dropped `resources:`/`components:` entry of the kustomization
   at its `spec.path`) the base file as a whole (`FILE_LEVEL`), or its unchanged line.

A kustomization comes here read: its `resources:` (and `bases:`) entries with their lines, as
`gate.sources.placement` parses them (YAML is read there, never here).
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gate.model.objects import Source

#: `Source.line` of a place that is a file as a whole (GitHub: a file-level annotation).
FILE_LEVEL = 0


@dataclass(frozen=True, slots=True)
class RemovedFrom(Source):
    """A file the candidate keeps but no longer declares the object in, as a whole (its line is
    always `FILE_LEVEL`): a report says "removed from FILE", where a bare `FILE_LEVEL` place
    (the file is gone) says "removed with its file"."""


def removed_from(path: str) -> Source:
    """The place of an object removed from `path`, a file the candidate keeps."""
    return RemovedFrom(path, FILE_LEVEL)


#: A YAML document separator or end marker, which bounds an object's text in a stream.
_DOCUMENT_BOUNDARY = re.compile(r"^(?:---|\.\.\.)(?:\s|$)")

#: An entry of a kustomization's `resources:` or `bases:` list, and its 1-based line.
Entry = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Kustomization:
    """One side's kustomization file, read: its text (a dropped entry's line is mapped through
    it) and the entries of its top-level `resources:` and `bases:` lists, in order; `entries` is
    None when the text cannot be read as a kustomization (then nothing in it is blamed)."""

    text: str
    entries: tuple[Entry, ...] | None


@dataclass(frozen=True, slots=True)
class KustomizationFiles:
    """One kustomization file on both sides: its path in base and in head, and each side read
    (None where the file does not exist)."""

    base_path: str
    head_path: str
    base: Kustomization | None
    head: Kustomization | None


def document_span(text: str, line: int) -> tuple[int, int]:
    """The 1-based, inclusive lines of the document that starts at `line`: up to the next
    `---` (or `...`), else to the end of the text."""
    lines = text.splitlines()
    start = min(max(line, 1), max(len(lines), 1))
    for number in range(start + 1, len(lines) + 1):
        if _DOCUMENT_BOUNDARY.match(lines[number - 1]):
            return start, number - 1
    return start, max(len(lines), start)


def removal_line(base_text: str, head_text: str, first: int, last: int) -> tuple[int, bool]:
    """The head line where base lines `first`..`last` (1-based, inclusive) went, and whether any
    of them changed there (False: the lines are all still in head, unchanged).

    The first difference that touches the range wins: a deletion points at the line that now
    stands where the block was (clamped to the file: the last line at the end), a rewrite at
    the same offset into what replaced it.
    """
    base_lines, head_lines = base_text.splitlines(), head_text.splitlines()
    lo, hi = first - 1, last  # 0-based, half-open
    unchanged: int | None = None
    for tag, i1, i2, j1, j2 in _opcodes(base_lines, head_lines):
        if tag == "equal":
            if i1 <= lo < i2 and unchanged is None:
                unchanged = j1 + (lo - i1)
            continue
        touches = lo < i1 < hi if i1 == i2 else i1 < hi and i2 > lo
        if not touches:
            continue
        if tag == "delete":
            return _clamp(_settle(base_lines, head_lines, i1, i2, j1) + 1, head_lines), True
        offset = min(max(lo - i1, 0), max(j2 - j1 - 1, 0))
        return _clamp(j1 + offset + 1, head_lines), True
    return _clamp((unchanged if unchanged is not None else lo) + 1, head_lines), False


def _opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """`difflib` opcodes of `a` -> `b`, with the common head and tail cut off first: an object
    removed from a 20,000-line bundle is then one small diff, not a quadratic one (popular lines
    such as `type: string` make `SequenceMatcher` slow on the whole files)."""
    limit = min(len(a), len(b))
    start = 0
    while start < limit and a[start] == b[start]:
        start += 1
    end = 0
    while end < limit - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
        end += 1
    middle = difflib.SequenceMatcher(None, a[start : len(a) - end], b[start : len(b) - end])
    out = [("equal", 0, start, 0, start)] if start else []
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        out.append((tag, i1 + start, i2 + start, j1 + start, j2 + start))
    if end:
        out.append(("equal", len(a) - end, len(a), len(b) - end, len(b)))
    return out


def _settle(base: Sequence[str], head: Sequence[str], i1: int, i2: int, j: int) -> int:
    """Where in head a deletion of base[i1:i2] stands (0-based). A block whose lines repeat
    around it (`---`, `apiVersion: v1`, ...) could be cut at several places, all the same diff;
    the one nearest the diff's choice at a document boundary is where a reader sees it."""
    places = [j]
    a, b, k = i1, i2, j
    while a > 0 and base[a - 1] == base[b - 1]:
        a, b, k = a - 1, b - 1, k - 1
        places.append(k)
    a, b, k = i1, i2, j
    while b < len(base) and base[a] == base[b]:
        a, b, k = a + 1, b + 1, k + 1
        places.append(k)
    places.sort(key=lambda p: abs(p - j))
    for p in places:  # the separator that now stands where the object was
        if p < len(head) and _DOCUMENT_BOUNDARY.match(head[p]):
            return p
    for p in places:  # else the start of the document that follows it
        if 0 < p <= len(head) and _DOCUMENT_BOUNDARY.match(head[p - 1]):
            return p
    return j


def dropped_entry_line(k: KustomizationFiles, path: str) -> int | None:
    """The head line where `k`'s base `resources:` entry that brings in `path` (the file, or a
    directory above it) was, when head no longer lists it; None when there is no such entry (or
    either side is missing or unreadable)."""
    base, head = k.base, k.head
    if base is None or head is None or base.entries is None or head.entries is None:
        return None
    folder = posixpath.dirname(k.base_path)
    kept = {_resolve(folder, e) for e, _ in head.entries}
    line = next((n for e, n in base.entries if _brings_in(_resolve(folder, e), kept, path)), None)
    return removal_line(base.text, head.text, line, line)[0] if line is not None else None


def _brings_in(target: str | None, kept: set[str | None], path: str) -> bool:
    """A local entry head no longer lists that is `path` or a directory above it."""
    if target is None or target in kept:
        return False
    return path == target or path.startswith(target + "/")


def place_removal(
    source: Source,
    head_path: str,
    base_text: str,
    head_text: str | None,
    kustomizations: Iterable[KustomizationFiles] = (),
) -> Source:
    """Where the candidate shows the removal of the object base declares at `source`.

    `head_path` is the head side's name for `source.path` (the same path in git mode);
    `kustomizations` are those of the file's directory and its parents, nearest first (read
    lazily: they are needed only when the file is gone or unchanged).
    """
    found = found_removal(source, head_path, base_text, head_text, kustomizations)
    if found is not None:
        return found
    if head_text is not None:
        first, last = document_span(base_text, source.line)
        return Source(head_path, removal_line(base_text, head_text, first, last)[0])
    return Source(source.path, FILE_LEVEL)


def found_removal(
    source: Source,
    head_path: str,
    base_text: str,
    head_text: str | None,
    kustomizations: Iterable[KustomizationFiles] = (),
) -> Source | None:
    """Where the candidate changed what makes the object at `source` (steps 1 and 2 of the
    module docstring: its own text, or a kustomization entry that brought it in), or None when
    the change is not there: its file stays unchanged and no kustomization above it dropped it
    (a shared Component's file, the object gone because its app's entry was dropped elsewhere)."""
    if head_text is not None:
        first, last = document_span(base_text, source.line)
        if removal_line(base_text, head_text, first, last)[1]:
            return removed_from(head_path)
    for k in kustomizations:
        entry = dropped_entry_line(k, source.path)
        if entry is not None:
            return Source(k.head_path, entry)
    return None


def kustomization_dirs(path: str) -> list[str]:
    """The directories whose kustomization could name `path`: its own, then each parent, up to
    the root (`""`)."""
    out: list[str] = []
    folder = posixpath.dirname(path)
    while True:
        out.append(folder)
        if not folder:
            return out
        folder = posixpath.dirname(folder)


def _clamp(line: int, lines: Sequence[str]) -> int:
    return min(max(line, 1), max(len(lines), 1))


def _resolve(folder: str, entry: str) -> str | None:
    """A local entry as a path from the root (`.` for the root); None for a remote one."""
    if "://" in entry or entry.startswith(("github.com/", "git@")) or posixpath.isabs(entry):
        return None
    joined = posixpath.normpath(posixpath.join(folder, entry))
    return None if joined == ".." or joined.startswith("../") else joined
