"""Read manifests from a git tree at a revision, without a checkout.

In the merge queue the gate compares two revisions (base and candidate) of one repository, and the
work tree holds at most one of them. Checking the other one out would race with the CI job and is
slow, so every read here goes through the object database, with git itself (no Python git
library: GitPython's import alone cost more than a tree's reads, and it mistook a git directory
without a `config` file, as mirrors hold, for a work tree's parent): one `git ls-tree -r` per
revision (kept for the process: a commit's tree never changes, and a check lists it for
submodules, kustomizations, manifests and placement) and one `git cat-file --batch` given every
blob id at once. That keeps a tree of 2,000 files at two process starts, instead of 2,000
subprocesses; files read one at a time (placement's) are asked of one `cat-file` process kept
open. A blob is parsed once per process whatever the paths and sides that hold it, and not at
all when the parse cache has its id from an earlier run.

Labels are paths relative to the repository root, so a finding points at `path:line` in the
repository, which is what GitHub annotations need.

A shallow clone (actions/checkout's default `fetch-depth: 1`) lacks the base revision; that is the
most common way git mode fails, so the error says so and how to fetch it.
"""

from __future__ import annotations

import atexit
import os
import posixpath
import stat
import subprocess
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from gate.model.errors import GitError, InputError
from gate.model.objects import RawObject
from gate.sources import parsecache
from gate.sources.manifests import (
    KUSTOMIZATION_NAMES,
    MANIFEST_SUFFIXES,
    helm_chart_dirs,
    in_any_dir,
    parse_uncached,
    relabel,
)

#: Files kustomize reads as its own configuration: they are build instructions, not objects.

