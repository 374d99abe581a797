"""Render kustomizations into objects, with each object traced back to the file that declares it.

What a GitOps tool applies is the *built* kustomization, not the files in the repository: a claim
may live in `base/` and reach production only through `overlays/prod`. So `gate check --render
kustomize` builds each path at each revision with `kustomize build` (or `kubectl kustomize`, which
embeds it), as a subprocess: kustomize has no Python API, and shelling out means the gate sees
exactly what the deployer's tool will see.

The build must not read outside the revision's tree: a candidate's `configMapGenerator` over
`/proc/self/environ` would otherwise put the CI runner's secrets into the report. Builds therefore
run `prune-gate-kustomize` (tools/kustomize, built by scripts/build-binaries): kustomize's own API
with `LoadRestrictionsNone`, as Flux's kustomize-controller builds, on a file system that refuses
every path resolving (symlinks followed) outside the tree, and offline: a remote entry is built
from the file `--fetch-remote` fetched it into, else left out and recorded
(`gate.sources.remote`), so the check can compare the two revisions' URLs. A kustomization that
names a file elsewhere in the repository builds here as in the cluster. Without the helper,
`kustomize build` or `kubectl kustomize` is the fallback, with kustomize's default
`LoadRestrictionsRootOnly` (files only below each kustomization; never `LoadRestrictionsNone`,
which reads anything the runner can).

Revisions are materialised into a temporary directory from the object database
(`gate.sources.gitsource.export_tree`): the work tree is never touched, so base and candidate can be
built side by side in one CI job.

Findings must point at a file and line a person can edit (and GitHub can annotate), not at line
300 of some build output. Each build therefore goes through a wrapper kustomization with
`buildMetadata: [originAnnotations]`; kustomize then stamps every object with
`config.kubernetes.io/origin` (the file it came from). The annotation is removed from the body
again, and the object's line is found in that file by kind and name. Objects whose origin is not
a local file (remote bases) keep a label naming the build. If the wrapper cannot be built (the
path is a `Component`, say), the plain build is used without origins.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

import yaml

from gate.model.errors import GitError, InputError, RenderError
from gate.model.objects import RawObject, Source
from gate.sources import buildcache, gitsource, partial
from gate.sources.buildcache import Trace, TreeIndex
from gate.sources.buildserver import BuildServer
from gate.sources.manifests import KUSTOMIZATION_NAMES, parse_stream
from gate.sources.remote import LEDGER, NOT_FETCHED

#: The annotation kustomize writes with `buildMetadata: [originAnnotations]`.
ORIGIN_ANNOTATION = "config.kubernetes.io/origin"

#: How long one build may take before it is reported as hung.
DEFAULT_TIMEOUT = 300.0

#: The confined renderer built from tools/kustomize; `PRUNE_GATE_KUSTOMIZE` names it explicitly.
HELPER = "prune-gate-kustomize"
HELPER_ENV = "PRUNE_GATE_KUSTOMIZE"

INSTALL_HINT = (
    "build the confined renderer with `scripts/build-binaries path prune-gate-kustomize` (Go "
    ">= 1.24) and put its folder on PATH (or set PRUNE_GATE_KUSTOMIZE to it); or, with files "
    "limited to each kustomization's own directory, install kustomize "
    "(https://kubectl.docs.kubernetes.io/installation/kustomize/, e.g. "
    "`brew install kustomize` or a release binary on PATH) or kubectl >= 1.14, which includes "
    "`kubectl kustomize`"
)

#: The fallback renderers keep kustomize's default: files only below the kustomization's own
#: directory, symlinks resolved. Never `LoadRestrictionsNone` outside the confined helper.
LOAD_RESTRICTOR = "--load-restrictor=LoadRestrictionsRootOnly"

_WRAPPER_DIR = "prune-gate-wrapper"
_TREE_DIR = "tree"


def find_kustomize(search_path: str | None = None) -> list[str]:
    """The command that builds a kustomization: the confined helper, else `kustomize build`, else
    `kubectl kustomize` (a one-element list is the helper).

    `search_path` is a PATH-style string (default: the PATH environment variable).
    """
    explicit = os.environ.get(HELPER_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RenderError(f"cannot render: {HELPER_ENV}={explicit} is not an executable file")
        return [explicit]
    helper = shutil.which(HELPER, path=search_path)
    if helper:
        return [helper]
    kustomize = shutil.which("kustomize", path=search_path)
    if kustomize:
        return [kustomize, "build"]
    kubectl = shutil.which("kubectl", path=search_path)
    if kubectl:
        return [kubectl, "kustomize"]
    raise RenderError(
        f"cannot render: none of `{HELPER}`, `kustomize` or `kubectl` is on PATH; {INSTALL_HINT}"
    )


#: What each renderer is called in reports; the helper is named by its file name.
FALLBACKS = {"kustomize": "kustomize build", "kubectl": "kubectl kustomize"}

#: The renderers that built in this process, in first-use order (`renderers_used`).
_USED: dict[str, None] = {}
_WARNED: list[bool] = []


def renderer_name(command: Sequence[str]) -> str:
    """How reports name the renderer `command` runs: `prune-gate-kustomize` (confined), or the
    fallback's `kustomize build` / `kubectl kustomize`."""
    if len(command) == 1:
        return HELPER
    return FALLBACKS.get(Path(command[0]).name, " ".join([Path(command[0]).name, *command[1:]]))


