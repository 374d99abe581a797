"""What a speculative deploy must keep: the guarded objects whose deletion waits for the merge.

A `defer` finding says "not yet": the object may be deleted, but only by the merged deploy, after
the checks run again. The candidate is then deployed with each such object kept exactly as base
declares it. Not with a keep annotation: Flux and Argo CD read that from the live object, so the
merged deploy would orphan the object instead of deleting it. An object can be kept only when
base declares it (an object only the cluster holds has no manifest to keep), and only in what the
deployer applies: what a HelmRelease's chart renders is installed by helm-controller, not by the
artifact, so such an object is kept by keeping its HelmRelease as base declares it (neither the
uninstall nor the upgrade that would delete it happens before the merge). Otherwise its
deletion cannot be deferred, and it blocks.

Whose word the artifact takes for what a deployer builds, and from where: base's. The artifact is
applied as it is (`kubectl apply -R -f DIR`), and the deployers then build what it declares from
the sources the cluster follows, base until the merge. A Kustomization as the candidate has it
would build base's files with the candidate's spec (its path, target namespace, source, patches,
prune, force): what neither revision declares and no check has seen, and it prunes or replaces
what the artifact keeps. So is every other object that tells a deployer what to build and from
where: a Flux source (a GitRepository's `ref`, `ignore`, `include`, `url`; an OCIRepository,
Bucket, HelmRepository or HelmChart) as the candidate has it makes source-controller fetch
another revision or other files for base's Kustomizations; a HelmRelease whose chart comes from
the repository, another source or a `chartRef` puts the candidate's values on base's chart (one
from a HelmRepository is the candidate's own, unless its HelmRepository changes); an Argo CD
Application or ApplicationSet re-pointed (path, revision, repository) syncs base's repository
where neither revision declares. All of these are written as base declares them: a changed one
as base has it, a removed one kept (a Kustomization's finalizer would delete what it applied),
and a new one left out. So are the ConfigMaps and Secrets a Kustomization or release reads into
its build from the cluster (`postBuild.substituteFrom`, `valuesFrom`: the candidate's variables
on base's files can rename what they declare). Their changes reach the cluster with the merged
deploy. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.engine.check import CheckResult
from gate.engine.deployers import argocd, flux, kapp
from gate.engine.flux import HELM_GROUP, SOURCE_GROUP, parent_ref
from gate.engine.kustomizations import FLUX_GROUP, HELM_PREFIX, ROOT_PREFIX
from gate.engine.remotes import REMOTE_GROUP
from gate.model.findings import Finding, Severity
from gate.model.objects import Manifest
from gate.model.refs import ObjectRef


@dataclass(frozen=True)
class Kept:
    """A base object the speculative deploy keeps, and the findings that defer its deletion
    (none for a Flux object kept as base declares it: `reason` says why)."""

    manifest: Manifest
    findings: tuple[Finding, ...]
    reason: str = ""


@dataclass(frozen=True)
class Withheld:
    """A candidate object the artifact leaves out (base declares no such object), and why."""

    manifest: Manifest
    reason: str


@dataclass(frozen=True)
class Deferral:
    """What the artifact keeps, what it leaves out, and the deferred deletions it cannot keep
    (each with why)."""

    kept: tuple[Kept, ...]
    unkeepable: tuple[tuple[Finding, str], ...]
    withheld: tuple[Withheld, ...] = ()
    #: Deferred findings the deployer keeps by itself, with why: a remote resource the
    #: candidate drops, which Flux goes on building from base's files until the merge.
    built_from_base: tuple[tuple[Finding, str], ...] = ()

    @property
    def refs(self) -> frozenset[ObjectRef]:
        return frozenset(k.manifest.ref for k in self.kept)

    @property
    def withheld_refs(self) -> frozenset[ObjectRef]:
        return frozenset(w.manifest.ref for w in self.withheld)


def plan_deferral(result: CheckResult) -> Deferral:
    """What a speculative deploy writes instead of the candidate: the objects whose deletion is
    deferred, kept as base declares them, and every object that tells a deployer what to build
    and from where (with what it reads into the build), as base declares it."""
    by_ref: dict[ObjectRef, list[Finding]] = {}
    for f in result.decision.findings:
        if f.severity is Severity.DEFER:
            # An object a release's chart makes is kept by keeping that HelmRelease.
            made = result.base.get(f.ref)
            release = _keeping_release(made, result) if made is not None else None
            by_ref.setdefault(release or f.ref, []).append(f)
    kept: list[Kept] = []
    unkeepable: list[tuple[Finding, str]] = []
    built: list[tuple[Finding, str]] = []
    for ref, found in by_ref.items():
        m = result.base.get(ref)
        if ref.group == REMOTE_GROUP:
            flux_built = any(o.root.startswith(ROOT_PREFIX) for o in result.base.objects.values())
            (built if flux_built else unkeepable).extend(
                (f, _remote_kept(f, flux_built)) for f in found
            )
        elif m is None:
            why = (
                "no manifest in base declares it (only the cluster holds it), so the "
                "artifact has nothing to keep; retire it, or let the merged deploy judge it"
            )
            unkeepable.extend((f, why) for f in found)
        elif m.root.startswith(HELM_PREFIX):
            why = (
                f"its chart makes it (HelmRelease {m.root.removeprefix(HELM_PREFIX)}): "
                "helm-controller installs it, not the artifact, so it cannot be kept there "
                "(the release's upgrade or uninstall deletes what its chart no longer makes)"
            )
            unkeepable.extend((f, why) for f in found)
        else:
            kept.append(Kept(m, tuple(found)))
    as_base, withheld = _builders_as_base(result, kept)
    kept.extend(as_base)
    kept.sort(key=lambda k: _where(k.manifest))
    withheld.sort(key=lambda w: _where(w.manifest))
    return Deferral(tuple(kept), tuple(unkeepable), tuple(withheld), tuple(built))


def _remote_kept(f: Finding, flux_built: bool) -> str:
    """Why a remote resource the candidate drops is kept (read with --flux-root: the artifact's
    Kustomizations and sources are base's, so kustomize-controller goes on building base's
    file, URL included, until the merge), or why it cannot be (its objects were never read,
    so no manifest of theirs can be written)."""
    where = f.source.path if f.source is not None else "base's kustomization"
    if flux_built:
        return (
            f"kept by Flux: the artifact's Kustomizations and sources are as base declares them, "
            f"so kustomize-controller goes on building {where}, which names {f.ref.name}, until "
            "the merge"
        )
    return (
        f"what {f.ref.name} holds was never read, so the artifact cannot keep it: check with "
        "--fetch-remote (its objects are then judged and kept one by one), or vendor the file"
    )


def _keeping_release(m: Manifest, result: CheckResult) -> ObjectRef | None:
    """The HelmRelease to keep as base declares it so that what its chart made stays: `m` is
    made by a release's chart (rendered), and base declares the HelmRelease itself in what the
    artifact applies. helm-controller then neither uninstalls nor upgrades the release until the
    merged deploy; None for any other object."""
    if not m.root.startswith(HELM_PREFIX):
        return None
    release = parent_ref(m.root)
    declared = result.base.get(release) if release is not None else None
    if declared is None or declared.root.startswith(HELM_PREFIX):
        return None
    return release


def _builders_as_base(result: CheckResult, kept: list[Kept]) -> tuple[list[Kept], list[Withheld]]:
    """Every object that tells a deployer what to build and from where, and every ConfigMap or
    Secret one reads into the build, as base declares it: kept where base's differs from the
    candidate's or the candidate removes it, left out where only the candidate declares it (or
    base's comes from a chart, which the artifact cannot write)."""
    have = {k.manifest.ref for k in kept}
    applies: dict[ObjectRef, list[ObjectRef]] = {}
    for k in kept:
        parent = parent_ref(k.manifest.root)
        if parent is not None:
            applies.setdefault(parent, []).append(k.manifest.ref)
    out: list[Kept] = []
    withheld: list[Withheld] = []
    for ref, read_by in _builders(result).items():
        base, head = result.base.get(ref), result.head.get(ref)
        if ref in have or (base is not None and head is not None and _same(base, head)):
            continue
        if base is not None and not base.root.startswith(HELM_PREFIX):
            why = _why_kept(base, head, read_by, applies.get(ref, []))
            out.append(Kept(base, (), why))
        elif head is not None and not head.root.startswith(HELM_PREFIX):
            withheld.append(Withheld(head, _why_withheld(base, read_by)))
    return out, withheld