#: git tree entry modes (as `git ls-tree` prints them).
_MODE_SYMLINK = "120000"
#: A symlink's mode in a git tree.
SYMLINK_MODE = _MODE_SYMLINK
_MODE_EXECUTABLE = "100755"


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One blob of a tree: its path from the repository root, its git mode and object id."""

    path: str
    mode: str
    sha: str


def work_tree(repo: str | Path) -> str | None:
    """The work tree of the repository that contains `repo`, or None for a bare one (a git
    directory, a mirror)."""
    return _open(repo).working_tree_dir


def _not_a_repository(repo: str | Path) -> str:
    return (
        f"{repo}: not a git repository (git mode reads --base/--head from a clone; "
        "use --base-manifests/--head-manifests for files on disk)"
    )


def is_repository(repo: str | Path) -> bool:
    """True when `repo` is in a git repository (a work tree, a subdirectory, or a bare repo)."""
    try:
        _open(repo)
    except GitError:
        return False
    return True


def resolve_revision(repo: str | Path, rev: str) -> str:
    """The full commit sha of `rev`; a revision that is not in the clone is an actionable error."""
    r = _open(repo)
    return _resolve(r, rev)


def merge_base(repo: str | Path, base: str, head: str) -> str:
    """The commit `head` forked from `base` (`git merge-base`): what a pull request changes is
    the difference from there to its head, not from the base branch's tip, which may have moved
    on (a branch behind main would otherwise be judged for main's own changes, reversed).

    No common ancestor is an error: in a shallow clone it is usually missing history, and the
    message says how to fetch it.
    """
    r = _open(repo)
    a, b = _resolve(r, base), _resolve(r, head)
    try:
        out = r.git("merge-base", a, b).strip()
    except _GitFailedError:
        out = ""
    if out:
        return out
    if _is_shallow(r):
        raise GitError(
            f"no merge base of {base} and {head} in this clone: the repository is shallow, "
            "so the commit the branch forked from is missing. In GitHub Actions give "
            "actions/checkout `fetch-depth: 0` (or `git fetch --unshallow origin`) before "
            "`gate check`"
        )
    raise GitError(
        f"{base} and {head} have no common ancestor, so there is no merge base to compare "
        "the head with: give --base and --head explicitly"
    )


def first_parent_log(repo: str | Path, start: str, end: str) -> list[tuple[str, str | None, str]]:
    """The first-parent commits after `start` up to `end`, oldest first: (sha, first parent or
    None for a root commit, subject). Run by git itself, so a bare clone or git directory (a
    mirror) reads as a work tree does."""
    r = _open(repo)
    a, b = _resolve(r, start), _resolve(r, end)
    try:
        out = r.git("log", "--first-parent", "--reverse", "--format=%H%x00%P%x00%s", f"{a}..{b}")
    except _GitFailedError as exc:
        raise GitError(f"cannot list the commits {start}..{end}: {exc.stderr}") from None
    commits: list[tuple[str, str | None, str]] = []
    for line in out.splitlines():
        sha, parents, subject = line.split("\0", 2)
        commits.append((sha, next(iter(parents.split()), None), subject))
    return commits


def path_exists(repo: str | Path, rev: str, path: str) -> bool:
    """True when `path` (from the repository root) is a file or directory at `rev`."""
    r = _open(repo)
    norm = path.strip("/").removeprefix("./") or "."
    if norm == ".":
        return True
    try:
        r.git("cat-file", "-e", f"{_resolve(r, rev)}:{norm}")
    except _GitFailedError:
        return False
    return True


def read_tree(repo: str | Path, rev: str, paths: Sequence[str] = ()) -> list[RawObject]:
    """Parse every .yaml/.yml/.json blob under `paths` (default: the whole tree) at `rev`.

    Paths are relative to the repository root. Hidden directories and files (`.github/...`) are
    skipped unless a path names them, and so are kustomize's own `kustomization.yaml` files
    (build them with `gate.sources.render` instead). A path that does not exist at `rev` is a
    `GitError`.
    """
    r = _open(repo)
    sha = _resolve(r, rev)
    selected = _select(r, sha, rev, paths)
    charts = helm_chart_dirs(e.path for e in selected)
    entries = [
        e
        for e in selected
        if e.path.endswith(MANIFEST_SUFFIXES)
        and not in_any_dir(e.path, charts)
        and e.mode != _MODE_SYMLINK
        and e.path.rpartition("/")[2] not in KUSTOMIZATION_NAMES
    ]
    keys = {e.sha: parsecache.blob_key(e.sha, True) for e in entries}
    # Parsed in this process (the other side shares most blobs) or on an earlier run: the blob
    # need not even be read.
    have = parsecache.recall(keys.values())
    todo: dict[str, TreeEntry] = {}  # one parse per blob, under its first path
    for e in entries:
        if keys[e.sha] not in have and e.sha not in todo:
            todo[e.sha] = e
    for entry, data in _blobs(r, list(todo.values())):
        key = keys[entry.sha]
        objects = parse_uncached(
            _decode(data, entry.path), entry.path, only_objects=True, cache_key=key
        )
        have[key] = [(o.body, o.source.line) for o in objects]
        parsecache.remember(key, have[key])
    wanted = [_normalise(r, p) for p in paths] or ["."]
    out: list[RawObject] = []
    for e in entries:
        root = next(
            (w for w in wanted if w == "." or e.path == w or e.path.startswith(w + "/")), "."
        )
        out.extend(relabel(have[keys[e.sha]], e.path, root))
    return out


def kustomization_files(repo: str | Path, rev: str, paths: Sequence[str] = ()) -> list[str]:
    """The kustomize configuration files (`kustomization.yaml`, ...) under `paths` at `rev`:
    where reading files one by one differs from what a deployer applies."""
    r = _open(repo)
    selected = _select(r, _resolve(r, rev), rev, paths)
    return sorted(e.path for e in selected if e.path.rpartition("/")[2] in KUSTOMIZATION_NAMES)


def read_file(repo: str | Path, rev: str, path: str) -> str | None:
    """The text of one file at `rev`, or None when the file does not exist there."""
    r = _open(repo)
    for entry in _at_path(r, _resolve(r, rev), _normalise(r, path)):
        return _decode(_blob(r, entry), entry.path)
    return None


def read_blob(repo: str | Path, rev: str, path: str) -> tuple[bool, bytes] | None:
    """(is a symlink, raw bytes) of one file at `rev`, or None when it does not exist there.

    For files whose kind matters (the policy: a symlink blob would point the gate elsewhere) and
    whose decoding the caller owns.
    """
    r = _open(repo)
    for entry in _at_path(r, _resolve(r, rev), _normalise(r, path)):
        return entry.mode == _MODE_SYMLINK, _blob(r, entry)
    return None


def tree_entries(repo: str | Path, sha: str) -> list[TreeEntry]:
    """Every blob and symlink of commit `sha` (a full sha), from one listing kept for the
    process: what the build cache fingerprints a build's reads with, and the export writes."""
    return _ls_tree(_open(repo), sha, [])


def read_blobs(
    repo: str | Path, sha: str, entries: Sequence[TreeEntry]
) -> Iterator[tuple[TreeEntry, bytes]]:
    """The content of each of `entries` of commit `sha`, in one `git cat-file` (fetched first
    when missing from a partial clone)."""
    r = _open(repo)
    _prefetch(r, sha, entries)
    return _blobs(r, entries)


def export_tree(repo: str | Path, rev: str, dest: str | Path) -> str:
    """Write the files a build reads at `rev` into the directory `dest` (no checkout); returns
    the sha.

    Only what a build or the manifests need is read (`needed_entries`): manifests (YAML, JSON),
    kustomization files, the files kustomizations name (generators' files, patches, ...),
    Helm charts whole, and symlinks. In a partial clone (`git clone --filter=blob:none`) a blob
    that is needed and missing is fetched by git on demand; one that is not needed (an image,
    a README) is never read, so never fetched.

    Unlike `git archive`, this ignores `export-ignore` / `export-subst` attributes, so the files
    are exactly what was committed. Symlinks are recreated only when they stay inside the tree;
    submodules are skipped (their content is not in this repository).
    """
    return sync_tree(repo, rev, dest).sha


@dataclass(frozen=True)
class Exported:
    """What an export wrote into its directory: the revision, each file's (mode, blob id) and
    every directory, so that another revision can be written over it by difference; `complete`
    when it is the whole export, not a part of it (`sync_tree`'s `subset`)."""

    sha: str
    files: dict[str, tuple[str, str]]
    dirs: frozenset[str]
    complete: bool = True


@dataclass(frozen=True)
class ExportPlan:
    """What the whole export of a revision holds: the files (`needed_entries` and what the
    kustomizations name) and every directory of the tree."""

    files: dict[str, TreeEntry]
    dirs: frozenset[str]

    @property
    def has_links(self) -> bool:
        return any(e.mode == _MODE_SYMLINK for e in self.files.values())


_PLANS: dict[tuple[str, str], ExportPlan] = {}
_PLANS_MAX = 4
_PLANS_LOCK = threading.Lock()


def export_plan(repo: str | Path, sha: str) -> ExportPlan:
    """The export of commit `sha` (a full sha), without writing it: the kustomization files
    are read (they name the other files a build reads), nothing else. Kept for the process."""
    r = _open(repo)
    with _PLANS_LOCK:
        known = _PLANS.get((r.git_dir, sha))
    if known is not None:
        return known
    entries = _ls_tree(r, sha, [])
    first = needed_entries(entries)
    listed = [
        e
        for e in first
        if e.path.rpartition("/")[2] in KUSTOMIZATION_NAMES and e.mode != _MODE_SYMLINK
    ]
    _prefetch(r, sha, listed)
    kustomizations = {e.path: blob for e, blob in _blobs(r, listed)}
    referenced = referenced_entries(entries, kustomizations, {e.path for e in first})
    # Every directory of the tree exists, though some of its files are not read: Flux builds
    # a `spec.path` that holds only a README (to nothing), and fails on one that is absent.
    plan = ExportPlan({e.path: e for e in (*first, *referenced)}, _folders(e.path for e in entries))
    with _PLANS_LOCK:
        while len(_PLANS) >= _PLANS_MAX:
            del _PLANS[next(iter(_PLANS))]
        _PLANS[(r.git_dir, sha)] = plan
    return plan


def sync_tree(
    repo: str | Path,
    rev: str,
    dest: str | Path,
    previous: Exported | None = None,
    subset: Iterable[str] | None = None,
) -> Exported:
    """`export_tree`, into a `dest` that holds the export `previous` (or nothing): only the
    files that differ are written or removed. `gate history` exports a commit over its parent's
    export, which differs by a few files, instead of writing the whole tree again.

    With `subset` (paths of files and directories), only those of the export are written, with
    the directories above them, beside what `previous` holds that is still the same: a build
    that read nothing else builds there as in the whole export (`gate.sources.partial`)."""
    root = Path(dest)
    r = _open(repo)
    sha = _resolve(r, rev)
    plan = export_plan(repo, sha)
    old = previous.files if previous is not None else {}
    old_dirs = previous.dirs if previous is not None else frozenset()
    if subset is None:
        files = {p: (e.mode, e.sha) for p, e in plan.files.items()}
        dirs = plan.dirs
    else:
        wanted = set(subset)
        files = {
            p: (e.mode, e.sha)
            for p, e in plan.files.items()
            if p in wanted or old.get(p) == (e.mode, e.sha)
        }
        kept_dirs = (wanted | old_dirs) & plan.dirs
        dirs = _folders(files) | kept_dirs | _folders(kept_dirs)
    for path, was in old.items():
        if files.get(path) != was:
            root.joinpath(path).unlink(missing_ok=True)
    for folder in sorted(old_dirs - dirs, reverse=True):  # the deepest first
        with suppress(OSError):  # not empty: a kept directory's parent
            root.joinpath(folder).rmdir()
    made: set[Path] = set()  # directories made so far: a mkdir per file costs more than its write
    for folder in sorted(dirs - old_dirs):
        target = root.joinpath(*folder.split("/"))
        target.mkdir(parents=True, exist_ok=True)
        made.add(target)
    made.update(root.joinpath(*d.split("/")) for d in dirs)
    changed = [plan.files[p] for p, at in files.items() if old.get(p) != at]
    _prefetch(r, sha, changed)
    for entry, blob in _blobs(r, changed):
        _write_entry(root, entry, blob, made)
    return Exported(sha, files, dirs, complete=len(files) == len(plan.files) and dirs == plan.dirs)


def _folders(paths: Iterable[str]) -> frozenset[str]:
    """Every directory above `paths` (`a`, `a/b` for `a/b/c.yaml`)."""
    out: set[str] = set()
    for path in paths:
        folder = posixpath.dirname(path)
        while folder and folder not in out:
            out.add(folder)
            folder = posixpath.dirname(folder)
    return frozenset(out)


def _prefetch(r: _Repo, sha: str, entries: Sequence[TreeEntry]) -> None:
    """In a partial clone, fetch the blobs of `entries` that the clone lacks in one request:
    `cat-file` would fetch them one process each (minutes for a tree of a thousand manifests).
    A clone that is not partial costs one `git config`; a failed fetch is left to `cat-file`,
    which fetches or names the blob."""
    remote = _promisor_remote(r)
    if remote is None:
        return  # not a partial clone
    try:  # `--missing=print` lists what is absent without fetching it
        listed = r.git("rev-list", "--objects", "--no-walk", "--missing=print", sha)
    except _GitFailedError:
        return
    missing = {line[1:] for line in listed.splitlines() if line.startswith("?")}
    wanted = sorted({e.sha for e in entries} & missing)
    if not wanted:
        return
    subprocess.run(
        [
            "git",
            f"--git-dir={r.git_dir}",
            "-c",
            "fetch.negotiationAlgorithm=noop",
            "fetch",
            remote,
            "--no-tags",
            "--no-write-fetch-head",
            "--recurse-submodules=no",
            "--filter=blob:none",
            "--stdin",
        ],
        input="".join(f"{w}\n" for w in wanted).encode(),
        capture_output=True,
        check=False,
    )


def _promisor_remote(r: _Repo) -> str | None:
    """The remote a partial clone fetches missing objects from (`remote.<name>.promisor`, or
    `extensions.partialClone`), or None for a complete clone."""
    try:
        said = r.git("config", "--get-regexp", r"^(remote\..*\.promisor|extensions\.partialclone)$")
    except _GitFailedError:
        return None  # no such key: not a partial clone
    for line in said.splitlines():
        key, _, value = line.partition(" ")
        if key == "extensions.partialclone" and value:
            return value
        if key.startswith("remote.") and value.lower() in ("true", "yes", "on", "1"):
            return key.removeprefix("remote.").removesuffix(".promisor")
    return None


def _write_entry(root: Path, entry: TreeEntry, data: bytes, made: set[Path]) -> None:
    target = root.joinpath(*entry.path.split("/"))
    if target.parent not in made:
        target.parent.mkdir(parents=True, exist_ok=True)
        made.add(target.parent)
    if entry.mode == _MODE_SYMLINK:
        link = data.decode("utf-8", "surrogateescape")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(entry.path), link))
        if not posixpath.isabs(link) and resolved != ".." and not resolved.startswith("../"):
            target.symlink_to(link)
        return
    target.write_bytes(data)
    if entry.mode == _MODE_EXECUTABLE:
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def needed_entries(entries: Sequence[TreeEntry]) -> list[TreeEntry]:
    """The entries any build reads whatever its kustomizations say: manifests (`.yaml`, `.yml`,
    `.json`), kustomization files, every file of a Helm chart (templates, helpers), symlinks."""
    charts = helm_chart_dirs(e.path for e in entries)
    return [
        e
        for e in entries
        if e.mode == _MODE_SYMLINK
        or e.path.endswith(MANIFEST_SUFFIXES)
        or e.path.rpartition("/")[2] in KUSTOMIZATION_NAMES
        or in_any_dir(e.path, charts)
    ]


