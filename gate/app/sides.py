"""How a side of a comparison is read: one small protocol, one reader per way of reading.

A side is what one revision (or one rendered directory) deploys. Each reader returns its
objects, says how it is labelled in reports, and says where the deferral artifact puts each
object (`gate.sources.deferral`: a file per input file, per built root, per repository file);
a pair of sides also says where the candidate shows each finding (`gate.sources.placement`).
`gate check`, `gate history`, `gate doctor` and `gate retire status` read revisions only
through `GitReading.side`, so they read a revision the same way, with the same refusals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from gate.model.errors import InputError
from gate.model.objects import RawObject
from gate.sources.manifests import read_path

# The deferral layouts are looked up when `--defer-to` asks for them: a plain check does not
# load the artifact writer (its YAML emitter).
if TYPE_CHECKING:
    from gate.sources.appsets import Cluster
    from gate.sources.deferral import Placer
    from gate.sources.flux import FluxSource

_T = TypeVar("_T")


class Side(Protocol):
    """One side of a comparison: what it deploys, its label, where deferral writes it."""

    @property
    def label(self) -> str:
        """How reports name the side (a path, `rev (sha)`)."""
        ...

    @property
    def layout(self) -> Placer:
        """The artifact file each object of the side goes to (`--defer-to`)."""
        ...

    def read(self) -> list[RawObject]:
        """The side's objects (raises a `GateError` when they cannot be known)."""
        ...


@dataclass(frozen=True)
class FilesSide:
    """Rendered manifests: a file, a directory or `-` (stdin), as given on the command line."""

    path: str

    @property
    def label(self) -> str:
        return self.path

    @property
    def local(self) -> str:
        """The path relative to the working directory when it is inside it (annotations and
        the artifact's file names need that)."""
        return workspace_relative(self.path)

    @property
    def layout(self) -> Placer:
        from gate.sources.deferral import by_input_file

        return by_input_file(self.local)  # a file per input file, named as in the input

    def read(self) -> list[RawObject]:
        return read_path(self.local)


@dataclass(frozen=True)
class TreeSide:
    """The YAML files of a revision under its paths, read one by one (`--render none`, or no
    `--render`, `strict`: then `read_both` refuses a kustomization among them first)."""

    repo: str
    sha: str
    label: str
    paths: tuple[str, ...]
    strict: bool = False

    @property
    def layout(self) -> Placer:
        from gate.sources.deferral import by_repository_file

        return by_repository_file  # a file per file of the repository

    def refuse(self) -> None:
        """Stop before reading when the side is kustomize input and nothing said to read its
        files one by one anyway (`strict`)."""
        if self.strict:
            refuse_kustomizations(self.repo, self.sha, self.paths)

    def read(self) -> list[RawObject]:
        from gate.sources import gitsource  # git mode only

        return gitsource.read_tree(self.repo, self.sha, self.paths)


@dataclass(frozen=True)
class KustomizeSide:
    """Each path of a revision built with kustomize (`--render kustomize`)."""

    repo: str
    sha: str
    label: str
    paths: tuple[str, ...]

    @property
    def layout(self) -> Placer:
        from gate.sources.deferral import by_root

        return by_root  # a file per --path

    def read(self) -> list[RawObject]:
        from gate.sources.render import render_kustomize_paths

        return render_kustomize_paths(self.repo, self.sha, self.paths)


@dataclass(frozen=True)
class FluxSide:
    """A revision as its Flux Kustomizations apply it, from each entry point (`--flux-root`;
    "auto": the one the revision declares). What the reading had to say (the entry point
    `auto` found, the Kustomizations `--flux-ignore-source` skipped) is in `notes` once read:
    `run_check` makes them the report's notes, which every format prints."""

    repo: str
    sha: str
    title: str
    roots: tuple[str, ...]
    sources: tuple[FluxSource, ...] = ()
    ignore: tuple[FluxSource, ...] = ()
    notes: list[str] = field(default_factory=list, compare=False)
    #: `--fetch-charts`: HelmReleases' charts read where they live (`gate.sources.charts`).
    fetch_charts: bool = False

    @property
    def label(self) -> str:
        return self.title

    @property
    def layout(self) -> Placer:
        from gate.sources.deferral import by_root

        return by_root  # a file per Kustomization

    def read(self) -> list[RawObject]:
        from gate.sources.flux import render_flux

        self.notes.clear()
        return [
            o
            for r in self.roots
            for o in render_flux(
                self.repo,
                self.sha,
                r,
                sources=self.sources,
                ignore=self.ignore,
                notes=self.notes,
                fetch_charts=self.fetch_charts,
            )
        ]