#: What reads a ConfigMap or Secret into a build: (what it is to it, the reader), e.g.
#: ("postBuild variables", Kustomization ns/apps); None for a builder itself.
ReadBy = tuple[str, ObjectRef] | None

ARGO_GROUP = argocd.GROUP
#: Argo CD's objects that name a repository, revision and path to sync (an ApplicationSet
#: generates Applications from its template and generators).
ARGO_KINDS = argocd.BUILDER_KINDS

#: Other controllers' objects that say what to build and from where, by group (None: every
#: kind of it), and who acts on them: Flux's source extensions (an ArtifactGenerator's copy
#: rules decide which files an ExternalArtifact holds), flux-operator (a FluxInstance's
#: `sync.path` is the root Kustomization's, a ResourceSet templates Kustomizations), Fleet's
#: GitRepo and kapp-controller's App and PackageInstall (each names a repository and paths).
OTHER_BUILDERS: dict[str, tuple[frozenset[str] | None, str]] = {
    "source.extensions.fluxcd.io": (None, "Flux's source extensions build"),
    flux.OPERATOR_GROUP: (
        frozenset({"FluxInstance", "ResourceSet", "ResourceSetInputProvider"}),
        "flux-operator builds",
    ),
    "fleet.cattle.io": (frozenset({"GitRepo", "HelmOp"}), "Fleet builds"),
    kapp.GROUP: (frozenset({kapp.APP.kind}), "kapp-controller builds"),
    "packaging.carvel.dev": (frozenset({"PackageInstall"}), "kapp-controller builds"),
}