#: Kustomization fields that list files (or directories of files) the build reads beside the
#: manifests: patches, transformer configurations (generators' files are read apart).
_PATH_LISTS = (
    "patchesStrategicMerge",
    "configurations",
    "crds",
    "transformers",
    "generators",
    "validators",
)
#: Fields that name files or directories that are themselves kustomize input: their files
#: are manifests and kustomizations (read anyway), never a directory's every file.
_INPUT_LISTS = ("resources", "components")
#: Fields whose entries are objects with a `path:` to a file.
_PATH_OBJECTS = ("patches", "patchesJson6902", "replacements", "openapi")


def referenced_entries(
    entries: Sequence[TreeEntry], kustomizations: dict[str, bytes], written: set[str]
) -> list[TreeEntry]:
    """The entries the kustomizations name that `needed_entries` left out (a generator's
    `app.conf`, a patch in a `.patch` file, a directory of files): resolved from each
    kustomization's directory, as kustomize does."""
    by_path = {e.path: e for e in entries}
    wanted: set[str] = set()
    for path, data in kustomizations.items():
        here = path.rpartition("/")[0]
        for ref, whole_dir in _kustomization_refs(data):
            norm = posixpath.normpath(posixpath.join(here, ref))
            if norm.startswith("../") or norm == "..":
                continue
            if norm in by_path:
                wanted.add(norm)
            elif whole_dir and norm != ".":  # a directory of a generator's (or patch's) files
                wanted.update(p for p in by_path if p.startswith(norm + "/"))
    return [by_path[p] for p in sorted(wanted - written)]


