"""Where the candidate shows a removal: the head-side file and line an annotation should name.

A finding's `source` is where base declares the object. GitHub annotates the head commit's
files, so for an object the candidate no longer declares, base's `path:line` is another object
there, or a file that is gone. This maps the removal to the head side, from file texts only
(the caller reads them; nothing here does I/O):

1. the file stays: the head line where the object's text was removed (its base lines mapped
   through a line diff of the two texts; a removal at the end of the file is its last line);
2. the file is gone (or its text is unchanged: a render no longer includes it): the line of the
   nearest kustomization's `resources:` entry that named it in base and is dropped in head;
3. else the base file as a whole (`FILE_LEVEL`), the base location said in the text.
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

#: A YAML document separator or end marker, which bounds an object's text in a stream.
_DOCUMENT_BOUNDARY = re.compile(r"^(?:---|\.\.\.)(?:\s|$)")
#: A top-level kustomization key that lists files and directories to build.
_RESOURCE_KEY = re.compile(r"^(?:resources|bases)\s*:(.*)$")
_ITEM = re.compile(r"^(\s*)-\s*(.*)$")


@dataclass(frozen=True, slots=True)
class KustomizationTexts:
    """One kustomization file on both sides: its path in base and in head, and its text in each
    (None where the file does not exist)."""

    base_path: str
    head_path: str
    base_text: str | None
    head_text: str | None


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


def resource_entries(text: str) -> list[tuple[str, int]]:
    """The entries of a kustomization's top-level `resources:` (and legacy `bases:`) lists, each
    with its 1-based line: block lists and one-line or wrapped flow lists (`[a.yaml, b]`)."""
    lines = text.splitlines()
    out: list[tuple[str, int]] = []
    for index, line in enumerate(lines):
        key = _RESOURCE_KEY.match(line)
        if key is None:
            continue
        rest = _uncomment(key.group(1)).strip()
        if rest.startswith("["):
            out += _flow_entries(lines, index, rest)
        elif not rest:
            out += _block_entries(lines, index + 1)
    return out


def dropped_entry_line(k: KustomizationTexts, path: str) -> int | None:
    """The head line where `k`'s base `resources:` entry that brings in `path` (the file, or a
    directory above it) was, when head no longer lists it; None when there is no such entry."""
    if k.base_text is None or k.head_text is None:
        return None
    folder = posixpath.dirname(k.base_path)
    kept = {_resolve(folder, e) for e, _ in resource_entries(k.head_text)}
    for entry, line in resource_entries(k.base_text):
        target = _resolve(folder, entry)
        if target is None or target in kept:
            continue
        if path == target or path.startswith(target + "/"):
            return removal_line(k.base_text, k.head_text, line, line)[0]
    return None


def place_removal(
    source: Source,
    head_path: str,
    base_text: str,
    head_text: str | None,
    kustomizations: Iterable[KustomizationTexts] = (),
) -> Source:
    """Where the candidate shows the removal of the object base declares at `source`.

    `head_path` is the head side's name for `source.path` (the same path in git mode);
    `kustomizations` are those of the file's directory and its parents, nearest first (read
    lazily: they are needed only when the file is gone or unchanged).
    """
    mapped: Source | None = None
    if head_text is not None:
        first, last = document_span(base_text, source.line)
        line, changed = removal_line(base_text, head_text, first, last)
        if changed:
            return Source(head_path, line)
        mapped = Source(head_path, line)
    for k in kustomizations:
        entry = dropped_entry_line(k, source.path)
        if entry is not None:
            return Source(k.head_path, entry)
    return mapped if mapped is not None else Source(source.path, FILE_LEVEL)


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


def _uncomment(text: str) -> str:
    """`text` without a trailing `# comment` (a `#` at the start or after whitespace)."""
    match = re.search(r"(?:^|\s)#", text)
    return text[: match.start()] if match else text


def _scalar(text: str) -> str:
    return _uncomment(text).strip().strip("\"'")


def _block_entries(lines: Sequence[str], start: int) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for number in range(start, len(lines)):
        line = lines[number]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = _ITEM.match(line)
        if item is None:
            if not line[:1].isspace():
                break  # the next top-level key
            continue  # a continuation of the previous item
        value = _scalar(item.group(2))
        if value:
            out.append((value, number + 1))
    return out


def _flow_entries(lines: Sequence[str], index: int, rest: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    text, number = rest[1:], index
    while True:
        closed = "]" in text
        for token in text.split("]")[0].split(","):
            value = _scalar(token)
            if value:
                out.append((value, number + 1))
        number += 1
        if closed or number >= len(lines):
            return out
        text = _uncomment(lines[number])


def _resolve(folder: str, entry: str) -> str | None:
    """A local entry as a path from the root (`.` for the root); None for a remote one."""
    if "://" in entry or entry.startswith(("github.com/", "git@")) or posixpath.isabs(entry):
        return None
    joined = posixpath.normpath(posixpath.join(folder, entry))
    return None if joined == ".." or joined.startswith("../") else joined