def _other_builder(ref: ObjectRef) -> bool:
    kinds, _ = OTHER_BUILDERS.get(ref.group, (frozenset(), ""))
    return kinds is None or ref.kind in kinds


def _builders(result: CheckResult) -> dict[ObjectRef, ReadBy]:
    """The objects on either side that tell a deployer what to build and from where: every Flux
    source (source-controller fetches what the others build from), every Kustomization, every
    HelmRelease whose chart the cluster builds from base's word (`_chart_from_base`), every
    Argo CD Application and ApplicationSet, the other controllers' builders (`OTHER_BUILDERS`);
    and the ConfigMaps and Secrets either side's version
    of a Kustomization or release reads into its build (`postBuild.substituteFrom`,
    `valuesFrom`), with what reads them."""
    refs: dict[ObjectRef, ReadBy] = {}  # in order, once
    sides = (result.base, result.head)
    for side in sides:
        for m in side.objects.values():
            if (
                m.ref.group == SOURCE_GROUP
                or (m.ref.group == ARGO_GROUP and m.ref.kind in ARGO_KINDS)
                or _other_builder(m.ref)
            ):
                refs.setdefault(m.ref, None)
        for m in side.of_kind(FLUX_GROUP, "Kustomization"):
            refs.setdefault(m.ref, None)
    changed = {r for r in refs if r.group == SOURCE_GROUP and not _same_on_both_sides(result, r)}
    for side in sides:
        for m in side.of_kind(HELM_GROUP, "HelmRelease"):
            if _chart_from_base(m, changed):
                refs.setdefault(m.ref, None)
    inputs: dict[ObjectRef, ReadBy] = {}
    for ref in refs:
        versions = (result.base.get(ref), result.head.get(ref))
        for m in (v for v in versions if v is not None):
            for kind, name, what in _inputs(m):
                inputs.setdefault(ObjectRef("", kind, ref.namespace, name), (what, ref))
    for ref, read_by in inputs.items():
        refs.setdefault(ref, read_by)
    return refs


def _same_on_both_sides(result: CheckResult, ref: ObjectRef) -> bool:
    base, head = result.base.get(ref), result.head.get(ref)
    return base is not None and head is not None and _same(base, head)


def _inputs(m: Manifest) -> list[tuple[str, str, str]]:
    """(kind, name, what) of each ConfigMap or Secret `m` reads into what it builds: a
    Kustomization's `spec.postBuild.substituteFrom`, a HelmRelease's `spec.valuesFrom` (both in
    its own namespace); none for another kind."""
    if m.ref.group == FLUX_GROUP and m.ref.kind == "Kustomization":
        post = m.spec.get("postBuild")
        entries = post.get("substituteFrom") if isinstance(post, dict) else None
        what = "postBuild variables"
    elif m.ref.group == HELM_GROUP and m.ref.kind == "HelmRelease":
        entries, what = m.spec.get("valuesFrom"), "values"
    else:
        return []
    found = []
    for e in entries if isinstance(entries, list) else ():
        if isinstance(e, dict) and e.get("kind") in ("ConfigMap", "Secret") and e.get("name"):
            found.append((str(e["kind"]), str(e["name"]), what))
    return found