def _kustomization_refs(data: bytes) -> list[tuple[str, bool]]:
    """The local paths a kustomization file names, each with whether a directory there is read
    whole (not for `resources:`/`components:`, whose directories are kustomize input). URLs
    and unreadable files give none: the build says what is wrong with them."""
    import yaml

    try:
        doc = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return []
    if not isinstance(doc, dict):
        return []
    refs = [*_generator_refs(doc), *_field_refs(doc), *_chart_refs(doc)]
    inputs = [r for field in _INPUT_LISTS for r in _as_list(doc.get(field))]
    return [
        (ref.rpartition("=")[2], whole_dir)  # `key=path` in generators' files
        for ref, whole_dir in [*((r, True) for r in refs), *((r, False) for r in inputs)]
        if isinstance(ref, str) and ref and "://" not in ref and not posixpath.isabs(ref)
    ]


def _generator_refs(doc: dict[str, object]) -> list[object]:
    """`files:`, `envs:` and `env:` of the ConfigMap and Secret generators."""
    refs: list[object] = []
    for gen in (*_as_list(doc.get("configMapGenerator")), *_as_list(doc.get("secretGenerator"))):
        if isinstance(gen, dict):
            refs.extend(_as_list(gen.get("files")))
            refs.extend(_as_list(gen.get("envs")))
            refs.append(gen.get("env"))
    return refs


