"""What a speculative deploy must keep: the guarded objects whose deletion waits for the merge.

A `defer` finding says "not yet": the object may be deleted, but only by the merged deploy, after
the checks run again. The candidate is then deployed with each such object kept exactly as base
declares it. Not with a keep annotation: Flux and Argo CD read that from the live object, so the
merged deploy would orphan the object instead of deleting it. An object can be kept only when
base declares it (an object only the cluster holds has no manifest to keep), and only in what the
deployer applies (what a HelmRelease's chart renders is installed by helm-controller, not by the
artifact: its release's upgrade or uninstall deletes what the chart no longer makes): otherwise
its deletion cannot be deferred, and it blocks.

Whose word the artifact takes for what Flux builds: base's. The artifact is applied as it is
(`kubectl apply -R -f DIR`), and kustomize-controller then builds every Kustomization in it from
its source, which the cluster follows at base until the merge. A Kustomization as the candidate
has it would build base's files with the candidate's spec (its path, target namespace, source,
patches, prune, force): what neither revision declares and no check has seen, and it prunes or
replaces what the artifact keeps. So every Flux Kustomization is written as base declares it: a
changed one as base has it, a removed one kept (its finalizer would delete what it applied), and
a new one left out. Likewise a HelmRelease whose chart helm-controller builds from a
GitRepository (base's chart with the candidate's values), and the ConfigMaps and Secrets either
reads into its build from the cluster (`postBuild.substituteFrom`, `valuesFrom`: the candidate's
variables on base's files can rename what they declare). Their changes reach the cluster with the
merged deploy. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.engine.check import CheckResult
from gate.engine.flux import HELM_GROUP, parent_ref
from gate.engine.kustomizations import FLUX_GROUP, HELM_PREFIX
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

    @property
    def refs(self) -> frozenset[ObjectRef]:
        return frozenset(k.manifest.ref for k in self.kept)

    @property
    def withheld_refs(self) -> frozenset[ObjectRef]:
        return frozenset(w.manifest.ref for w in self.withheld)


def plan_deferral(result: CheckResult) -> Deferral:
    """What a speculative deploy writes instead of the candidate: the objects whose deletion is
    deferred, kept as base declares them, and every Flux object that builds from the source the
    cluster follows, as base declares it."""
    by_ref: dict[ObjectRef, list[Finding]] = {}
    for f in result.decision.findings:
        if f.severity is Severity.DEFER:
            by_ref.setdefault(f.ref, []).append(f)
    kept: list[Kept] = []
    unkeepable: list[tuple[Finding, str]] = []
    for ref, found in by_ref.items():
        m = result.base.get(ref)
        if m is None:
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
    as_base, withheld = _flux_as_base(result, kept)
    kept.extend(as_base)
    kept.sort(key=lambda k: _where(k.manifest))
    withheld.sort(key=lambda w: _where(w.manifest))
    return Deferral(tuple(kept), tuple(unkeepable), tuple(withheld))


def _flux_as_base(result: CheckResult, kept: list[Kept]) -> tuple[list[Kept], list[Withheld]]:
    """Every Flux object that builds from a source, and every ConfigMap or Secret it reads into
    the build, as base declares it: kept where base's differs from the candidate's or the
    candidate removes it, left out where only the candidate declares it (or base's comes from a
    chart, which the artifact cannot write)."""
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
#: ("postBuild variables", Kustomization ns/apps); None for a Flux object itself.
ReadBy = tuple[str, ObjectRef] | None


def _builders(result: CheckResult) -> dict[ObjectRef, ReadBy]:
    """The Flux objects on either side that build from a source (every Kustomization, and every
    HelmRelease whose chart comes from a GitRepository on either side: helm-controller builds it
    from base's files until the merge), and the ConfigMaps and Secrets either side's version
    reads into its build (`postBuild.substituteFrom`, `valuesFrom`), with what reads them."""
    refs: dict[ObjectRef, ReadBy] = {}  # in order, once
    for side in (result.base, result.head):
        for m in side.of_kind(FLUX_GROUP, "Kustomization"):
            refs.setdefault(m.ref, None)
        for m in side.of_kind(HELM_GROUP, "HelmRelease"):
            if _chart_from_git(m):
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


def _inputs(m: Manifest) -> list[tuple[str, str, str]]:
    """(kind, name, what) of each ConfigMap or Secret `m` reads into what it builds: a
    Kustomization's `spec.postBuild.substituteFrom`, a HelmRelease's `spec.valuesFrom` (both in
    its own namespace)."""
    if m.ref.kind == "Kustomization":
        post = m.spec.get("postBuild")
        entries = post.get("substituteFrom") if isinstance(post, dict) else None
        what = "postBuild variables"
    else:
        entries, what = m.spec.get("valuesFrom"), "values"
    found = []
    for e in entries if isinstance(entries, list) else ():
        if isinstance(e, dict) and e.get("kind") in ("ConfigMap", "Secret") and e.get("name"):
            found.append((str(e["kind"]), str(e["name"]), what))
    return found


def _chart_from_git(release: Manifest) -> bool:
    chart = release.spec.get("chart")
    spec = chart.get("spec") if isinstance(chart, dict) else None
    source = spec.get("sourceRef") if isinstance(spec, dict) else None
    return isinstance(source, dict) and source.get("kind") == "GitRepository"


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


def _why_kept(
    base: Manifest, head: Manifest | None, read_by: ReadBy, applies: list[ObjectRef]
) -> str:
    holds = "" if read_by is None else f", and it holds the {read_by[0]} of {read_by[1].display()}"
    if head is None:
        if read_by is None:
            return (
                "the candidate removes it: kept as base declares it until the merged deploy (its "
                f"finalizer would delete what it applied){_applies(applies)}"
            )
        return f"the candidate removes it{holds}: kept as base declares it until the merged deploy"
    reader = base.ref if read_by is None else read_by[1]
    builder = "helm-controller" if reader.kind == "HelmRelease" else "kustomize-controller"
    given = "spec" if read_by is None else read_by[0]
    return (
        f"the candidate changes {_changes(base, head)}{holds}: written as base declares it, "
        f"because {builder} builds from the source the cluster follows (base until the merge), "
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
        f"new in the candidate{read}: left out until the merged deploy, because Flux would "
        "build from the source the cluster follows (base until the merge): base's files with "
        "the candidate's spec, which could prune or replace what the artifact keeps"
    )


def _where(m: Manifest) -> tuple[str, int, str]:
    src = m.source
    return (src.path, src.line, m.ref.display()) if src else ("", 0, m.ref.display())