def renderers_used() -> list[str]:
    """The renderers that built something since the last `reset_renderers` (a report names the
    one that ran: the fallback is slower and restricts file loads differently)."""
    return list(_USED)


def reset_renderers() -> None:
    """Forget the renderers used (a command starts its own count)."""
    _USED.clear()


def _note_renderer(command: Sequence[str]) -> None:
    """Record the renderer; the first fallback build of the process says so on stderr, once:
    without the helper every build is a `kubectl kustomize` process (about 9x slower on a Flux
    repository) and loads only files below each kustomization, so some builds Flux makes fail
    here."""
    name = renderer_name(command)
    _USED.setdefault(name)
    if len(command) > 1 and not _WARNED:
        _WARNED.append(True)
        print(
            f"warning: {HELPER} (the confined renderer) is not on PATH: building with `{name}` "
            "instead, one process per build (several times slower) and with files only below "
            f"each kustomization (LoadRestrictionsRootOnly, where Flux loads any file of the "
            f"repository). To use the helper: {INSTALL_HINT.partition('; or')[0]}",
            file=sys.stderr,
            flush=True,  # before the report; click 8.1's test runner flushes only stdout
        )


def render_kustomize(
    repo: str | Path, rev: str, path: str, *, timeout: float = DEFAULT_TIMEOUT
) -> list[RawObject]:
    """Build the kustomization at `path` (from the repository root) as it is at revision `rev`."""
    return render_kustomize_paths(repo, rev, [path], timeout=timeout)


def render_kustomize_paths(
    repo: str | Path, rev: str, paths: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT
) -> list[RawObject]:
    """Build several kustomizations at one revision, materialising the tree once."""
    with ExportedTree(repo, rev, timeout=timeout) as tree:
        return [o for path in paths for o in tree.build(_relative(path, repo))]