def _field_refs(doc: dict[str, object]) -> list[object]:
    """Lists of paths (`patchesStrategicMerge`, `crds`, ...) and objects' `path:` (`patches`,
    `replacements`, `openapi`, ...)."""
    refs: list[object] = [r for field in _PATH_LISTS for r in _as_list(doc.get(field))]
    for field in _PATH_OBJECTS:
        value = doc.get(field)
        items = [value] if isinstance(value, dict) else _as_list(value)
        refs.extend(i.get("path") for i in items if isinstance(i, dict))
    return refs


def _chart_refs(doc: dict[str, object]) -> list[object]:
    """The values files and chart home of kustomize's Helm inflation."""
    refs: list[object] = []
    for chart in (*_as_list(doc.get("helmCharts")), doc.get("helmGlobals")):
        if isinstance(chart, dict):
            refs.extend(chart.get(k) for k in ("valuesFile", "chartHome"))
            refs.extend(_as_list(chart.get("additionalValuesFiles")))
    return refs


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def is_shallow(repo: str | Path) -> bool:
    """Whether the clone is shallow (has grafted history)."""
    r = _open(repo)
    return _is_shallow(r)


# --- internals: every function below takes an open Repo -------------------------------------


class _GitFailedError(Exception):
    """git ran and exited non-zero; `stderr` is what it said."""

    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


@dataclass(frozen=True, slots=True)
class _Repo:
    """A repository as git finds it: its git directory, and its work tree (None: bare)."""

    git_dir: str
    working_tree_dir: str | None

    def git(self, *args: str) -> str:
        """`git <args>` in this repository: its output (less one final newline, as GitPython
        gives it); `_GitFailedError` when git fails."""
        out = _run_git(f"--git-dir={self.git_dir}", *args)
        return out.decode("utf-8", "surrogateescape").removesuffix("\n")


