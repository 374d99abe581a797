"""Kustomize builds kept between revisions and runs, keyed by what each build read.

In a merge queue a candidate differs from its base by an app or two, yet a Flux repository is a
hundred or more builds per revision; `gate history` builds them again for every commit. A build
is a function of its inputs (the path, the Flux Kustomization's build fields and post-build
values, the fetched remote content, the renderer) and of the files it read. The helper names
those files as it builds (tools/kustomize/trace.go: each file read, each path whose existence
was asked, each directory listed or walked), and each is fingerprinted from git's listing of
the revision (blob ids and modes, `TreeIndex`): no file is read to check. At another revision,
or in a later run, a build whose inputs and fingerprints are all the same is the same build,
so its objects are reused without exporting or building anything.

Not kept: a build that read through a symlink (its target can change while the link does not),
one that read anything outside the revision's tree (besides the fetched remote content, which is
in the key), and one whose helper said anything on stderr (remote entries left out: the ledger
must hear it). Entries live in a `CacheStore` (bounded, safe to delete, shared by concurrent
runs); `PRUNE_GATE_BUILD_CACHE=off` turns it off, a path moves it.
"""

from __future__ import annotations

import bisect
import json
import marshal
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gate.model.objects import RawObject, Source
from gate.sources import yamlevents
from gate.sources.gitsource import SYMLINK_MODE, TreeEntry
from gate.speed import blake2b

if TYPE_CHECKING:
    from gate.sources.cachestore import CacheStore

#: The environment variable that turns the build cache off ("off") or moves it (a path).
ENV = "PRUNE_GATE_BUILD_CACHE"
#: Its folder under the cache root (`gate.sources.cachedirs`).
STORE_NAME = "builds"

#: The sets of reads kept per build inputs: a build reads other files at other revisions (a
#: resource added), and base and candidate may differ so; the latest few are tried.
_VARIANTS = 16

#: Builds kept in the process memo, the latest used: `gate history` over thousands of commits
#: makes a new build or two a commit, and only the latest are asked for again.
_MEMO_MAX = 4_000

#: A read the helper names: (kind, path) with kind file, stat, list or tree (trace.go).
Read = tuple[str, str]
#: A read kept with what the build saw there (its fingerprint at the revision it was built at).
Seen = tuple[str, str, str]


class TreeIndex:
    """One revision's files as git lists them (path -> mode and blob id; directories are the
    paths' parents, as in the exported tree), to fingerprint what a build read without
    reading any file."""

    def __init__(self, entries: Iterable[TreeEntry]) -> None:
        self.files = {e.path: (e.mode, e.sha) for e in entries}
        self._paths = sorted(self.files)
        self._prints: dict[Read, str | None] = {}
        self._folded: set[str] | None = None

    def is_file(self, rel: str) -> bool:
        """True when `rel` is a file (or a symlink) at this revision."""
        return rel in self.files

    def is_dir(self, rel: str) -> bool:
        """True when `rel` ("" for the root) is a directory: some file lies below it."""
        if rel == "":
            return bool(self._paths)
        lo, hi = self._below(rel)
        return lo < hi

    def fingerprint(self, kind: str, rel: str) -> str | None:
        """What a build that read `rel` as `kind` saw, as a string equal at two revisions exactly
        when the build would see the same; None when it cannot be told (a symlink on the way)."""
        read = (kind, rel)
        if read not in self._prints:
            self._prints[read] = self._fingerprint(kind, rel)
        return self._prints[read]

    def _fingerprint(self, kind: str, rel: str) -> str | None:
        if self.through_link(rel):
            return None
        entry = self.files.get(rel)
        if entry is not None:
            return "f" if kind == "stat" else f"f{entry[0]}:{entry[1]}"
        if not self.is_dir(rel):
            # on a file system that ignores case (macOS, Windows) the build found `App.yaml`
            # where it asked for `app.yaml`: absent here, yet read
            return None if rel.lower() in self._folded_paths() else "-"
        if kind in ("stat", "file"):
            return "d"
        lo, hi = self._below(rel)
        inside = self._paths[lo:hi]
        start = len(rel) + 1 if rel else 0
        digest = blake2b(digest_size=16)
        if kind == "list":
            names = {
                p[start:].partition("/")[0] + ("/" if "/" in p[start:] else "") for p in inside
            }
            for name in sorted(names):
                digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
            return "l" + digest.hexdigest()
        for path in inside:  # tree: everything below
            mode, sha = self.files[path]
            if mode == SYMLINK_MODE:
                return None
            digest.update(f"{path[start:]}\0{mode}\0{sha}\0".encode("utf-8", "surrogateescape"))
        return "t" + digest.hexdigest()

    def _folded_paths(self) -> set[str]:
        """Every file and directory, in lower case."""
        if self._folded is None:
            folded = set()
            for path in self._paths:
                while path and path not in folded:
                    folded.add(path)
                    path = path.rpartition("/")[0]
            self._folded = {p.lower() for p in folded}
        return self._folded

    def _below(self, rel: str) -> tuple[int, int]:
        """The range of `_paths` below directory `rel` ('/' + 1 is '0')."""
        if rel == "":
            return 0, len(self._paths)
        return (
            bisect.bisect_left(self._paths, rel + "/"),
            bisect.bisect_left(self._paths, rel + "0"),
        )

    def through_link(self, rel: str) -> bool:
        """True when `rel` or a directory above it is a symlink."""
        at = 0
        while True:
            cut = rel.find("/", at)
            prefix = rel if cut < 0 else rel[:cut]
            entry = self.files.get(prefix)
            if entry is not None and entry[0] == SYMLINK_MODE:
                return True
            if cut < 0:
                return False
            at = cut + 1