@dataclass(frozen=True)
class ArgoOptions:
    """How `--argocd-root` reads Argo CD's sources: the repoURLs that are this repository
    (`--argocd-repo`; none: its origin remote), the revisions besides HEAD that follow the
    branch checked (`--argocd-revision`), the clusters a `clusters` generator can select
    (`--argocd-cluster`)."""

    repos: tuple[str, ...] = ()
    revisions: tuple[str, ...] = ()
    clusters: tuple[Cluster, ...] = ()


@dataclass(frozen=True)
class ArgoSide:
    """A revision as its Argo CD Applications deploy it, from each entry point
    (`--argocd-root`; "auto": the directories no Application reaches)."""

    repo: str
    sha: str
    title: str
    roots: tuple[str, ...]
    options: ArgoOptions = ArgoOptions()
    notes: list[str] = field(default_factory=list, compare=False)

    @property
    def label(self) -> str:
        return self.title

    @property
    def layout(self) -> Placer:
        from gate.sources.deferral import by_root

        return by_root  # a file per Application

    def read(self) -> list[RawObject]:
        from gate.sources.argocd import render_argocd

        self.notes.clear()
        return [
            o
            for r in self.roots
            for o in render_argocd(
                self.repo,
                self.sha,
                r,
                repos=self.options.repos,
                revisions=self.options.revisions,
                clusters=self.options.clusters,
                notes=self.notes,
            )
        ]


@dataclass(frozen=True)
class GitReading:
    """How a command reads a revision of a repository: plain files (`render` None refuses
    kustomize input, "none" reads it anyway), kustomize builds, or Flux entry points."""

    repo: str
    render: str | None = None
    flux_roots: tuple[str, ...] = ()
    flux_sources: tuple[FluxSource, ...] = ()
    #: Sources deliberately out of scope (`--flux-ignore-source`): their Kustomizations are
    #: skipped, and the side's label says so.
    flux_ignore: tuple[FluxSource, ...] = ()
    #: `--fetch-charts`: with Flux, HelmReleases' charts read where they live.
    fetch_charts: bool = False
    #: Argo CD entry points (`--argocd-root`), read instead of Flux's or paths.
    argocd_roots: tuple[str, ...] = ()
    argocd: ArgoOptions = ArgoOptions()

    @property
    def builds(self) -> bool:
        """True when a side is built (kustomize, Flux or Argo CD), not read file by file."""
        return bool(self.flux_roots or self.argocd_roots) or self.render == "kustomize"

    def side(self, sha: str, label: str, paths: Sequence[str]) -> Side:
        """The reader of revision `sha` under `paths`; with Flux, `paths` are the entry points
        to build (`flux_roots`, or those of them the revision has); with Argo CD, its entry
        points."""
        if self.argocd_roots:
            return ArgoSide(self.repo, sha, label, tuple(paths), self.argocd)
        if self.flux_roots:
            return FluxSide(
                self.repo,
                sha,
                label,
                tuple(paths),
                self.flux_sources,
                self.flux_ignore,
                fetch_charts=self.fetch_charts,
            )
        if self.render == "kustomize":
            return KustomizeSide(self.repo, sha, label, tuple(paths))
        return TreeSide(self.repo, sha, label, tuple(paths), strict=self.render is None)


#: `--flux-root auto` (as `gate.sources.flux.AUTO_ROOT`, without loading it): the entry point
#: the revision declares.
AUTO_ROOT = "auto"

#: The refusal of `--argocd-root` beside `--path` or `--render` (Argo CD says what it renders).
ARGOCD_ROOT_ALONE = "--argocd-root renders what Argo CD deploys: leave out --path and --render"
#: The refusal of `--flux-root` beside `--path` or `--render` (Flux says what it builds).
FLUX_ROOT_ALONE = "--flux-root builds what Flux applies: leave out --path and --render"