class ExportedTree:
    """One revision materialised in a temporary directory, to build any of its paths.

    The tree is exported from the object database when a build first needs it, and never
    written to; each `build` runs the confined renderer on one path, in one kept process
    (`gate.sources.buildserver`) when it is the helper. A path with no kustomization file is
    built from the one Flux's generator makes for it (every manifest below it), by the helper
    with Flux's own code. A build the helper built before with the same inputs, at a revision
    whose files it read are the same, is reused (`gate.sources.buildcache`): a revision whose
    every build is kept is never exported."""

    def __init__(self, repo: str | Path, rev: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.repo, self.rev, self.timeout = repo, rev, timeout
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.sha = ""
        self._built: dict[tuple[str, str], list[RawObject]] = {}
        self._exported: gitsource.Exported | None = None
        self.remote: dict[str, str] = {}
        self._fixed: str | None = None  # buildcache.fixed_inputs, once known

    def __enter__(self) -> ExportedTree:
        self.command = find_kustomize()
        _note_renderer(self.command)
        self._server = self._kept_server() if len(self.command) == 1 else None
        self.sha = gitsource.resolve_revision(self.repo, self.rev)
        self.index = TreeIndex(gitsource.tree_entries(self.repo, self.sha))
        if LEDGER.fetch:  # the remote entries are found in the exported kustomization files
            self._write(None)
        return self

    def _kept_server(self) -> BuildServer:
        key = _server_key(self.command[0], self.timeout)
        return _SERVERS.take(key) or BuildServer(self.command[0], self.timeout)

    @property
    def tree(self) -> Path:
        """The exported revision, written whole on first use."""
        self._write(None)
        return self._tree

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            _SERVERS.give(_server_key(self._server.helper, self._server.timeout), self._server)
        if self._tmp is not None and self._exported is not None and exc[0] is None:
            _SPARES.give(_repo_key(self.repo), (self._tmp, self._exported))
        elif self._tmp is not None:
            self._tmp.cleanup()

    def repository_paths(self, text: str) -> str:
        """`text` (a tool's message) with this export's temporary paths mapped back to paths
        from the repository root: the absolute `/tmp/prune-gate-.../tree/apps/x` and the
        wrapper's relative `../tree/apps/x` both become `apps/x`."""
        if self._exported is None:
            return text  # nothing written: no temporary path to name
        return repository_paths(text, self._tree, self.root / _WRAPPER_DIR)

    def exists(self, rel: str) -> bool:
        """True when `rel` (from the repository root) is a directory at this revision."""
        rel = "" if rel == "." else rel
        if self.index.through_link(rel):
            return (self.tree / rel).is_dir()  # as the export makes the link
        return self.index.is_dir(rel)

    def build(
        self,
        rel: str,
        root: str | None = None,
        kustomization: dict[str, Any] | None = None,
        flux: dict[str, Any] | None = None,
    ) -> list[RawObject]:
        """The objects `rel` builds to, each tagged with `root` (default: `rel`).

        `kustomization` is the Flux Kustomization that applies `rel` (its build fields:
        targetNamespace, patches, components...): Flux's generator amends the path's
        kustomization file with them, or makes one; `flux` is its post-build, both run by the
        helper with Flux's code (`gate.sources.flux`). A path is built once per set of fields."""
        key = (rel, json.dumps([kustomization, flux], sort_keys=True))
        if key not in self._built:
            self._built[key] = self._build(rel, kustomization, flux)
        return [replace(o, root=rel if root is None else root) for o in self._built[key]]

    def _build(
        self, rel: str, kustomization: dict[str, Any] | None, flux: dict[str, Any] | None
    ) -> list[RawObject]:
        if not self.exists(rel):
            what = "is not a directory" if rel in self.index.files else "does not exist"
            raise GitError(f"{rel} {what} at revision {self.rev} ({self.sha[:12]})")
        label = f"{rel} (kustomize build at {self.sha[:12]})"
        if kustomization is None and not any(
            self.index.is_file(posixpath.join(rel, name)) for name in KUSTOMIZATION_NAMES
        ):
            kustomization = {}  # none to build: Flux generates one from what is below it
        if kustomization is not None:
            label = f"{rel} (built as kustomize-controller builds it, at {self.sha[:12]})"
        key = self._cache_key(rel, kustomization, flux)
        if key is not None:
            kept = buildcache.BUILDS.lookup(key, self.index, label)
            if kept is not None:
                return kept
        predicted = buildcache.BUILDS.last_reads(key) if key is not None else None
        if key is not None and predicted is None:  # built for the first time: a new app, most
            predicted = (("tree", rel, ""),)  # likely read below its own path
        self._write(predicted)
        traced = key is not None
        try:
            built, reads = self._built_here(rel, label, kustomization, flux, traced=traced)
            again = not self._complete() and not self._covered(reads)
        except RenderError:
            if self._complete():
                raise
            again = True  # perhaps for want of a file not written
        if again:  # it read past the part written: build on the whole revision
            self._write(None)
            built, reads = self._built_here(rel, label, kustomization, flux, traced=traced)
        if key is not None and reads is not None:
            buildcache.BUILDS.keep(key, self.index, reads, label, built)
        return built

    def _built_here(
        self,
        rel: str,
        label: str,
        kustomization: dict[str, Any] | None,
        flux: dict[str, Any] | None,
        *,
        traced: bool,
    ) -> tuple[list[RawObject], list[buildcache.Read] | None]:
        """`rel` built on what is written of the revision; with `traced`, what the build read
        (paths from the repository root), or None when it cannot be kept: the helper did not
        say, said something (a remote entry left out, which the ledger must hear of at every
        revision), or read outside the tree."""
        tree, wrapper = self._tree, self.root / _WRAPPER_DIR
        target = tree / rel
        said: list[str] = []
        trace = Trace() if traced else None
        generate = (
            None
            if kustomization is None
            else {"root": str(tree), "dir": str(target), "kustomization": kustomization}
        )
        built = _build(
            self.command,
            self._server,
            target,
            wrapper,
            root=tree,
            label=label,
            label_file=lambda f: _under(f, tree),
            scrub=self.repository_paths,
            timeout=self.timeout,
            generate=generate,
            flux=flux,
            remote=self.remote,
            heard=lambda stderr: _heard(stderr, said, self.sha, tree),
            trace=trace,
        )
        if trace is None or not trace.complete or any(said):
            return built, None
        constant = [wrapper, *map(Path, self.remote.values())]
        return built, buildcache.relative_reads(trace.reads, tree, constant)

    def _write(self, predicted: Sequence[buildcache.Seen] | None) -> None:
        """Write the revision out, or with `predicted` (what the build read at another
        revision) only what those reads need, when the revision has no symlinks
        (`gate.sources.partial`): over what is written, else over a spare export of the same
        repository (by difference), else into a new directory."""
        if self._complete():
            return
        subset = None
        if predicted is not None:
            plan = gitsource.export_plan(self.repo, self.sha)
            subset = None if plan.has_links else partial.expand(predicted, plan, self.index)
        previous = self._exported
        if self._tmp is None:
            spare = _SPARES.take(_repo_key(self.repo))
            self._tmp, previous = spare if spare is not None else (_new_export_dir(), None)
            self.root = Path(self._tmp.name).resolve()  # kustomize resolves symlinks
            self._tree = self.root / _TREE_DIR
        self._exported = None  # until written: a failed write leaves nothing to reuse
        self._exported = gitsource.sync_tree(self.repo, self.sha, self._tree, previous, subset)
        if subset is None:
            self.remote = LEDGER.fetched_for(self._tree)  # URL -> fetched file (--fetch-remote)

    def _complete(self) -> bool:
        return self._exported is not None and self._exported.complete

    def _covered(self, reads: Sequence[buildcache.Read] | None) -> bool:
        """True when a build on part of the revision read only what that part answers as the
        whole would; unknown reads are not."""
        if reads is None or self._exported is None:
            return False
        return partial.covers(reads, self._exported, gitsource.export_plan(self.repo, self.sha))

    def _cache_key(
        self, rel: str, kustomization: dict[str, Any] | None, flux: dict[str, Any] | None
    ) -> str | None:
        """The build cache's key of a build of `rel`, or None when it is not kept (a fallback
        renderer, which does not say what it read)."""
        if self._server is None or not self._server.serves or not buildcache.enabled():
            return None
        if self._fixed is None:  # the remote content is fetched on entering, if at all
            self._fixed = buildcache.fixed_inputs(self.remote, self.command)
        return buildcache.inputs_key(rel, kustomization, flux, self._fixed)


def _heard(stderr: str, said: list[str], sha: str, tree: Path) -> None:
    """What a build said: for the ledger (the remote entries it left out), and kept in `said`
    (a build that said anything is not kept for another revision)."""
    said.append(stderr)
    LEDGER.record(sha, stderr, tree)


def _new_export_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="prune-gate-")