@dataclass
class Trace:
    """What one build read, as the helper said (its builds' reads, in [kind, path] pairs);
    not `complete` when a build of it did not say (a fallback renderer)."""

    reads: list[list[str]] = field(default_factory=list)
    complete: bool = True

    def add(self, reads: list[list[str]] | None) -> None:
        if reads is None:
            self.complete = False
        else:
            self.reads.extend(reads)


def enabled() -> bool:
    """False when `PRUNE_GATE_BUILD_CACHE` turns the cache off: nothing is kept, not even for
    this process (what the benchmarks compare against)."""
    return os.environ.get(ENV, "").lower() not in ("off", "0", "false", "no")


def fixed_inputs(remote: dict[str, str], renderer: Sequence[str]) -> str:
    """What every build of a revision shares among its inputs: the fetched remote content (by
    hash) and the renderer (by file identity). Read once per revision, not per build."""
    fetched = {url: _content_hash(file) for url, file in sorted(remote.items())}
    return json.dumps([fetched, [file_identity(c) for c in renderer]], sort_keys=True)


def inputs_key(
    rel: str, kustomization: dict[str, Any] | None, flux: dict[str, Any] | None, fixed: str
) -> str:
    """The key of a build's inputs other than the files it reads: the path and the Flux fields,
    and what the revision's builds share (`fixed_inputs`)."""
    text = json.dumps([rel, kustomization, flux, fixed], sort_keys=True, default=str)
    return blake2b(text.encode(), digest_size=16).hexdigest()


def relative_reads(
    reads: Iterable[Sequence[str]], tree: Path, constant: Iterable[Path]
) -> list[Read] | None:
    """The helper's reads (absolute paths) as paths from the repository root; what lies under
    one of `constant` (the wrapper, the fetched remote files: fixed by the key) is left out;
    None when something else outside the tree was read (the build is not kept)."""
    top = str(tree)
    fixed = [str(c) for c in constant]
    out: list[Read] = []
    for kind, path in reads:
        if path == top:
            out.append((kind, ""))
        elif path.startswith(top + "/"):
            out.append((kind, path[len(top) + 1 :]))
        elif not any(path == f or path.startswith(f + "/") for f in fixed):
            return None
    return sorted(set(out))