def read_revision(reading: GitReading, rev: str, paths: Sequence[str]) -> list[RawObject]:
    """Revision `rev` as `reading` reads it, under `paths` (the entry points with Flux): the
    one side of a door that looks at a single revision (`gate doctor --rev`, `gate retire
    status --base`)."""
    from gate.sources import gitsource  # git only

    sha = gitsource.resolve_revision(reading.repo, rev)
    return reading.side(sha, rev_label(rev, sha), reading.flux_roots or paths).read()


def read_both(base: Side, head: Side) -> tuple[list[RawObject], list[RawObject]]:
    """Both sides' objects. Built sides are read at once: their builds are subprocesses
    (kustomize, per revision), so the second core pays. An error of the base side is raised
    first, as in order."""
    if isinstance(base, (KustomizeSide, FluxSide)):
        return _both(base.read, head.read)
    for side in (base, head):  # both refusals before any reading, as a person fixes them
        if isinstance(side, TreeSide):
            side.refuse()
    return base.read(), head.read()


def _both(read_base: Callable[[], _T], read_head: Callable[[], _T]) -> tuple[_T, _T]:
    from concurrent.futures import ThreadPoolExecutor  # it loads logging: only when built

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="prune-gate-side") as pool:
        base = pool.submit(read_base)
        head = pool.submit(read_head)
        return base.result(), head.result()


def refuse_kustomizations(repo: str, sha: str, paths: Sequence[str]) -> None:
    """Plain git mode reads files one by one; beside a kustomization that gives wrong answers
    (a claim dropped from `resources:`, a `$patch: delete`, a `namespace:` override all pass
    unseen), so it stops unless `--render none` says to read the files anyway."""
    from gate.sources import gitsource

    found = gitsource.kustomization_files(repo, sha, paths)
    if found:
        dirs = sorted({f.rpartition("/")[0] or "." for f in found})
        roots = [d for d in dirs if not any(d.startswith(o + "/") for o in dirs if o != ".")]
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        raise InputError(
            f"{', '.join(found[:3])}{more} at {sha[:12]} is kustomize input: what the deployer "
            "applies is its build (resources: lists, $patch: delete, namespace: overrides), "
            "which reading files one by one does not see. For a Flux repository, read it as "
            "the cluster does: --flux-root DIR (the directory of the cluster's flux-system "
            "Kustomization, e.g. clusters/prod), which also judges what a removed Flux "
            "Kustomization applied; else build it: --render kustomize with a --path per root "
            f"(here perhaps {' '.join('--path ' + r for r in roots[:3])}); or read the files "
            "anyway with --render none"
        )


def refuse_changed_submodules(
    repo: str, base: tuple[str, Sequence[str]], head: tuple[str, Sequence[str]]
) -> None:
    """A submodule bumped (or added, or removed) under the paths changes what is deployed in a
    way prune-gate cannot read: stop (exit 2) rather than pass it unseen."""
    from gate.sources import gitsource

    before = gitsource.submodules(repo, *base)
    after = gitsource.submodules(repo, *head)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        path = changed[0]
        old, new = before.get(path, "none")[:12], after.get(path, "none")[:12]
        raise InputError(
            f"submodule {path} changes ({old} -> {new}): its manifests are another "
            "repository's, which prune-gate does not read, so what the change deletes is "
            "unknown. Check that repository's change on its own (gate check --repo "
            f"{path} --base {old} --head {new}); to compare the rest without it, give --path "
            "for the directories beside it"
        )


def existing_paths(repo: str, sha: str, paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(paths that are directories or files at `sha`, paths that are not)."""
    from gate.sources import gitsource

    present: list[str] = []
    missing: list[str] = []
    for path in paths:
        (present if gitsource.path_exists(repo, sha, path) else missing).append(path)
    return present, missing


def rev_label(rev: str, sha: str) -> str:
    """`rev (sha12)`, or the sha alone when the revision was given as (a prefix of) it."""
    return sha if sha.startswith(rev) else f"{rev} ({sha[:12]})"


def workspace_relative(path: str) -> str:
    """An absolute path inside the working directory, made relative: annotations need that."""
    p = Path(path)
    if p.is_absolute() and p.is_relative_to(Path.cwd()):
        return p.relative_to(Path.cwd()).as_posix() or "."
    return path
