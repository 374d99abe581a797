"""What a Flux cluster is told to hold at one revision, found from the repository itself.

A Flux repository says which directories reach the cluster: the entry point (`clusters/prod`,
applied by the `flux-system` Kustomization) holds Kustomization objects, each naming a
`spec.path` in a source; those hold more. `--flux-root DIR` follows that graph at each revision,
so a Kustomization that is removed, or whose `spec.path`, `targetNamespace` or `sourceRef`
changes, is compared as what the cluster will be told to hold, and a repository that moves its
roots needs no flags per revision.

Each path is built as kustomize-controller builds it, by the helper with Flux's own code
(github.com/fluxcd/pkg/kustomize, tools/kustomize/flux.go): its `Generator` makes the path's
kustomization file where there is none and adds the Kustomization's build fields
(`targetNamespace`, `namePrefix`, `patches`, `components`, `images`...), then kustomize builds it,
then `SubstituteVariables` runs its `spec.postBuild` substitution (strict as kustomize-controller
v1.9 is), the values being the inline `substitute` over the `substituteFrom` ConfigMaps and
plain Secrets found in the same revision (when one cannot be read, an object needing a variable
without a value keeps its `${VAR}` text, so identities stay stable between the two revisions).
Every object is tagged with the Kustomization that applies it
(`flux:NS/NAME`), which the engine reads (`gate.engine.flux`) to tell a prune from an orphaning.

Only Kustomizations whose `sourceRef` is this repository are followed: the source the entry
point's own Kustomization reads (else the GitRepository `flux-system/flux-system`), or those
named with `--flux-source [KIND/]NS/NAME[=DIR]`. A source is a directory of the repository (an
OCIRepository pushed with `flux push artifact --path k8s` is `k8s`); a Kustomization's
`spec.path` is resolved inside it, as Flux resolves it inside the artifact. A Kustomization
whose source is none of them is an error naming the option that would follow it (what it
applies is unknown: never an allow on what happens to be readable), unless
`--flux-ignore-source` puts its source out of scope: then it is skipped, and said so in a note.

`--flux-root auto` finds the entry point from what the repository declares (`find_roots`).
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import shutil
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from gate.engine.deployers import flux, helm
from gate.model.errors import GitError, InputError, RenderError
from gate.model.objects import RawObject
from gate.model.refs import CLUSTER_SCOPED, crd_kind, group_of
from gate.sources import gitsource
from gate.sources.charts import (
    ChartAt,
    Sources,
    Unreadable,
    index_sources,
    locate,
    pull,
    run_helm,
)
from gate.sources.gitsource import SYMLINK_MODE, TreeEntry
from gate.sources.manifests import parse_stream
from gate.sources.render import DEFAULT_TIMEOUT, ExportedTree

FLUX_GROUP = flux.GROUP
HELM_GROUP = helm.GROUP
HELM_PREFIX = "helm:"
#: The helm binary for HelmReleases (`helm` on PATH by default).
HELM_ENV = "PRUNE_GATE_HELM"
#: The root tag of the objects a Kustomization applies; the entry point's are tagged with its path.
ROOT_PREFIX = "flux:"
#: The kinds of source a Kustomization can read that can be a directory of this repository.
SOURCE_KINDS = ("GitRepository", "OCIRepository", "Bucket")
#: `--flux-root auto`: the entry point is found from what the repository declares.
AUTO_ROOT = "auto"
#: An object that opts out of substitution (kustomize-controller honours it).
SUBSTITUTE_ANNOTATION = flux.SUBSTITUTE
#: The fields of a Kustomization's spec that Flux's generator reads into the build of its path
#: (fluxcd/pkg kustomize `Generator`; patchesStrategicMerge and patchesJson6902 are v1beta2's):
#: a `$patch: delete` in `spec.patches` removes an object as surely as deleting its file.
BUILD_FIELDS = (
    "targetNamespace",
    "namePrefix",
    "nameSuffix",
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "components",
    "ignoreMissingComponents",
    "images",
)
#: How many Kustomizations one revision may chain before it is called a loop.
MAX_KUSTOMIZATIONS = 2000

#: kustomize-controller's StrictPostBuildSubstitutions feature gate, on by default since v1.9: a
#: variable referenced with no default and no value fails the Kustomization's build.
STRICT_SUBSTITUTIONS = True


class FluxSource(NamedTuple):
    """A Flux source that is a directory of this repository (`--flux-source`)."""

    kind: str
    namespace: str
    name: str
    #: The directory of the repository the source's artifact holds ("." for the root).
    dir: str = "."

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name


DEFAULT_SOURCE = FluxSource("GitRepository", "flux-system", "flux-system")


def parse_source(text: str, option: str = "--flux-source", *, with_dir: bool = True) -> FluxSource:
    """`[KIND/]NS/NAME[=DIR]` (KIND defaults to GitRepository); an `InputError` otherwise."""
    ref, eq, directory = text.partition("=")
    parts = ref.split("/")
    if len(parts) == 2:
        parts.insert(0, "GitRepository")
    kind = next((k for k in SOURCE_KINDS if k.lower() == parts[0].lower()), "")
    if len(parts) != 3 or not kind or not all(parts[1:]) or (eq and not with_dir):
        shape = "[KIND/]NAMESPACE/NAME" + ("[=DIR]" if with_dir else "")
        raise InputError(
            f"{option} {text!r}: give {shape}, KIND one of {', '.join(SOURCE_KINDS)} "
            "(e.g. OCIRepository/flux-system/flux-system" + ("=k8s)" if with_dir else ")")
        )
    return FluxSource(kind, parts[1], parts[2], _clean(directory) if eq else ".")


@dataclass(frozen=True, slots=True)
class _Job:
    path: str
    root: str
    namespace: str
    substitute: dict[str, str]
    substitute_from: tuple[dict[str, Any], ...]
    #: The Kustomization as Flux's generator reads it (its BUILD_FIELDS): the build of its path.
    kustomization: dict[str, Any] = field(default_factory=dict)
    #: spec.postBuild.substituteStrategy: `Always` substitutes even with no variables (defaults).
    strategy: str = ""

    @property
    def target_namespace(self) -> str:
        """spec.targetNamespace, which the generator sets; `_finish` takes it off again where
        the API server would."""
        return str(self.kustomization.get("spec", {}).get("targetNamespace") or "")


def root_of(namespace: str, name: str) -> str:
    """The root tag of the objects Kustomization `namespace/name` applies."""
    return f"{ROOT_PREFIX}{namespace}/{name}"


#: What `render_flux` follows: each source key -> the repository directory it holds.
_Sources = dict[tuple[str, str, str], str]


def render_flux(
    repo: str | Path,
    rev: str,
    entry: str,
    *,
    sources: Sequence[FluxSource] = (),
    ignore: Sequence[FluxSource] = (),
    notes: list[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    fetch_charts: bool = False,
) -> list[RawObject]:
    """Every object the Kustomizations reachable from `entry` apply at `rev`, tagged by root
    (with `fetch_charts`, the charts of HelmReleases read where they live as well).

    `entry` "auto" is found from what the revision declares (`find_roots`). A Kustomization
    whose source is neither in `sources` (or the default) nor in `ignore` is an `InputError`;
    what is found and what is skipped is appended to `notes` (the reports say it)."""
    said = notes if notes is not None else []
    with ExportedTree(repo, rev, timeout=timeout) as tree:
        entry, declared = _resolve_entry(tree, entry, said)
        out: list[RawObject] = []
        found = [o for o in tree.build(entry, kustomization={}) if _is_kustomization(o.body)]
        given = sources or ([declared] if declared else [])
        own = {s.key: s.dir for s in given} or _own_sources(found, entry)
        said.extend(_inferred(own, sources, entry))
        skip = {s.key for s in ignore}
        first = _entry_job(tree, entry, found, own)
        queue, seen = [first], {first.root}
        releases: list[RawObject] = []
        scopes = CrdScopes()
        while queue:
            job = queue.pop(0)
            built = tree.build(job.path, job.root, job.kustomization, _post_build(job, out))
            objects = [_finish(o, job, scopes) for o in built]
            out.extend(objects)
            scopes.add(objects)
            kustomizations = [o for o in objects if _is_kustomization(o.body)]
            releases.extend(o for o in objects if _is_helm_release(o.body))
            for k in kustomizations:
                job_for = _job_for(k, own)
                if job_for is None:
                    said.extend(_not_followed(k, own, skip, tree.sha))
                elif job_for.root not in seen:
                    seen.add(job_for.root)
                    _check_next(tree, k, job_for, len(seen), entry)
                    queue.append(job_for)
        # After every Kustomization: a release's HelmRepository may be applied by another.
        fetched = FetchedCharts(index_sources(o.body for o in out)) if fetch_charts else None
        for hr in releases:
            out.extend(render_helm_release(tree, hr, own, timeout, fetched))
        if fetched is not None:
            said.extend(
                f"--fetch-charts: HelmRelease {name}'s chart was not read: {why}"
                for name, why in sorted(fetched.unread.items())
            )
        return out


def _resolve_entry(
    tree: ExportedTree, entry: str, said: list[str]
) -> tuple[str, FluxSource | None]:
    """The entry point to build (`auto` found, and said; the path cleaned and there), and the
    source that applies it when its declaration says so."""
    found, source = "", None
    if entry == AUTO_ROOT:
        entry, where, source = _auto_root(tree)
        found = f"--flux-root auto at {tree.sha[:12]}: {entry} ({where})"
        said.append(found)
    entry = _clean(entry)
    if not tree.exists(entry):
        # A FluxInstance that syncs an OCIRepository names a path inside the pushed artifact.
        why = (
            f" (found as {found}; a path inside an artifact needs --flux-root DIR)" if found else ""
        )
        raise GitError(
            f"--flux-root {entry} does not exist at revision {tree.rev} ({tree.sha[:12]}){why}"
        )
    return entry, source


def _check_next(tree: ExportedTree, k: RawObject, job: _Job, count: int, entry: str) -> None:
    """Refuse to follow a Kustomization past the loop limit, or to a path that is not there."""
    if count > MAX_KUSTOMIZATIONS:
        raise InputError(
            f"more than {MAX_KUSTOMIZATIONS} Kustomizations reachable from "
            f"{entry}: a loop in spec.path?"
        )
    if not tree.exists(job.path):
        raise GitError(
            f"Kustomization {job.root.removeprefix(ROOT_PREFIX)} names spec.path "
            f"{job.path}, which does not exist at revision {tree.rev} "
            f"({tree.sha[:12]}): Flux would fail to build it",
            str(k.source),
        )


def _not_followed(
    k: RawObject, own: _Sources, skip: set[tuple[str, str, str]], sha: str
) -> list[str]:
    """A Kustomization whose source is not followed: a note when the source is ignored on
    purpose, else the error that names the option that would follow it."""
    kind, ns, name = _source_of(k.body)
    meta = _meta(k.body)
    who = f"Kustomization {meta.get('namespace') or ''}/{meta.get('name', '')}"
    if (kind, ns, name) in skip:
        return [
            f"{who} ({k.source}) skipped at {sha[:12]}: its source {kind}/{ns}/{name} is out "
            "of scope (--flux-ignore-source); what it applies is not checked"
        ]
    followed = ", ".join(f"{k}/{n}/{m}={d}" for (k, n, m), d in sorted(own.items()))
    follow = (
        f"--flux-source {kind}/{ns}/{name}=DIR (DIR: the directory of this repository the "
        "source holds, e.g. the --path given to `flux push artifact`)"
        if kind in SOURCE_KINDS
        else "(a source of this kind is not a directory of the repository)"
    )
    raise InputError(
        f"{who} reads {kind or 'no source kind'}/{ns}/{name}, which is not a source prune-gate "
        f"follows here (followed: {followed}): what it applies is unknown, so nothing can be "
        f"allowed on what happens to be readable. Follow it with {follow}; or, if that source "
        f"is deliberately out of scope, --flux-ignore-source {kind}/{ns}/{name}",
        str(k.source),
    )


def _entry_job(
    tree: ExportedTree, entry: str, found: Sequence[RawObject], sources: _Sources
) -> _Job:
    """How the entry point is applied: by the Kustomization in it that applies it (flux-system,
    whose spec.path names the entry, or which is named as this repository's source), so its
    objects are that Kustomization's (its prune decides their removal); when the candidate
    re-points it elsewhere, Flux applies the new path instead, and so does this."""
    plain = _Job(entry, entry, "", {}, ())
    for k in found:
        job = _job_for(k, sources)
        if job is None:
            continue
        meta = _meta(k.body)
        # flux-system: the Kustomization named as the source it reads (bootstrap's pair).
        own = (str(meta.get("namespace") or ""), str(meta.get("name", "")))
        named = own == _source_of(k.body)[1:]
        if job.path == entry or named:
            if job.path != entry and not tree.exists(job.path):
                raise GitError(
                    f"Kustomization {job.root.removeprefix(ROOT_PREFIX)} applies the entry point "
                    f"but names spec.path {job.path}, which does not exist at revision "
                    f"{tree.rev} ({tree.sha[:12]})",
                    str(k.source),
                )
            return job
    return plain


#: The API group of flux-operator's FluxInstance (its `spec.sync.path` is the entry point).
FLUX_OPERATOR_GROUP = "fluxcd.controlplane.io"
#: The file `flux bootstrap` writes beside the entry point's own Kustomization.
GOTK_SYNC = "gotk-sync.yaml"
#: ksail's project file; its `spec.workload.sourceDirectory` (older: `spec.sourceDirectory`)
#: is the directory it pushes (default `k8s`), relative to the file.
KSAIL_DEFAULT_SOURCE = "k8s"


def find_roots(tree: Path) -> list[tuple[str, str]]:
    """The entry points a checked-out tree declares, as (root, where it was found), one per
    distinct root: a FluxInstance's `spec.sync.path`, the Kustomization of a `gotk-sync.yaml`
    (its spec.path), a `ksail*.yaml`'s source directory."""
    return [(d.root, d.where) for d in _declarations(tree)]


class _Declared(NamedTuple):
    root: str
    where: str
    #: The source that applies the root, when the declaration says it (a FluxInstance's
    #: GitRepository sync: named after its namespace, the repository root).
    source: FluxSource | None = None


def _declarations(tree: Path) -> list[_Declared]:
    found: dict[str, _Declared] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for fname in sorted(filenames):
            if not fname.endswith((".yaml", ".yml")):
                continue
            file = Path(dirpath) / fname
            rel = file.relative_to(tree).as_posix()
            for declared in _roots_in(rel, fname, file):
                found.setdefault(declared.root, declared)
    return [found[r] for r in sorted(found)]


def _roots_in(rel: str, fname: str, file: Path) -> list[_Declared]:
    """The entry points one file declares."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return _roots_in_text(rel, fname, text)


def _roots_in_text(rel: str, fname: str, text: str) -> list[_Declared]:
    is_sync, is_ksail = fname == GOTK_SYNC, fname.startswith("ksail")
    if not (is_sync or is_ksail or "FluxInstance" in text):
        return []
    import yaml  # a few small declaration files; ksail's has no metadata, so not a manifest

    try:
        bodies = [b for b in yaml.safe_load_all(text) if isinstance(b, dict)]
    except yaml.YAMLError:
        return []
    found = (_declared_root(b, rel, is_sync=is_sync, is_ksail=is_ksail) for b in bodies)
    return [r for r in found if r is not None]


def _declared_root(
    body: dict[str, Any], rel: str, *, is_sync: bool, is_ksail: bool
) -> _Declared | None:
    """The entry point one object of file `rel` declares, with where, or None."""
    spec, kind = _spec(body), body.get("kind")
    group = group_of(str(body.get("apiVersion", "")))
    if group == FLUX_OPERATOR_GROUP and kind == "FluxInstance":
        sync = spec.get("sync")
        if isinstance(sync, dict) and sync.get("path"):
            # flux-operator names the source after the FluxInstance's namespace.
            ns = str(_meta(body).get("namespace") or DEFAULT_SOURCE.namespace)
            git = str(sync.get("kind") or "GitRepository") == "GitRepository"
            source = FluxSource("GitRepository", ns, ns) if git else None
            where = f"FluxInstance spec.sync.path in {rel}"
            return _Declared(_clean(str(sync["path"])), where, source)
    elif is_sync and _is_kustomization(body) and spec.get("path"):
        root = _holding(posixpath.dirname(rel), _clean(str(spec["path"])))
        return _Declared(root, f"Kustomization spec.path in {rel}")
    elif is_ksail and kind == "Cluster" and "ksail" in group:
        workload = spec.get("workload")
        directory = (workload if isinstance(workload, dict) else {}).get("sourceDirectory")
        directory = directory or spec.get("sourceDirectory") or KSAIL_DEFAULT_SOURCE
        root = posixpath.join(posixpath.dirname(rel), str(directory))
        return _Declared(_clean(root), f"ksail source directory in {rel}")
    return None


def _holding(directory: str, path: str) -> str:
    """The entry point a `gotk-sync.yaml` in `directory` declares with spec.path `path`: the
    directory holding it that is that path (bootstrap writes it in `<path>/flux-system`), also
    when the path is relative to an artifact directory above (`k8s/clusters/prod` for
    `./clusters/prod`); else the path as declared."""
    while directory not in ("", "."):
        if directory == path or directory.endswith("/" + path):
            return directory
        directory = posixpath.dirname(directory)
    return path


#: What each manifest of a revision declares, by path and blob id: `gate history` asks at every
#: commit, and most files are the same blob as at the commit before.
_DECLARED: dict[tuple[str, str], list[_Declared] | None] = {}
_DECLARED_MAX = 50_000
_DECLARED_LOCK = threading.Lock()


def _declarations_at(tree: ExportedTree) -> list[_Declared]:
    """`_declarations` of an exported tree from git's listing and blobs, each blob read once
    per process, so the revision need not be exported (symlinks: from the export)."""
    files = [
        TreeEntry(path, mode, sha)
        for path, (mode, sha) in tree.index.files.items()
        if path.endswith((".yaml", ".yml"))
    ]
    if any(e.mode == SYMLINK_MODE for e in files):
        return _declarations(tree.tree)
    with _DECLARED_LOCK:  # base and candidate may be read in two threads
        known = {(e.path, e.sha): _DECLARED.get((e.path, e.sha)) for e in files}
    unread = [e for e in files if known[(e.path, e.sha)] is None]
    for entry, data in gitsource.read_blobs(tree.repo, tree.sha, unread):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        rel = entry.path
        known[(rel, entry.sha)] = _roots_in_text(rel, posixpath.basename(rel), text)
    with _DECLARED_LOCK:
        if len(_DECLARED) + len(unread) > _DECLARED_MAX:
            _DECLARED.clear()
        _DECLARED.update(known)
    found: dict[str, _Declared] = {}
    for e in sorted(files, key=lambda e: _walk_order(e.path)):
        for declared in known[(e.path, e.sha)] or ():
            found.setdefault(declared.root, declared)
    return [found[r] for r in sorted(found)]


def _walk_order(path: str) -> tuple[tuple[int, str], ...]:
    """`os.walk`'s order, as `_declarations` sorts it: a directory's files before its
    subdirectories, each sorted by name (the first declaration of a root is kept)."""
    parts = path.split("/")
    return (*((1, p) for p in parts[:-1]), (0, parts[-1]))


def _auto_root(tree: ExportedTree) -> _Declared:
    """`--flux-root auto`: the one entry point the revision declares (an `InputError` when it
    declares none, or several)."""
    roots = _declarations_at(tree)
    if len(roots) == 1:
        return roots[0]
    if not roots:
        raise InputError(
            f"--flux-root auto: no entry point declared at {tree.sha[:12]} (no FluxInstance "
            f"spec.sync.path, no {GOTK_SYNC}, no ksail*.yaml): give --flux-root DIR"
        )
    listed = "; ".join(f"{d.root} ({d.where})" for d in roots)
    raise InputError(
        f"--flux-root auto: {len(roots)} entry points declared at {tree.sha[:12]}: {listed}. "
        "Give the one(s) to check with --flux-root DIR (repeatable)"
    )


def _is_helm_release(body: dict[str, Any]) -> bool:
    return group_of(str(body.get("apiVersion", ""))) == HELM_GROUP and body.get("kind") == (
        "HelmRelease"
    )


def release_identity(body: dict[str, Any]) -> tuple[str, str]:
    """(release namespace, release name) of a Flux HelmRelease, as helm-controller names it:
    `spec.releaseName`, else `<targetNamespace>-<name>` with a targetNamespace, else its name;
    installed in `spec.targetNamespace`, else its own namespace."""
    spec, meta = _spec(body), _meta(body)
    name, ns = str(meta.get("name", "")), str(meta.get("namespace") or "")
    target = str(spec.get("targetNamespace") or "")
    release = str(spec.get("releaseName") or (f"{target}-{name}" if target else name))
    return target or ns, release


def helm_root(namespace: str, name: str) -> str:
    """The root tag of the objects HelmRelease `namespace/name` installs."""
    return f"{HELM_PREFIX}{namespace}/{name}"


def render_helm_release(
    tree: ExportedTree,
    hr: RawObject,
    own: _Sources,
    timeout: float,
    fetched: FetchedCharts | None = None,
) -> list[RawObject]:
    """What a HelmRelease installs, when its chart can be read and helm is on PATH: a directory
    of this repository (`spec.chart.spec.chart: ./charts/x` from our GitRepository), or with
    `--fetch-charts` (`fetched`) a chart at a pinned version in a HelmRepository or OCI registry
    (`gate.sources.charts`). `helm template` with its inline `spec.values`, each object tagged
    `helm:NS/NAME` and placed at the HelmRelease's own line (where a reader edits). Anything else
    (a version range, valuesFrom, a source with credentials) is not rendered: the engine says the
    release's content is unknown."""
    spec, meta = _spec(hr.body), _meta(hr.body)
    helm = shutil.which(os.environ.get(HELM_ENV, "helm"))
    if helm is None:
        return []
    chart = _chart_in_tree(tree, hr, own)
    if chart is None and fetched is not None:
        at = fetched.archive(hr, helm)
        label = str(at[1]) if at is not None else ""
        chart = at[0] if at is not None else None
    else:
        label = str(chart.relative_to(tree.tree)) if chart is not None else ""
    if chart is None:
        return []
    namespace, release = release_identity(hr.body)
    values = spec.get("values") if isinstance(spec.get("values"), dict) else {}
    with tempfile.TemporaryDirectory(prefix="prune-gate-helm-") as home:
        values_file = Path(home) / "values.json"
        values_file.write_text(json.dumps(values), encoding="utf-8")
        argv = [helm, "template", release, str(chart), "--namespace", namespace]
        argv += ["--include-crds", "--values", str(values_file)]
        done = run_helm(argv, home, timeout, f"{hr.source}: helm template {label}")
    if done.returncode != 0:
        raise RenderError(
            f"{hr.source}: HelmRelease {meta.get('namespace')}/{meta.get('name')}: "
            f"`helm template {label}` failed: {tree.repository_paths(done.stderr.strip())}"
        )
    root = helm_root(str(meta.get("namespace") or ""), str(meta.get("name", "")))
    out = []
    for o in parse_stream(done.stdout, f"{label} (helm template)"):
        body = o.body
        if not _meta(body).get("namespace") and _kind_key(body) not in CLUSTER_SCOPED:
            body = {**body, "metadata": {**_meta(body), "namespace": namespace}}
        out.append(RawObject(body, hr.source, root))
    return out


def _chart_in_tree(tree: ExportedTree, hr: RawObject, own: _Sources) -> Path | None:
    """The chart directory of this repository a HelmRelease installs from our GitRepository
    (without valuesFrom, which reads values from the cluster), or None."""
    spec, meta = _spec(hr.body), _meta(hr.body)
    chart = (
        ((spec.get("chart") or {}).get("spec") or {}) if isinstance(spec.get("chart"), dict) else {}
    )
    if not isinstance(chart, dict) or spec.get("valuesFrom"):
        return None
    source = chart.get("sourceRef") if isinstance(chart.get("sourceRef"), dict) else {}
    assert isinstance(source, dict)
    src_ns = str(source.get("namespace") or meta.get("namespace") or "")
    key = ("GitRepository", src_ns, str(source.get("name", "")))
    if source.get("kind") != "GitRepository" or key not in own:
        return None
    path = _inside(own[key], str(chart.get("chart") or ""))
    chart_file = posixpath.join(path, "Chart.yaml")
    if not tree.index.is_file(chart_file) and not tree.index.through_link(chart_file):
        return None  # (none: the revision need not be exported to know)
    found = tree.tree / path
    return found if (found / "Chart.yaml").is_file() else None


@dataclass
class FetchedCharts:
    """`--fetch-charts` for one revision: each HelmRelease's chart located among the revision's
    Flux sources and pulled (cached); why one was not is kept for the reader's notes."""

    #: The revision's Flux sources (`index_sources`).
    sources: Sources
    unread: dict[str, str] = field(default_factory=dict)

    def archive(self, hr: RawObject, helm: str) -> tuple[Path, ChartAt] | None:
        at = locate(hr.body, self.sources)
        if isinstance(at, Unreadable):
            meta = _meta(hr.body)
            self.unread[f"{meta.get('namespace')}/{meta.get('name')}"] = at.why
            return None
        return pull(at, helm), at


def _clean(path: str) -> str:
    norm = posixpath.normpath(path.strip().lstrip("/")) if path.strip() else "."
    if norm == ".." or norm.startswith("../"):
        raise InputError(f"{path} is outside the repository")
    return norm


def _is_kustomization(body: dict[str, Any]) -> bool:
    return group_of(str(body.get("apiVersion", ""))) == FLUX_GROUP and body.get("kind") == (
        "Kustomization"
    )


def _meta(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(body: dict[str, Any]) -> dict[str, Any]:
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def _source_of(body: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a Kustomization's sourceRef (namespace defaults to its own)."""
    ref = _spec(body).get("sourceRef")
    ref = ref if isinstance(ref, dict) else {}
    ns = str(ref.get("namespace") or _meta(body).get("namespace") or "")
    return str(ref.get("kind", "")), ns, str(ref.get("name", ""))


def _own_sources(kustomizations: Iterable[RawObject], entry: str) -> _Sources:
    """The source that is this repository: the one the Kustomization applying the entry point
    reads, else the GitRepository flux-system/flux-system (the repository root).

    A GitRepository is the repository root: its Kustomization applies the entry when its
    spec.path is the entry. An OCIRepository or a Bucket holds a directory DIR that cannot be
    known without being told, except in one sound case: the entry's own Kustomization names a
    spec.path that the entry ends with (`k8s/clusters/prod` applied with `./clusters/prod`),
    so the artifact is the directory above it (`k8s`); or names the artifact's root (`./`), so
    the artifact is the entry itself (ksail pushes its source directory so)."""
    candidates = [
        (_source_of(k.body), _clean(str(_spec(k.body).get("path") or "."))) for k in kustomizations
    ]
    # Most certain first: a Kustomization whose spec.path is the entry itself, of any source
    # kind; then one whose path the entry ends with; only then one applying an artifact's root
    # (`./`), which is also how Flux's own install manifests are applied from the upstream
    # OCIRepository `flux-manifests`: that one must not be taken for this repository when the
    # entry names its own Kustomization otherwise.
    for (kind, ns, name), path in candidates:
        if kind in SOURCE_KINDS and path == entry:
            return {(kind, ns, name): "."}
    for (kind, ns, name), path in candidates:
        if kind in SOURCE_KINDS and kind != "GitRepository" and entry.endswith("/" + path):
            return {(kind, ns, name): entry[: -len(path) - 1]}
    for (kind, ns, name), path in candidates:
        if kind in SOURCE_KINDS and kind != "GitRepository" and path == ".":
            return {(kind, ns, name): entry}  # the artifact's root applies the entry
    return {DEFAULT_SOURCE.key: DEFAULT_SOURCE.dir}


def _inferred(own: _Sources, given: Sequence[FluxSource], entry: str) -> list[str]:
    """A note when the directory of an OCIRepository or Bucket was taken from the entry's
    place (not told with --flux-source): the reports say what was assumed."""
    if given:
        return []
    return [
        f"{kind}/{ns}/{name} read as directory {directory} of this repository (the entry point "
        f"{entry}'s own Kustomization applies it from that artifact; --flux-source "
        f"{kind}/{ns}/{name}=DIR says otherwise)"
        for (kind, ns, name), directory in own.items()
        if kind != "GitRepository"
    ]


def _inside(directory: str, path: str) -> str:
    """A source's path as Flux resolves it: relative to the artifact's root (a leading `./`
    or `/` is the root), within the directory `directory` of this repository that the artifact
    holds; a path above the artifact's root is refused (an `InputError`)."""
    norm = posixpath.normpath(path.strip().lstrip("/")) if path.strip() else "."
    if norm == ".." or norm.startswith("../"):
        raise InputError(f"{path} is outside the source's root ({directory})")
    return _clean(posixpath.join(directory, norm))


def _job_for(k: RawObject, own: _Sources) -> _Job | None:
    """What to build for one Kustomization, or None when its source is not this repository."""
    key = _source_of(k.body)
    if key not in own:
        return None
    spec, meta = _spec(k.body), _meta(k.body)
    post = spec.get("postBuild") if isinstance(spec.get("postBuild"), dict) else {}
    assert isinstance(post, dict)
    inline = post.get("substitute") if isinstance(post.get("substitute"), dict) else {}
    assert isinstance(inline, dict)
    sources = post.get("substituteFrom") if isinstance(post.get("substituteFrom"), list) else []
    assert isinstance(sources, list)
    own_ns = str(meta.get("namespace") or "")
    return _Job(
        path=_inside(own[key], str(spec.get("path") or ".")),
        root=root_of(own_ns, str(meta.get("name", ""))),
        namespace=own_ns,
        substitute={str(k): str(v) for k, v in inline.items()},
        substitute_from=tuple(s for s in sources if isinstance(s, dict)),
        kustomization={"spec": {f: spec[f] for f in BUILD_FIELDS if f in spec}},
        strategy=str(post.get("substituteStrategy") or ""),
    )


def _finish(raw: RawObject, job: _Job, scopes: CrdScopes) -> RawObject:
    """One built (and substituted) object as the cluster will name it.

    Flux's build sets `targetNamespace` on every object kustomize does not know to be
    cluster-scoped, so also on a custom kind whose CRD (in this revision) says `Cluster`; the
    API server keeps no namespace on such an object, so neither does its identity here."""
    body = raw.body
    meta = _meta(body)
    if (
        job.target_namespace
        and meta.get("namespace") == job.target_namespace
        and scopes.cluster_scoped(body)
    ):
        body = {**body, "metadata": {k: v for k, v in meta.items() if k != "namespace"}}
    return replace(raw, body=body) if body is not raw.body else raw


class CrdScopes:
    """The scope of each custom kind, from the first CRD that declares it among the objects
    added (the revision's objects built so far): asked once per object, kept as a table."""

    def __init__(self) -> None:
        self._scope: dict[tuple[str, str], str] = {}

    def add(self, objects: Iterable[RawObject]) -> None:
        for o in objects:
            declared = crd_kind(o.body)
            if declared is not None:
                self._scope.setdefault(declared, str(_spec(o.body).get("scope", "")))

    def cluster_scoped(self, body: dict[str, Any]) -> bool:
        key = _kind_key(body)
        return key in CLUSTER_SCOPED or self._scope.get(key) == "Cluster"


def _kind_key(body: dict[str, Any]) -> tuple[str, str]:
    """An object's (API group, kind)."""
    return group_of(str(body.get("apiVersion", ""))), str(body.get("kind", ""))


def _post_build(job: _Job, known: Sequence[RawObject]) -> dict[str, Any] | None:
    """What the helper needs to run the Kustomization's post-build with Flux's code
    (tools/kustomize/flux.go), or None when it has nothing to substitute.

    The values are Flux's: `substituteFrom` in order (later wins), then inline `substitute` (wins
    over all). Flux reads the sources from the cluster; here they are the ConfigMaps and plain
    Secrets of the same revision in the Kustomization's namespace. A source that is not there
    and not `optional` (made outside this repository), or a SOPS Secret, is `unresolved`: its
    variables are unknown, and objects that need one keep their text."""
    if not (job.substitute or job.substitute_from or job.strategy == "Always"):
        return None
    values: dict[str, str] = {}
    unresolved = False
    for src in job.substitute_from:
        kind, name = str(src.get("kind", "")), str(src.get("name", ""))
        found = next((o for o in known if _is_source(o.body, kind, name, job.namespace)), None)
        if found is None or "sops" in found.body:
            unresolved = unresolved or found is not None or not src.get("optional")
            continue
        values.update(_data_of(found.body))
    values.update(job.substitute)
    post: dict[str, Any] = {"substitute": values}
    if job.strategy:
        post["substituteStrategy"] = job.strategy
    return {
        "namespace": job.namespace,
        "postBuild": post,
        "strict": STRICT_SUBSTITUTIONS,
        "unresolved": unresolved,
    }


def _is_source(body: dict[str, Any], kind: str, name: str, namespace: str) -> bool:
    meta = _meta(body)
    return (
        body.get("kind") == kind
        and meta.get("name") == name
        and str(meta.get("namespace") or "") == namespace
    )


def _data_of(body: dict[str, Any]) -> dict[str, str]:
    """A ConfigMap's data, or a plain Secret's (stringData, base64 data); SOPS-encrypted Secrets
    are not readable and give nothing."""
    if "sops" in body:
        return {}
    out: dict[str, str] = {}
    data = body.get("data") if isinstance(body.get("data"), dict) else {}
    assert isinstance(data, dict)
    for k, v in data.items():
        if body.get("kind") == "Secret":
            try:
                out[str(k)] = base64.b64decode(str(v), validate=True).decode("utf-8")
            except ValueError:
                continue
        else:
            out[str(k)] = str(v)
    string_data = body.get("stringData")
    if isinstance(string_data, dict):
        out.update({str(k): str(v) for k, v in string_data.items()})
    return out