_T = TypeVar("_T")


class _Kept(Generic[_T]):
    """Things kept between trees for the next one with the same key, two at most (a check's
    two sides), each taken by one tree at a time; `end` ends one that is let go. `gate
    history` reads revision after revision: the helper's process (its start and its OpenAPI
    schema, parsed on the first build that patches) and an export to write the next revision
    over by difference (`gitsource.sync_tree`) are paid once, not per revision."""

    _KEPT = 2

    def __init__(self, end: Callable[[_T], object]) -> None:
        self._end = end
        self._lock = threading.Lock()
        self._kept: list[tuple[object, _T]] = []

    def take(self, key: object) -> _T | None:
        with self._lock:
            for i, (at, thing) in enumerate(self._kept):
                if at == key:
                    del self._kept[i]
                    return thing
        return None

    def give(self, key: object, thing: _T) -> None:
        with self._lock:
            self._kept.append((key, thing))
            dropped, self._kept = self._kept[: -self._KEPT], self._kept[-self._KEPT :]
        for _, old in dropped:
            self._end(old)

    def clear(self) -> None:
        with self._lock:
            kept, self._kept = self._kept, []
        for _, thing in kept:
            self._end(thing)


_Spare = tuple[tempfile.TemporaryDirectory[str], gitsource.Exported]