class BuildCache:
    """The kept builds: a process memo before the store, so `gate history` reuses a build from
    one commit to the next without a query."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._variants: dict[str, list[tuple[Seen, ...]]] = {}
        self._built: OrderedDict[str, tuple[str, list[RawObject]]] = OrderedDict()
        self.hits = self.misses = 0

    def lookup(self, key: str, index: TreeIndex, label: str) -> list[RawObject] | None:
        """The objects a build with inputs `key` made at a revision whose files (`index`) the
        build saw the same way, sources labelled `label` where a stored one was the build's;
        None when there is none."""
        for seen in self._variants_of(key):
            digest = _digest(((kind, rel) for kind, rel, _ in seen), index)
            if digest is None:
                continue
            found = self._result(f"out:{key}:{digest}")
            if found is not None:
                stored_label, objects = found
                with self._lock:
                    self.hits += 1
                return [_relabelled(o, stored_label, label) for o in objects]
        with self._lock:
            self.misses += 1
        return None

    def keep(
        self,
        key: str,
        index: TreeIndex,
        reads: Sequence[Read],
        label: str,
        objects: Sequence[RawObject],
    ) -> None:
        """Keep a successful build (its objects, not mutated after) for another revision."""
        digest = _digest(reads, index)
        if digest is None:
            return
        variant = tuple((kind, rel, index.fingerprint(kind, rel) or "") for kind, rel in reads)
        known = [v for v in self._variants_of(key) if v != variant]
        variants = [variant, *known][:_VARIANTS]
        out = f"out:{key}:{digest}"
        with self._lock:
            self._variants[key] = variants
            self._remember(out, (label, list(objects)))
        store = _store()
        if store.enabled:
            rows = [(o.body, o.source.path, o.source.line) for o in objects]
            try:
                data = marshal.dumps((label, rows))
            except ValueError:
                return
            store.write(f"reads:{key}", marshal.dumps([list(v) for v in variants]))
            store.write(out, data)

    def last_reads(self, key: str) -> tuple[Seen, ...] | None:
        """What the build with inputs `key` read the last time it was kept, if ever, with what
        it saw there: most likely what it reads now (`gate.sources.partial` writes only that)."""
        variants = self._variants_of(key)
        return variants[0] if variants else None

    def _variants_of(self, key: str) -> list[tuple[Seen, ...]]:
        with self._lock:
            known = self._variants.get(key)
        if known is not None:
            return known
        raw = _store().read([f"reads:{key}"]).get(f"reads:{key}")
        variants = _load_variants(raw) if raw is not None else []
        with self._lock:
            self._variants.setdefault(key, variants)
            return self._variants[key]

    def _result(self, out: str) -> tuple[str, list[RawObject]] | None:
        with self._lock:
            known = self._built.get(out)
            if known is not None:
                self._built.move_to_end(out)
                return known
        raw = _store().read([out]).get(out)
        found = _load_result(raw) if raw is not None else None
        if found is not None:
            with self._lock:
                self._remember(out, found)
        return found

    def _remember(self, out: str, result: tuple[str, list[RawObject]]) -> None:
        """Keep `result` in the memo (the lock held), the least recently used past the bound
        going."""
        self._built[out] = result
        self._built.move_to_end(out)
        while len(self._built) > _MEMO_MAX:
            self._built.popitem(last=False)


def _digest(reads: Iterable[Read], index: TreeIndex) -> str | None:
    digest = blake2b(digest_size=16)
    for kind, rel in reads:
        print_ = index.fingerprint(kind, rel)
        if print_ is None:
            return None
        digest.update(f"{kind}\0{rel}\0{print_}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _relabelled(obj: RawObject, old: str, new: str) -> RawObject:
    if obj.source.path != old:
        return obj
    return RawObject(obj.body, Source(new, obj.source.line), obj.root)


def _load_variants(raw: bytes) -> list[tuple[Seen, ...]]:
    try:
        data = marshal.loads(raw)
    except (EOFError, ValueError, TypeError):
        return []
    if not isinstance(data, list):
        return []
    out = []
    for variant in data:
        if isinstance(variant, list) and all(
            isinstance(r, tuple) and len(r) == 3 and all(isinstance(x, str) for x in r)
            for r in variant
        ):
            out.append(tuple(variant))
    return out


def _load_result(raw: bytes) -> tuple[str, list[RawObject]] | None:
    try:
        label, rows = marshal.loads(raw)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(label, str) or not isinstance(rows, list):
        return None
    out = []
    for row in rows:
        if not (
            isinstance(row, tuple)
            and len(row) == 3
            and isinstance(row[0], dict)
            and isinstance(row[1], str)
            and type(row[2]) is int
        ):
            return None
        out.append(RawObject(row[0], Source(row[1], row[2])))
    return label, out


def _content_hash(file: str) -> str:
    try:
        return blake2b(Path(file).read_bytes(), digest_size=16).hexdigest()
    except OSError:
        return f"unreadable:{file}"


def file_identity(path: str) -> str:
    """A renderer named by path, size and change time: a rebuilt helper is another renderer."""
    try:
        st = os.stat(path)  # noqa: PTH116 (one call, three fields)
    except OSError:
        return path
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


#: Files whose code decides what a kept build holds (the build's tracing back to files, the
#: parser): a change to one is a new store rather than a stale answer.
_CODE = (
    "sources/buildcache.py",
    "sources/render.py",
    "sources/manifests.py",
    "sources/yamlevents.py",
    "sources/yamlread.py",
    "model/shapes.py",
)


@cache
def _code_version() -> str:
    package = Path(__file__).resolve().parent.parent
    h = blake2b(yaml.__version__.encode(), digest_size=8)
    h.update(yamlevents.READER_ID.encode())  # the native reader names its version and build
    for name in _CODE:
        h.update((package / name).read_bytes())
    return h.hexdigest()


@cache
def _store() -> CacheStore:
    from gate.sources.cachestore import CacheStore  # sqlite: only when a build is kept

    return CacheStore(STORE_NAME, _code_version(), env=ENV)


#: The one build cache of this process.
BUILDS = BuildCache()


def reset() -> None:
    """Forget the process memo and the store's settings (tests change the environment)."""
    global BUILDS
    if _store.cache_info().currsize:
        _store().reset()
    _store.cache_clear()
    BUILDS = BuildCache()


def flush() -> None:
    """Write what was kept now rather than at exit (a later run in the same process: tests)."""
    if _store.cache_info().currsize:
        _store().flush()
