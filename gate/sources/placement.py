"""Read the file texts that say where the candidate shows each finding, and set `head_source`.

After the check, each finding gets the head side's location (`gate.engine.placement` decides it
from the texts): the candidate's own declaration for an object it still declares, else where
the object's text, or its file's kustomization entry, was removed. Files are read only for
removals, each once: from the git object database in git mode (`--render kustomize` too: the
origin files are paths in the repository), from disk in rendered mode.

Placement says where to look; it never changes a verdict. A file that cannot be read leaves the
finding at its base location. A kustomization is read here (`read_kustomization`, YAML as the
rest of gate reads it) and handed to the pure placement as its entries with their lines.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Protocol

import yaml

from gate.engine.check import CheckResult
from gate.engine.flux import parent_ref
from gate.engine.placement import (
    Entry,
    Kustomization,
    KustomizationFiles,
    dropped_entry_line,
    found_removal,
    kustomization_dirs,
    place_removal,
)
from gate.model.errors import GateError
from gate.model.findings import Finding
from gate.model.objects import Source
from gate.model.refs import ObjectRef
from gate.sources.manifests import MAX_MANIFEST_BYTES
from gate.sources.yamlread import KubeLoader

#: kustomize's file names, in the order it looks for them.
_KUSTOMIZATION_ORDER = ("kustomization.yaml", "kustomization.yml", "Kustomization")
#: The top-level kustomization keys that list files and directories to build (a Component
#: dropped from `components:` takes what it made with it, like a dropped resource).
_RESOURCE_KEYS = frozenset({"resources", "bases", "components"})


def resource_entries(text: str) -> tuple[Entry, ...] | None:
    """The entries of a kustomization's top-level `resources:` (and legacy `bases:`) lists, in
    order, each with its 1-based line (a flow list's on the line each item starts); None when the
    text is not one YAML document (kustomize could not build it either).

    Composed, not constructed: the node tree keeps each item's line. Entries that are not
    strings, and empty ones, name nothing and are left out."""
    try:
        root = yaml.compose(text, Loader=KubeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return ()
    out: list[Entry] = []
    for key, value in root.value:
        if not (isinstance(key, yaml.ScalarNode) and key.value in _RESOURCE_KEYS):
            continue
        if not isinstance(value, yaml.SequenceNode):
            continue
        out += [
            (item.value, item.start_mark.line + 1)
            for item in value.value
            if isinstance(item, yaml.ScalarNode) and item.value
        ]
    return tuple(out)


def read_kustomization(text: str | None) -> Kustomization | None:
    """One side's kustomization file, read for placement (None: the file does not exist)."""
    return None if text is None else Kustomization(text, resource_entries(text))


def kustomization_files(
    base_path: str, head_path: str, base_text: str | None, head_text: str | None
) -> KustomizationFiles:
    """A kustomization on both sides, from its paths and texts (None: no such file there)."""
    return KustomizationFiles(
        base_path, head_path, read_kustomization(base_text), read_kustomization(head_text)
    )


class SideFiles(Protocol):
    """The texts of both sides' files, by base-side path."""

    def head_path(self, path: str) -> str | None:
        """The head side's name for a base-side path (None: it has none, e.g. stdin)."""

    def base_text(self, path: str) -> str | None:
        """The base side's text of `path`, None when it does not exist."""

    def head_text(self, path: str) -> str | None:
        """The head side's text of the file a base-side `path` names, None when it is gone."""

    def root(self) -> str | None:
        """The directory kustomizations are looked for up to (`""`: the repository root);
        None when there is none (a single rendered file)."""


@dataclass
class GitFiles:
    """Both revisions of a repository (read-only, from the object database)."""

    repo: str
    base_sha: str
    head_sha: str
    _cache: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def head_path(self, path: str) -> str | None:
        return path

    def base_text(self, path: str) -> str | None:
        return self._read(self.base_sha, path)

    def head_text(self, path: str) -> str | None:
        return self._read(self.head_sha, path)

    def root(self) -> str | None:
        return ""

    def _read(self, sha: str, path: str) -> str | None:
        from gate.sources import gitsource  # git mode only

        key = (sha, path)
        if key not in self._cache:
            try:
                self._cache[key] = gitsource.read_file(self.repo, sha, path)
            except GateError:
                self._cache[key] = None
        return self._cache[key]


@dataclass
class RenderedFiles:
    """Two rendered trees (or two files) on disk, as `--base-manifests/--head-manifests` name
    them; a base file `B/x.yaml` is `H/x.yaml` on the head side."""

    base: str
    head: str
    _cache: dict[Path, str | None] = field(default_factory=dict)

    def head_path(self, path: str) -> str | None:
        rel = self._relative(path)
        if rel is None:
            return None
        if rel == ".":
            return self.head if Path(self.head).is_file() else None
        return (Path(self.head) / rel).as_posix() if Path(self.head).is_dir() else None

    def base_text(self, path: str) -> str | None:
        return self._read(Path(path)) if self._relative(path) is not None else None

    def head_text(self, path: str) -> str | None:
        head = self.head_path(path)
        return self._read(Path(head)) if head is not None else None

    def root(self) -> str | None:
        return _label(self.base) if Path(self.base).is_dir() and Path(self.head).is_dir() else None

    def _relative(self, path: str) -> str | None:
        """`path` relative to the base side (`.`: the base is this one file)."""
        base = _label(self.base)
        if self.base == "-" or path.startswith("<"):
            return None
        if path == base and Path(self.base).is_file():
            return "."
        if base in ("", "."):
            return path
        try:
            return PurePosixPath(path).relative_to(base).as_posix()
        except ValueError:
            return None

    def _read(self, path: Path) -> str | None:
        if path not in self._cache:
            self._cache[path] = _read_small(path)
        return self._cache[path]


def place_findings(result: CheckResult, files: SideFiles | None) -> CheckResult:
    """`result` with each finding's `head_source` set (exempted ones too); unchanged without
    `files`."""
    if files is None:
        return result
    placed: dict[ObjectRef, Source | None] = {}

    def place(f: Finding) -> Finding:
        if f.head_source is not None:
            return f  # placed by its rule: a finding about no manifest (a policy setting)
        if f.ref not in placed:
            placed[f.ref] = _head_source(f.ref, result, files)
        return replace(f, head_source=placed[f.ref])

    decision = result.decision
    return replace(
        result,
        decision=replace(
            decision,
            findings=tuple(place(f) for f in decision.findings),
            exempted=tuple(replace(ex, finding=place(ex.finding)) for ex in decision.exempted),
            standing=tuple(place(f) for f in decision.standing),
        ),
    )


def rendered_files(base: str, head: str) -> RenderedFiles | None:
    """Placement for rendered mode: the two paths as the sources are labelled with them (none
    for stdin)."""
    return None if "-" in (base, head) else RenderedFiles(base, head)


def _head_source(
    ref: ObjectRef, result: CheckResult, files: SideFiles, seen: frozenset[ObjectRef] = frozenset()
) -> Source | None:
    declared = result.head.get(ref)
    if declared is not None:
        return declared.source
    base = result.base.get(ref)
    if base is None or base.source is None:
        return None  # only live (a prune set): nothing in either tree to point at
    source = base.source
    head_path = files.head_path(source.path)
    base_text = files.base_text(source.path)
    if head_path is None or base_text is None:
        return None
    head_text = files.head_text(source.path)
    kustomizations = _kustomizations(source.path, files)
    found = found_removal(source, head_path, base_text, head_text, kustomizations)
    if found is not None:
        return found
    via = _via_parent(base.root, source.path, result, files, seen | {ref})
    if via is not None:
        return via
    return place_removal(source, head_path, base_text, head_text, ())


def _via_parent(
    root: str, path: str, result: CheckResult, files: SideFiles, seen: frozenset[ObjectRef]
) -> Source | None:
    """Where the change is for an object whose own file does not show it, asked of the Flux
    Kustomization (or HelmRelease) that applied it (`--flux-root` tags it): where that parent's
    own removal is (a `./app/ks.yaml` entry dropped), or, when it stays, the `resources:` or
    `components:` entry dropped from the kustomization at its `spec.path` (a shared Component
    no longer used by this app). None when neither says."""
    parent = parent_ref(root)
    if parent is None or parent in seen:
        return None
    if result.head.get(parent) is None:
        return _head_source(parent, result, files, seen)
    declared = result.base.get(parent)
    folder = declared.spec.get("path") if declared is not None else None
    if not isinstance(folder, str) or files.root() != "":
        return None  # git mode only: spec.path is a path in the repository
    folder = posixpath.normpath(folder.removeprefix("./")).removeprefix("./")
    for k in _kustomizations_at(folder if folder != "." else "", files):
        entry = dropped_entry_line(k, path)
        if entry is not None:
            return Source(k.head_path, entry)
    return None


def _kustomizations_at(folder: str, files: SideFiles) -> Iterator[KustomizationFiles]:
    """The kustomization of `folder` on both sides, if base has one."""
    base_path = _kustomization_in(folder, files.base_text)
    if base_path is None:
        return
    head_path = _kustomization_in(folder, files.head_text)
    yield kustomization_files(
        base_path,
        head_path or base_path,
        files.base_text(base_path),
        files.head_text(head_path) if head_path is not None else None,
    )


def _kustomizations(path: str, files: SideFiles) -> Iterator[KustomizationFiles]:
    """The kustomizations of `path`'s directory and its parents up to the side's root, nearest
    first, read as they are asked for."""
    root = files.root()
    if root is None:
        return
    prefix = "" if root in ("", ".") else root + "/"
    if not path.startswith(prefix):
        return
    for folder in kustomization_dirs(path[len(prefix) :]):
        base_path = _kustomization_in(prefix + folder, files.base_text)
        if base_path is None:
            continue
        head_base_path = _kustomization_in(prefix + folder, files.head_text)
        head_name = files.head_path(head_base_path or base_path)
        yield kustomization_files(
            base_path,
            head_name if head_name is not None else base_path,
            files.base_text(base_path),
            files.head_text(head_base_path) if head_base_path is not None else None,
        )


def _kustomization_in(folder: str, read: Callable[[str], str | None]) -> str | None:
    """The (base-side) path of the kustomization file `read` finds in `folder`, if any."""
    for name in _KUSTOMIZATION_ORDER:
        path = posixpath.join(folder, name) if folder else name
        if read(path) is not None:
            return path
    return None


def _label(path: str) -> str:
    return Path(path).as_posix()


def _read_small(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