#: Exports by repository (its real path); helper processes by the helper file's identity (a
#: rebuilt helper is another) and timeout.
_SPARES: _Kept[_Spare] = _Kept(lambda spare: spare[0].cleanup())
_SERVERS: _Kept[BuildServer] = _Kept(BuildServer.close)
atexit.register(_SERVERS.clear)  # their input closes: they end at once


def _server_key(helper: str, timeout: float) -> tuple[str, float]:
    return buildcache.file_identity(helper), timeout


def _repo_key(repo: str | Path) -> str:
    return os.path.realpath(repo)


def forget_kept() -> None:
    """End the helper processes kept between trees and remove the spare exports (tests: each
    starts with none)."""
    _SERVERS.clear()
    _SPARES.clear()


def repository_paths(text: str, tree: Path, wrapper: Path) -> str:
    """`text` with paths into the exported `tree` (absolute, or relative to the `wrapper`
    kustomization, as kustomize names the wrapper's resource) made repository paths; the
    tree itself is `.`. A person reading the message edits those files, not the export."""
    text = text.replace(str(tree) + os.sep, "").replace(str(tree), ".")
    relative = re.escape(os.path.relpath(tree, wrapper).replace(os.sep, "/"))  # `../tree`
    text = re.sub(rf"(?<![\w./-]){relative}/", "", text)
    return re.sub(rf"(?<![\w./-]){relative}(?![\w./-])", ".", text)


# --- internals -------------------------------------------------------------------------------


def _relative(path: str, repo: str | Path) -> str:
    """`path` from the repository root, in `a/b` form; absolute paths inside the repo accepted."""
    p = Path(path)
    if p.is_absolute():
        root = Path(repo).resolve()
        try:
            p = p.resolve().relative_to(root)
        except ValueError:
            raise GitError(f"{path} is outside the repository {root}") from None
    norm = os.path.normpath(p.as_posix()).replace(os.sep, "/")
    if norm == ".." or norm.startswith("../"):
        raise GitError(f"{path} is outside the repository (paths are from the repository root)")
    return norm


def _under(f: Path, root: Path) -> str | None:
    """`f` relative to `root` in `a/b` form, or None when it is not below it."""
    try:
        return f.relative_to(root).as_posix()
    except ValueError:
        return None