def _run_git(*args: str) -> bytes:
    try:
        done = subprocess.run(
            ["git", *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={**os.environ, "LANGUAGE": "C", "LC_ALL": "C"},  # English, as GitPython sets
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed (git mode needs the git command on PATH)") from None
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}") from None
    if done.returncode != 0:
        raise _GitFailedError(done.stderr.decode("utf-8", "replace").strip())
    return done.stdout


#: Repositories found, by the absolute path asked about: a check opens the same one ~30 times.
_FOUND: dict[str, _Repo] = {}


def _open(repo: str | Path) -> _Repo:
    """The repository that contains `repo` (a work tree, a subdirectory, or a bare repo), as git
    itself finds it (one `git rev-parse` per path and process)."""
    # as GitPython read it: `~` and variables expanded, absolute, `..` folded
    where = os.path.abspath(os.path.expandvars(os.path.expanduser(repo)))  # noqa: PTH100, PTH111
    found = _FOUND.get(where)
    if found is not None:
        return found
    if not os.path.exists(where):  # noqa: PTH110
        raise GitError(f"{repo}: no such directory")
    start = where if os.path.isdir(where) else os.path.dirname(where)  # noqa: PTH112, PTH120
    try:
        try:
            out = _run_git(
                "-C", start, "rev-parse", "--absolute-git-dir", "--show-toplevel"
            ).decode("utf-8", "surrogateescape")
            git_dir, top = out.split("\n")[:2]
            found = _Repo(git_dir, top)
        except _GitFailedError as exc:
            if "not a git repository" in exc.stderr:
                raise
            # a bare repository, or its git directory: no work tree
            out = _run_git("-C", start, "rev-parse", "--absolute-git-dir").decode(
                "utf-8", "surrogateescape"
            )
            found = _Repo(out.split("\n")[0], None)
    except _GitFailedError as exc:
        if "not a git repository" in exc.stderr:
            raise GitError(_not_a_repository(repo)) from None
        raise GitError(f"{repo}: {exc.stderr}") from None
    _FOUND[where] = found
    return found


#: The revision that names the index, what `git commit` would record now (`gate check --head
#: :staged`, the pre-commit hook's candidate). No ref or revision git knows can be spelled so:
#: a ref name may not hold `:`, and `:path` names a blob, never a commit.
STAGED = ":staged"


def _resolve(r: _Repo, rev: str) -> str:
    if rev == STAGED:
        return _staged_commit(r)
    if not rev or rev.startswith("-"):
        raise GitError(f"invalid revision {rev!r}")
    if (r.git_dir, rev) in _COMMITS:
        return rev
    try:
        out = r.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except _GitFailedError:
        out = ""
    if out:
        _COMMITS.add((r.git_dir, out.strip()))
        return out.strip()
    if _is_shallow(r):
        raise GitError(
            f"revision {rev} is not in this clone: the repository is shallow (cloned with a "
            f"limited depth), so older commits are missing. Fetch it with "
            f"`git fetch --depth=2 origin {rev}` (or `git fetch --unshallow origin`); in GitHub "
            "Actions, give actions/checkout `fetch-depth: 0`, or fetch the base revision in a "
            "step before `gate check`"
        )
    raise GitError(
        f"unknown revision {rev}: it is not a commit in this repository. If it exists on the "
        f"remote, fetch it first: `git fetch origin {rev}`"
    )


#: The commit made of the index, by git directory: one per process, as the index was at first.
_STAGED: dict[str, str] = {}


def _staged_commit(r: _Repo) -> str:
    """The index as a commit whose parent is HEAD (none before the first commit), so that every
    reader takes it as it takes a revision. Only objects are written (`git write-tree`, `git
    commit-tree`), never a ref: the commit is unreachable and git's gc drops it. In a hook of
    `git commit`, git's GIT_INDEX_FILE names the index being committed, which git honours here."""
    if r.git_dir in _STAGED:
        return _STAGED[r.git_dir]
    if r.working_tree_dir is None:
        raise GitError(f"{STAGED}: a bare repository has no index to read")
    try:
        tree = r.git("write-tree").strip()
    except _GitFailedError as exc:
        raise GitError(
            f"{STAGED}: git cannot write the index as a tree ({exc.stderr}); resolve the "
            "conflicts and `git add` the files first"
        ) from None
    try:
        parent = ["-p", r.git("rev-parse", "--verify", "--quiet", "HEAD^{commit}").strip()]
    except _GitFailedError:
        parent = []  # before the first commit
    identity = ("-c", "user.name=prune-gate", "-c", "user.email=prune-gate@localhost")
    message = "prune-gate: the staged change"
    sha = r.git(*identity, "commit-tree", tree, *parent, "-m", message).strip()
    _COMMITS.add((r.git_dir, sha))
    _STAGED[r.git_dir] = sha
    return sha


def _is_shallow(r: _Repo) -> bool:
    if (Path(r.git_dir) / "shallow").exists():
        return True
    try:
        return r.git("rev-parse", "--is-shallow-repository").strip() == "true"
    except _GitFailedError:
        return False


def _normalise(r: _Repo, path: str) -> str:
    """A path from the repository root in git's form (`a/b`), `.` for the root."""
    if Path(path).is_absolute():
        if r.working_tree_dir is None:
            raise GitError(f"{path}: an absolute path needs a work tree; give it from the root")
        rel = os.path.relpath(path, r.working_tree_dir)
        if rel == ".." or rel.startswith(".." + os.sep):
            raise GitError(f"{path} is outside the repository {r.working_tree_dir}")
        path = rel
    norm = posixpath.normpath(path.replace(os.sep, "/"))
    if norm == ".." or norm.startswith("../"):
        raise GitError(f"{path} is outside the repository (paths are from the repository root)")
    return norm


def submodules(repo: str | Path, rev: str, paths: Sequence[str] = ()) -> dict[str, str]:
    """The submodules (gitlinks) under `paths` at `rev`: path -> the commit it pins. Their
    content is another repository's, which prune-gate does not read."""
    r = _open(repo)
    sha = _resolve(r, rev)
    wanted = [_normalise(r, p) for p in paths] or ["."]
    return {e.path: e.sha for e in _ls_tree(r, sha, wanted, kind="commit")}


#: Commit ids this process has seen resolve, by git directory: a check passes the same two
#: ids to every read, and an id names its commit for good (one `git rev-parse` each, not ~30).
_COMMITS: set[tuple[str, str]] = set()

#: Tree listings by (git directory, commit id, paths): a commit's tree never changes, and one
#: check lists each side's for submodules, kustomizations, manifests and placement. A few are
#: kept (`gate history` walks many commits).
_TREES: dict[tuple[str, str, tuple[str, ...]], list[tuple[TreeEntry, str]]] = {}
_TREES_MAX = 8
_TREES_LOCK = threading.Lock()


def _ls_tree(
    r: _Repo, sha: str, paths: Sequence[str], kind: str = "blob", *, keep: bool = True
) -> list[TreeEntry]:
    """Every blob (and symlink) under `paths` (normalised; none or `.` for all) in one process;
    with `kind="commit"`, every submodule instead. Kept for the process unless `keep` is false
    (a listing of one file, which a kept listing of the tree would push out)."""
    wanted = tuple(p for p in paths if p != ".")
    key = (r.git_dir, sha, wanted)
    records = _TREES.get(key)
    if records is None:
        records = _list(r, sha, wanted)
        if keep:
            with _TREES_LOCK:
                while len(_TREES) >= _TREES_MAX:
                    del _TREES[next(iter(_TREES))]
                _TREES[key] = records
    return [e for e, what in records if what == kind]


def _list(r: _Repo, sha: str, wanted: Sequence[str]) -> list[tuple[TreeEntry, str]]:
    """`git ls-tree -r` of `wanted` at `sha`: each entry and what it is (blob, commit)."""
    try:
        output = r.git("ls-tree", "-r", "-z", "--full-tree", sha, "--", *wanted)
    except _GitFailedError as exc:
        raise GitError(f"cannot list the tree of {sha[:12]}: {exc.stderr}") from None
    records: list[tuple[TreeEntry, str]] = []
    for record in output.split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, what, obj = meta.split(" ")
        records.append((TreeEntry(path, mode, obj), what))
    return records


def _at_path(r: _Repo, sha: str, norm: str) -> list[TreeEntry]:
    """The blob (or symlink) at `norm` (normalised), if any: from a kept listing that covers
    it (no process), else from a listing of that path alone."""
    if not norm.startswith(":"):  # `:` starts git's pathspec magic: leave it to git
        for (git_dir, tree, wanted), records in list(_TREES.items()):
            if (
                git_dir == r.git_dir
                and tree == sha
                and not any(w.startswith(":") for w in wanted)
                and (not wanted or any(norm == w or norm.startswith(w + "/") for w in wanted))
            ):
                return [e for e, what in records if what == "blob" and e.path == norm]
    return [e for e in _ls_tree(r, sha, [norm], keep=False) if e.path == norm]


def _select(r: _Repo, sha: str, rev: str, paths: Sequence[str]) -> list[TreeEntry]:
    """The entries under each path, hidden ones skipped, each once; missing paths are errors."""
    wanted = [_normalise(r, p) for p in paths] or ["."]
    entries = _ls_tree(r, sha, wanted)
    seen: set[str] = set()
    out: list[TreeEntry] = []
    for path in wanted:
        prefix = "" if path == "." else path + "/"
        found = False
        for e in entries:
            if e.path != path and not e.path.startswith(prefix):
                continue
            found = True
            # Hidden below the path asked for: `.github/` in the root, not `.config` if named.
            rest = e.path[len(prefix) :]
            if e.path != path and (rest.startswith(".") or "/." in rest):
                continue
            if e.path not in seen:
                seen.add(e.path)
                out.append(e)
        if not found and path != ".":
            raise GitError(f"{path} does not exist at revision {rev} ({sha[:12]})")
    return out


def _blobs(r: _Repo, entries: Sequence[TreeEntry]) -> Iterator[tuple[TreeEntry, bytes]]:
    """The content of each entry, from one `git cat-file --batch` given every id at once.

    One process and one pipe for the whole tree: a request-and-answer per blob (GitPython's
    persistent cat-file) cost a quarter of a run on 2,000 files.
    """
    if not entries:
        return
    ids = "".join(f"{e.sha}\n" for e in entries).encode()
    try:
        done = subprocess.run(
            ["git", f"--git-dir={r.git_dir}", "cat-file", "--batch", "--buffer"],
            input=ids,
            capture_output=True,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        _raise_missing(exc.stderr or b"", entries)
        raise GitError(f"cannot read the blobs of the tree: {exc}") from None
    except OSError as exc:
        raise GitError(f"cannot read the blobs of the tree: {exc}") from None
    out, at = done.stdout, 0
    for entry in entries:
        end = out.find(b"\n", at)
        header = out[at:end].split()
        if len(header) != 3 or header[1] != b"blob" or header[0].decode() != entry.sha:
            got = out[at:end].decode(errors="replace") if end >= 0 else "nothing"
            raise GitError(_unreadable(entry, got))
        size = int(header[2])
        yield entry, out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1


def _raise_missing(stderr: bytes, entries: Sequence[TreeEntry]) -> None:
    """After `cat-file` failed: when git said it could not fetch a blob from the promisor
    remote (a partial clone's), the error names that blob by its path."""
    said = stderr.decode("utf-8", "replace")
    for entry in entries:
        if f"could not fetch {entry.sha}" in said:
            raise GitError(_unreadable(entry, f"{entry.sha} missing", partial=True))


def _unreadable(entry: TreeEntry, got: str, partial: bool = False) -> str:
    """Why a blob could not be read; with `partial` (git said it could not fetch it from the
    promisor remote), a partial clone's blob its unreachable remote holds, named by its path."""
    if partial:
        return (
            f"cannot read {entry.path}: its blob {entry.sha} is not in this clone (a partial "
            "clone, `--filter=blob:none`?) and git could not fetch it from the promisor "
            "remote. Check that the remote is reachable, or fetch the blobs first "
            f"(`git fetch origin` with the filter off, or `git cat-file -p {entry.sha}`)"
        )
    return f"cannot read {entry.path} ({entry.sha}): git answered {got!r}"


def _blob(r: _Repo, entry: TreeEntry) -> bytes:
    """The content of one entry, from a `git cat-file --batch` kept open for the repository:
    placement reads the files of findings one at a time, and a process each was ~5 ms."""
    with _READER_LOCK:
        for attempt in (1, 2):
            reader = _READER.get(r.git_dir)
            if reader is None:
                _close_reader()
                reader = _READER[r.git_dir] = _BlobReader(r.git_dir)
            try:
                return reader.read(entry)
            except (OSError, ValueError) as exc:  # the process died: once more, with another
                _close_reader()
                if attempt == 2:
                    raise GitError(f"cannot read {entry.path} ({entry.sha}): {exc}") from None
            except GitError:  # an answer that leaves the stream out of step
                _close_reader()
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class _BlobReader:
    """One `git cat-file --batch` process, asked for one blob at a time."""

    def __init__(self, git_dir: str) -> None:
        try:
            self.process = subprocess.Popen(
                ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise GitError(f"cannot read the blobs of the tree: {exc}") from None

    def read(self, entry: TreeEntry) -> bytes:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{entry.sha}\n".encode())
        stdin.flush()
        line = stdout.readline()
        header = line.split()
        if len(header) != 3 or header[1] != b"blob" or header[0].decode() != entry.sha:
            got = line.rstrip(b"\n").decode(errors="replace") or "nothing"
            raise GitError(_unreadable(entry, got))
        size = int(header[2])
        data = stdout.read(size + 1)
        if len(data) != size + 1:
            raise ValueError("git stopped mid-blob")
        return data[:size]

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with suppress(OSError):  # a dead process: what was left to write is moot
                    pipe.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


#: The open blob reader, by git directory (one at a time: tests open many repositories),
#: closed at exit; `_READER_LOCK` is held around every use.
_READER: dict[str, _BlobReader] = {}
_READER_LOCK = threading.RLock()


@atexit.register
def _close_reader() -> None:
    with _READER_LOCK:
        for reader in _READER.values():
            reader.close()
        _READER.clear()


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"cannot read: not UTF-8 ({exc.reason} at byte {exc.start})", path
        ) from None