def _chart_from_base(release: Manifest, changed_sources: set[ObjectRef]) -> bool:
    """Whether helm-controller would put this release's values on a chart of base's word: one
    from the repository (a GitRepository), from another source (a Bucket; a `chartRef` to an
    OCIRepository or HelmChart, which the artifact writes as base declares them), or from a
    HelmRepository the candidate changes (written as base's). Only a chart from an unchanged
    HelmRepository is the candidate's own word; a release that names no chart counts as base's
    (what it builds cannot be known)."""
    chart = release.spec.get("chart")
    spec = chart.get("spec") if isinstance(chart, dict) else None
    source = spec.get("sourceRef") if isinstance(spec, dict) else None
    if release.spec.get("chartRef") is not None or not isinstance(source, dict):
        return True
    if source.get("kind") != "HelmRepository":
        return True
    ns = source.get("namespace") or release.ref.namespace
    named = ObjectRef(SOURCE_GROUP, "HelmRepository", str(ns), str(source.get("name", "")))
    return named in changed_sources


def _declared(m: Manifest) -> dict[str, Any]:
    return {k: v for k, v in m.body.items() if k != "status"}


def _same(base: Manifest, head: Manifest) -> bool:
    return _declared(base) == _declared(head)


def _changes(base: Manifest, head: Manifest) -> str:
    """The fields that differ, as `spec.path, spec.patches` (top-level spec fields; else the
    top-level field)."""
    a, b = _declared(base), _declared(head)
    fields: list[str] = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        x, y = a.get(key), b.get(key)
        if key in ("spec", "metadata") and isinstance(x, dict) and isinstance(y, dict):
            fields += [f"{key}.{k}" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
        else:
            fields.append(key)
    return ", ".join(fields)


def _deployer(ref: ObjectRef) -> tuple[str, str]:
    """Who builds from the source the cluster follows for `ref`, and what of the candidate's
    would be put on base's files: (`kustomize-controller builds`, `spec`)."""
    if ref.group == ARGO_GROUP:
        return "Argo CD's application controller syncs", "source, path or revision"
    if ref.group in OTHER_BUILDERS:
        return OTHER_BUILDERS[ref.group][1], "spec"
    if ref.kind == "HelmRelease":
        return "helm-controller builds", "spec"
    return "kustomize-controller builds", "spec"


def _why_kept(
    base: Manifest, head: Manifest | None, read_by: ReadBy, applies: list[ObjectRef]
) -> str:
    holds = "" if read_by is None else f", and it holds the {read_by[0]} of {read_by[1].display()}"
    if head is None:
        if read_by is not None:
            return (
                f"the candidate removes it{holds}: kept as base declares it until the merged deploy"
            )
        if base.ref.group == SOURCE_GROUP:
            return (
                "the candidate removes it: kept as base declares it until the merged deploy "
                "(base's Kustomizations and releases, which the artifact holds, build from it)"
            )
        return (
            "the candidate removes it: kept as base declares it until the merged deploy (its "
            f"finalizer would delete what it applied){_applies(applies)}"
        )
    if base.ref.group == SOURCE_GROUP:
        return (
            f"the candidate changes {_changes(base, head)}: written as base declares it, because "
            "base's Kustomizations and releases (the artifact's) build from what "
            "source-controller fetches for it: the candidate's would give them another revision, "
            "other files or another artifact, what neither revision declares, and they could "
            "prune or replace what the artifact keeps"
        )
    reader = base.ref if read_by is None else read_by[1]
    builds, given = _deployer(reader)
    if read_by is not None:
        given = read_by[0]
    return (
        f"the candidate changes {_changes(base, head)}{holds}: written as base declares it, "
        f"because {builds} from the source the cluster follows (base until the merge), "
        f"and base's files with the candidate's {given} are what neither revision declares: "
        f"they could prune or replace what the artifact keeps{_applies(applies)}"
    )


def _applies(applies: list[ObjectRef]) -> str:
    if not applies:
        return ""
    return f"; it applies {', '.join(r.display() for r in sorted(applies))}, which is kept"


def _why_withheld(base: Manifest | None, read_by: ReadBy) -> str:
    if base is not None:
        return (
            f"base's comes from a chart (HelmRelease {base.root.removeprefix(HELM_PREFIX)}), "
            "which the artifact cannot write: left out, so helm-controller keeps base's"
        )
    read = "" if read_by is None else f", and {read_by[1].display()} would read its {read_by[0]}"
    return (
        f"new in the candidate{read}: left out until the merged deploy, because the cluster "
        "builds from the sources it follows (base until the merge): base's files with the "
        "candidate's word on what to build and from where, which could prune or replace what "
        "the artifact keeps"
    )


def _where(m: Manifest) -> tuple[str, int, str]:
    src = m.source
    return (src.path, src.line, m.ref.display()) if src else ("", 0, m.ref.display())
