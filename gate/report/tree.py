"""The prune plan as every format shows it: a tree for a terminal, nested lists for a pull
request, plain data for programs. `flux tree`'s conventions: one object a line, box-drawing
branches, the deployer's root on top."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gate.engine.placement import FILE_LEVEL, RemovedFrom
from gate.engine.plantree import CASCADE, ORPHAN, NamespacePlan, PlanEntry, PlanTree, root_label
from gate.model.objects import Source
from gate.report.common import visible

#: Objects without a finding listed one by one in a namespace, before they are only counted.
QUIET_SHOWN = 5

#: How each action reads in a sentence of the summary line.
_ACTION_WORDS = (
    ("delete", "deleted"),
    ("replace", "force-replaced"),
    (ORPHAN, "orphaned (left unmanaged, not deleted)"),
    ("update", "failing to apply (an immutable field)"),
    (CASCADE, "deleted with their namespace (live)"),
)


def plan_summary(tree: PlanTree) -> str:
    """`plan: 12 deleted (3 guarded), 1 force-replaced`: the counts, the guarded ones named."""
    counts = Counter(e.action for e in tree.entries())
    guarded = Counter(e.action for e in tree.entries() if e.guarded)
    parts = []
    for action, words in _ACTION_WORDS:
        if counts[action]:
            of = f" ({guarded[action]} guarded)" if guarded[action] else ""
            parts.append(f"{counts[action]} {words}{of}")
    return "plan: " + (", ".join(parts) if parts else "nothing deleted, replaced or orphaned")


def plan_text(tree: PlanTree, paint: Callable[[str, str], str]) -> list[str]:
    """The tree for a terminal: root, namespace, object (action, verdict, codes, where), and
    under a claim what makes it matter."""
    lines = [plan_summary(tree)]
    for root in tree.roots:
        lines.append(visible(root_label(root.root)))
        spaces = root.namespaces
        for i, ns in enumerate(spaces):
            last = i == len(spaces) - 1
            lines.extend(_namespace_text(ns, "", last, paint))
    return lines


def _namespace_text(
    ns: NamespacePlan, indent: str, last: bool, paint: Callable[[str, str], str]
) -> Iterator[str]:
    branch, below = ("└── ", "    ") if last else ("├── ", "│   ")
    if ns.entry is not None:
        yield indent + branch + _entry_text(ns.entry, paint)
    else:
        yield indent + branch + (f"namespace {visible(ns.name)}" if ns.name else "cluster-scoped")
    rows = list(_rows(ns))
    if ns.entry is not None:
        rows = [(None, d) for d in ns.entry.details] + rows
    for j, (entry, text) in enumerate(rows):
        end = j == len(rows) - 1
        b, sub = ("└── ", "    ") if end else ("├── ", "│   ")
        if entry is None:
            yield indent + below + b + visible(text)
            continue
        yield indent + below + b + _entry_text(entry, paint)
        for k, detail in enumerate(entry.details):
            b2 = "└── " if k == len(entry.details) - 1 else "├── "
            yield indent + below + sub + b2 + visible(detail)


def _rows(ns: NamespacePlan) -> Iterator[tuple[PlanEntry | None, str]]:
    """The namespace's objects: every one with a finding or a guarded kind; the others one by
    one up to QUIET_SHOWN, then counted by kind."""
    quiet = [e for e in ns.objects if not e.codes and not e.guarded]
    loud = [e for e in ns.objects if e.codes or e.guarded]
    for e in loud:
        yield e, ""
    if len(quiet) <= QUIET_SHOWN:
        for e in quiet:
            yield e, ""
        return
    kinds = Counter(e.ref.kind for e in quiet)
    listed = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    yield None, f"{len(quiet)} more without a finding ({_quiet_actions(quiet)}): {listed}"


def _quiet_actions(entries: list[PlanEntry]) -> str:
    actions = Counter(e.action for e in entries)
    return ", ".join(f"{n} {action}" for action, n in sorted(actions.items()))


def _entry_text(entry: PlanEntry, paint: Callable[[str, str], str]) -> str:
    parts = [f"{visible(entry.ref.kind)} {visible(entry.ref.name)}"]
    if entry.action:
        parts.append(entry.action)
    if entry.codes:
        style = entry.verdict if entry.verdict in ("block", "defer", "warn") else "off"
        parts.append(paint(style, entry.verdict) + " " + " ".join(entry.codes))
    where = _where(entry)
    if where:
        parts.append(paint("dim", f"({visible(where)})"))
    return "  ".join(parts)


def _where(entry: PlanEntry) -> str:
    src = str(entry.source) if entry.source is not None else ""
    head = entry.head_source
    if head is None or head == entry.source:
        return src
    said = head_place(head)
    return f"{src}, {said}" if src else said


def head_place(head: Source) -> str:
    """Where the candidate shows an object, in words: `head a.yaml:9`, `removed from a.yaml`
    (the candidate keeps the file, not the object), or `removed with its file`."""
    if isinstance(head, RemovedFrom):
        return f"removed from {head.path}"
    if head.line == FILE_LEVEL:
        return "removed with its file"
    return f"head {head}"


def plan_data(tree: PlanTree) -> dict[str, Any]:
    """The plan as JSON data (`plan` in the report schema)."""
    return {
        "summary": plan_summary(tree).removeprefix("plan: "),
        "deletes": tree.deletes,
        "replaces": tree.replaces,
        "orphans": tree.orphans,
        "updates": tree.updates,
        "cascades": tree.cascades,
        "roots": [
            {
                "root": root.root,
                "label": root_label(root.root),
                "namespaces": [
                    {
                        "name": ns.name or None,
                        "namespaceObject": (
                            _entry_data(ns.entry) if ns.entry is not None else None
                        ),
                        "objects": [_entry_data(e) for e in ns.objects],
                    }
                    for ns in root.namespaces
                ],
            }
            for root in tree.roots
        ],
    }


def _entry_data(entry: PlanEntry) -> dict[str, Any]:
    return {
        "object": {
            "apiVersion": entry.api_version,
            "kind": entry.ref.kind,
            "namespace": entry.ref.namespace or None,
            "name": entry.ref.name,
        },
        "action": entry.action or None,
        "verdict": entry.verdict,
        "codes": list(entry.codes),
        "guarded": entry.guarded,
        "cause": entry.cause or None,
        "details": list(entry.details),
        "source": _source(entry.source),
        "headSource": _head_source(entry.head_source),
    }


def _source(source: Source | None) -> dict[str, Any] | None:
    return {"path": source.path, "line": source.line} if source is not None else None


def _head_source(source: Source | None) -> dict[str, Any] | None:
    """Where the candidate shows it; `line` null for the file as a whole."""
    if source is None:
        return None
    return {"path": source.path, "line": None if source.line == FILE_LEVEL else source.line}


#: Characters a URL path keeps as they are (RFC 3986's unreserved, and the separator).
_URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def quote(text: str) -> str:
    """Percent-encode a URL path (urllib's `quote`, without importing a network package into
    the pure report layer)."""
    return "".join(
        ch if ch in _URL_SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in text
    )


@dataclass(frozen=True, slots=True)
class SourceLinks:
    """Where the compared revisions are on the forge, so a line can be a link: the repository's
    web URL (`https://github.com/OWNER/REPO`) and the two commits."""

    repository: str
    base: str
    head: str

    def url(self, source: Source, revision: str) -> str | None:
        """The blob URL of `source` at `revision`, with its line; None for what is no file in
        the repository (`<stdin>`, a rendered input)."""
        path = source.path.removeprefix("./")
        if not path or path.startswith(("<", "/")) or ".." in path.split("/"):
            return None
        anchor = "" if source.line == FILE_LEVEL else f"#L{source.line}"
        return f"{self.repository}/blob/{quote(revision)}/{quote(path)}{anchor}"


def source_link(
    source: Source,
    revision: str,
    links: SourceLinks | None,
    code: Callable[[str], str],
    head: bool = False,
) -> str:
    """`source` as a code span, linked to its line at `revision` when the forge is known (a
    place of the candidate's in words: `head a.yaml:9`, `removed from a.yaml`)."""
    said = head_place(source) if head else str(source)
    url = links.url(source, revision) if links is not None else None
    return f"[{code(said)}]({url})" if url else code(said)


def plan_markdown(
    tree: PlanTree,
    text: Callable[[str], str],
    code: Callable[[str], str],
    links: SourceLinks | None,
    max_rows: int | None = None,
) -> list[str]:
    """The tree as nested markdown lists (GitHub renders them as a tree); at most `max_rows`
    objects, then a count of the rest. `text` and `code` make untrusted text inline markdown."""
    out: list[str] = []
    shown = 0
    left = sum(1 for _ in tree.entries())
    for root in tree.roots:
        out.append(f"- **{text(root_label(root.root))}**")
        for ns in root.namespaces:
            if max_rows is not None and shown >= max_rows:
                break
            if ns.entry is not None:
                out.append("  - " + _entry_markdown(ns.entry, text, code, links))
                out.extend(f"    - {text(d)}" for d in ns.entry.details)
                shown, left = shown + 1, left - 1
            else:
                out.append(f"  - namespace {code(ns.name)}" if ns.name else "  - cluster-scoped")
            for entry, quiet in _rows(ns):
                if max_rows is not None and shown >= max_rows:
                    break
                if entry is None:
                    out.append(f"    - {text(quiet)}")
                    continue
                out.append("    - " + _entry_markdown(entry, text, code, links))
                out.extend(f"      - {text(d)}" for d in entry.details)
                shown, left = shown + 1, left - 1
    if max_rows is not None and shown >= max_rows and left > 0:
        out += ["", f"{left} more object(s): see the job log."]
    return out


def _entry_markdown(
    entry: PlanEntry,
    text: Callable[[str], str],
    code: Callable[[str], str],
    links: SourceLinks | None,
) -> str:
    parts = [f"{text(entry.ref.kind)} {code(entry.ref.name)}"]
    if entry.action:
        parts.append(entry.action)
    if entry.codes:
        parts.append(f"**{entry.verdict}** " + " ".join(f"`{c}`" for c in entry.codes))
    places = []
    if entry.source is not None:
        places.append(source_link(entry.source, links.base if links else "", links, code))
    if entry.head_source is not None and entry.head_source != entry.source:
        revision = links.head if links else ""
        places.append(source_link(entry.head_source, revision, links, code, head=True))
    if places:
        parts.append(", ".join(places))
    return " · ".join(parts)
