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
GitRepository (base's chart with the candidate's values). Their changes reach the cluster with the
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
    """Every Flux object that builds from a source, as base declares it: kept where base's
    differs from the candidate's or the candidate removes it, left out where only the candidate
    declares it (or base's comes from a chart, which the artifact cannot write)."""
    have = {k.manifest.ref for k in kept}
    applies: dict[ObjectRef, list[ObjectRef]] = {}
    for k in kept:
        parent = parent_ref(k.manifest.root)
        if parent is not None:
            applies.setdefault(parent, []).append(k.manifest.ref)
    out: list[Kept] = []
    withheld: list[Withheld] = []
    for ref in _builders(result):
        base, head = result.base.get(ref), result.head.get(ref)
        if ref in have or (base is not None and head is not None and _same(base, head)):
            continue
        if base is not None and not base.root.startswith(HELM_PREFIX):
            out.append(Kept(base, (), _why_kept(base, head, applies.get(ref, []))))
        elif head is not None and not head.root.startswith(HELM_PREFIX):
            withheld.append(Withheld(head, _why_withheld(base)))
    return out, withheld


def _builders(result: CheckResult) -> list[ObjectRef]:
    """The Flux objects on either side that build from a source: every Kustomization, and every
    HelmRelease whose chart comes from a GitRepository on either side (helm-controller builds
    it from base's files until the merge)."""
    refs: dict[ObjectRef, None] = {}  # in order, once
    for side in (result.base, result.head):
        for m in side.of_kind(FLUX_GROUP, "Kustomization"):
            refs.setdefault(m.ref)
        for m in side.of_kind(HELM_GROUP, "HelmRelease"):
            if _chart_from_git(m):
                refs.setdefault(m.ref)
    return list(refs)


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


def _why_kept(base: Manifest, head: Manifest | None, applies: list[ObjectRef]) -> str:
    builder = "helm-controller" if base.ref.kind == "HelmRelease" else "kustomize-controller"
    kept = ""
    if applies:
        names = ", ".join(r.display() for r in sorted(applies))
        kept = f"; it applies {names}, which the artifact keeps"
    if head is None:
        return (
            "the candidate removes it: kept as base declares it until the merged deploy (its "
            f"finalizer would delete what it applied){kept}"
        )
    return (
        f"the candidate changes {_changes(base, head)}: written as base declares it, because "
        f"{builder} builds it from the source the cluster follows (base until the merge), and "
        "base's files with the candidate's spec are what neither revision declares: they could "
        f"prune or replace what the artifact keeps{kept}"
    )


def _why_withheld(base: Manifest | None) -> str:
    if base is not None:
        return (
            f"base's comes from a chart (HelmRelease {base.root.removeprefix(HELM_PREFIX)}), "
            "which the artifact cannot write: left out, so helm-controller keeps base's"
        )
    return (
        "new in the candidate: left out until the merged deploy, because Flux would build it "
        "from the source the cluster follows (base until the merge): base's files with the "
        "candidate's spec, which could prune or replace what the artifact keeps"
    )


def _where(m: Manifest) -> tuple[str, int, str]:
    src = m.source
    return (src.path, src.line, m.ref.display()) if src else ("", 0, m.ref.display())