def _build(
    command: list[str],
    server: BuildServer | None,
    target: Path,
    wrapper: Path,
    *,
    root: Path,
    label: str,
    label_file: Callable[[Path], str | None],
    scrub: Callable[[str], str] | None,
    timeout: float,
    generate: dict[str, Any] | None = None,
    flux: dict[str, Any] | None = None,
    remote: dict[str, str] | None = None,
    heard: Callable[[str], None] = lambda _stderr: None,
    trace: Trace | None = None,
) -> list[RawObject]:
    """Build `target` through an origin-annotating wrapper, else plainly; parse and trace back.

    `generate` has the helper build `target` from the kustomization file Flux's generator makes
    of it (with a Flux Kustomization's build fields), `flux` is its post-build: the helper runs
    both on either build. `remote` maps a remote entry's URL to its fetched file; `heard` is
    given a successful build's stderr (where the helper names the remote entries it left out).
    `trace`, when given, gets what the builds read (both, when the wrapper's fails: that it
    fails depends on what it read too)."""
    wrapper.mkdir(exist_ok=True)
    resource = os.path.relpath(target, wrapper).replace(os.sep, "/")
    (wrapper / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [resource],
                "buildMetadata": ["originAnnotations"],
            }
        ),
        encoding="utf-8",
    )
    flux_steps = _FluxSteps(generate, flux)
    wrapped = _run(
        command, server, wrapper, [root, wrapper], wrapper, timeout, flux_steps, remote, trace
    )
    if wrapped.returncode == 0:
        heard(wrapped.stderr)
        objects = parse_stream(wrapped.stdout, label)
        return _trace(objects, wrapper, root, label_file)
    plain = _run(command, server, target, [root], wrapper, timeout, flux_steps, remote, trace)
    if plain.returncode != 0:
        left_out = [line for line in plain.stderr.splitlines() if line.startswith(NOT_FETCHED)]
        kept = "\n".join(line for line in plain.stderr.splitlines() if line not in left_out)
        stderr = _clean_stderr(kept) or plain.stdout.strip() or f"exit {plain.returncode}"
        if left_out:
            urls = ", ".join(line.rpartition(": ")[2] for line in left_out)
            stderr += (
                f" (the build left out the remote entries it cannot read offline: {urls}; a "
                "patch or transformer that targets their objects fails without them: give "
                "--fetch-remote on a runner that may reach them, to build with their content)"
            )
        if scrub is not None:
            stderr = scrub(stderr)
        tool = " ".join([Path(command[0]).name, *command[1:]])
        raise RenderError(f"{label}: `{tool}` failed: {stderr}")
    heard(plain.stderr)
    return parse_stream(plain.stdout, label)


def _argv(
    command: list[str], target: Path, roots: list[Path], remote: dict[str, str] | None = None
) -> list[str]:
    """The build command line: the helper confined to `roots`, else the fallback restricted."""
    if len(command) == 1:
        confine = [arg for r in roots for arg in ("--root", str(r))]
        fetched = [a for url, f in (remote or {}).items() for a in ("--remote", f"{url}={f}")]
        return [command[0], *confine, *fetched, str(target)]
    return [*command, LOAD_RESTRICTOR, str(target)]


class _FluxSteps(NamedTuple):
    """What kustomize-controller does around kustomize's build, for the helper to do with Flux's
    code: generate (or amend) the kustomization file, and substitute the built objects."""

    generate: dict[str, Any] | None
    post_build: dict[str, Any] | None


_NO_FLUX_STEPS = _FluxSteps(None, None)


def _run(
    command: list[str],
    server: BuildServer | None,
    target: Path,
    roots: list[Path],
    cwd: Path,
    timeout: float,
    flux: _FluxSteps = _NO_FLUX_STEPS,
    remote: dict[str, str] | None = None,
    trace: Trace | None = None,
) -> subprocess.CompletedProcess[str]:
    """Build `target` confined to `roots`: by the kept helper when there is one and it serves,
    else by a process of its own, in `cwd`; `trace` gets what the build read (marked
    incomplete when the renderer does not say). Flux's steps need the serving helper: only it
    runs Flux's generator and substitution code."""
    if server is not None and server.serves:
        done = server.build(
            roots, target, flux.post_build, remote, flux.generate, trace=trace is not None
        )
        if done is not None:
            if trace is not None:
                trace.add(server.reads)
            return done
    if flux.generate is not None or flux.post_build is not None:
        what = (
            "substitutes variables (spec.postBuild)"
            if flux.post_build is not None
            else "generates its kustomization file (the path has none, or the Flux "
            "Kustomization adds build fields: targetNamespace, patches, components...)"
        )
        raise RenderError(
            f"cannot render a Flux Kustomization's path as Flux does: Flux {what}, which only "
            f"`{HELPER}` renders, with Flux's own code, and `{command[0]}` is not it (or too "
            f"old to serve builds); {INSTALL_HINT}"
        )
    argv = _argv(command, target, roots, remote)
    if trace is not None:
        trace.add(None)  # a process of its own does not say what it read
    try:
        return subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise RenderError(f"`{' '.join(argv)}` did not finish in {timeout:g} s") from None
    except OSError as exc:
        raise RenderError(f"cannot run {argv[0]}: {exc}; {INSTALL_HINT}") from None


#: kubectl logs through klog: `E1202 13:10:39.307030   18465 run.go:72] "command failed" err="..."`.
_KLOG_ERROR = re.compile(r'^[EWIF]\d{4} [\d:.]+\s+\d+ \S+\] "command failed" err=(".*")$')


def _clean_stderr(stderr: str) -> str:
    """kustomize's message, without kubectl's klog header and Go quoting."""
    lines = []
    for line in stderr.strip().splitlines():
        match = _KLOG_ERROR.match(line)
        if match:
            try:
                line = str(json.loads(match.group(1)))
            except ValueError:
                line = match.group(1)[1:-1]
        lines.append(line)
    return "\n".join(lines).strip()


def _trace(
    objects: list[RawObject],
    wrapper: Path,
    root: Path,
    label_file: Callable[[Path], str | None],
) -> list[RawObject]:
    """Replace each object's source by its origin file and line; strip the origin annotation."""
    cache: dict[Path, list[RawObject] | None] = {}
    readable: dict[Path, str | None] = {}  # each origin file's label, if it may be read
    real_root = root.resolve()
    out: list[RawObject] = []
    for obj in objects:
        origin = _pop_origin(obj.body)
        source = obj.source
        if origin is not None and "repo" not in origin:
            rel = origin.get("path") or origin.get("configuredIn")
            if isinstance(rel, str) and rel:
                file = Path(os.path.normpath(wrapper / rel))
                if file not in readable:  # a file declares many objects: resolved once
                    inside = _under(file.resolve(), real_root) is not None  # no link out
                    name = label_file(file)
                    readable[file] = name if inside and file.is_file() else None
                name = readable[file]
                if name is not None:
                    line = (
                        _locate_object(file, obj.body, cache)
                        if "path" in origin
                        else _locate_generator(file, obj.body)
                    )
                    source = Source(name, line)
        out.append(RawObject(obj.body, source))
    return out


def _pop_origin(body: dict[str, Any]) -> dict[str, Any] | None:
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        return None
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or ORIGIN_ANNOTATION not in annotations:
        return None
    raw = annotations.pop(ORIGIN_ANNOTATION)
    if not annotations:
        del meta["annotations"]
    return _read_origin(raw) if isinstance(raw, str) else None


_ORIGIN_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=4096)
def _read_origin(raw: str) -> dict[str, Any] | None:
    """The origin annotation read as YAML (libyaml when there), once per distinct text: every
    object of a file carries the same one. Callers only read the dict."""
    try:
        origin = yaml.load(raw, Loader=_ORIGIN_LOADER)
    except yaml.YAMLError:
        return None
    return origin if isinstance(origin, dict) else None


def _locate_object(
    file: Path, body: dict[str, Any], cache: dict[Path, list[RawObject] | None]
) -> int:
    """The line of the document in `file` that the rendered object came from (1 if unsure).

    Matched by kind, then by name: exactly, else the longest original name contained in the
    rendered one (namePrefix / nameSuffix), else the only object of that kind in the file.
    """
    if file not in cache:
        try:
            cache[file] = parse_stream(file.read_text(encoding="utf-8"), str(file))
        except (OSError, UnicodeDecodeError, InputError):
            cache[file] = None
    declared = cache[file]
    if not declared:
        return 1
    kind = body.get("kind")
    name = str((body.get("metadata") or {}).get("name", ""))
    same_kind = [d for d in declared if d.body.get("kind") == kind]
    best: RawObject | None = None
    for d in same_kind:
        original = str(d.body["metadata"]["name"])
        if original == name:
            return d.source.line
        if original in name and (
            best is None or len(original) > len(best.body["metadata"]["name"])
        ):
            best = d
    if best is not None:
        return best.source.line
    if len(same_kind) == 1:
        return same_kind[0].source.line
    return 1


_NAME_LINE = re.compile(r"^\s*(?:-\s*)?name:\s*[\"']?([^\"'#\s]+)")


def _locate_generator(file: Path, body: dict[str, Any]) -> int:
    """The line of the generator entry (`- name: x`) that produced a generated object."""
    name = str((body.get("metadata") or {}).get("name", ""))
    best, best_len = 1, 0
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 1
    for number, text in enumerate(lines, start=1):
        match = _NAME_LINE.match(text)
        if match and match.group(1) in name and len(match.group(1)) > best_len:
            best, best_len = number, len(match.group(1))
    return best
