"""What a speculative deploy must keep: the guarded objects whose deletion waits for the merge.

A `defer` finding says "not yet": the object may be deleted, but only by the merged deploy, after
the checks run again. The candidate is then deployed with each such object kept exactly as base
declares it. Not with a keep annotation: Flux and Argo CD read that from the live object, so the
merged deploy would orphan the object instead of deleting it. An object can be kept only when
base declares it (an object only the cluster holds has no manifest to keep), and only in what the
deployer applies (what a HelmRelease's chart renders is installed by helm-controller, not by the
artifact): otherwise its deletion cannot be deferred, and it blocks. A kept object whose Flux
Kustomization the candidate removes keeps that Kustomization too (and its own, up the chain):
without it, the Kustomization's finalizer would delete what the artifact keeps. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from gate.engine.check import CheckResult
from gate.engine.flux import parent_ref
from gate.engine.kustomizations import HELM_PREFIX
from gate.model.findings import Finding, Severity
from gate.model.objects import Manifest
from gate.model.refs import ObjectRef


@dataclass(frozen=True)
class Kept:
    """A base object the speculative deploy keeps, and the findings that defer its deletion
    (none for a removed Kustomization kept for what it applies: `reason` says so)."""

    manifest: Manifest
    findings: tuple[Finding, ...]
    reason: str = ""


@dataclass(frozen=True)
class Deferral:
    """What the artifact keeps, and the deferred deletions it cannot keep (each with why)."""

    kept: tuple[Kept, ...]
    unkeepable: tuple[tuple[Finding, str], ...]

    @property
    def refs(self) -> frozenset[ObjectRef]:
        return frozenset(k.manifest.ref for k in self.kept)


def plan_deferral(result: CheckResult) -> Deferral:
    """The objects a speculative deploy keeps, from the check's `defer` findings."""
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
                "helm-controller installs it, not the artifact, so it cannot be kept there"
            )
            unkeepable.extend((f, why) for f in found)
        else:
            kept.append(Kept(m, tuple(found)))
    kept.extend(_removed_appliers(kept, result))
    kept.sort(key=_where)
    return Deferral(tuple(kept), tuple(unkeepable))


def _removed_appliers(kept: list[Kept], result: CheckResult) -> list[Kept]:
    """The Kustomizations the candidate removes that apply a kept object, up the chain."""
    have = {k.manifest.ref for k in kept}
    todo = list(kept)
    added: list[Kept] = []
    while todo:
        child = todo.pop().manifest
        ref = parent_ref(child.root)
        parent = result.base.get(ref) if ref is not None else None
        if parent is None or ref in have or ref in result.head:
            continue
        have.add(parent.ref)
        reason = (
            f"applies {child.ref.display()}, which is kept; the candidate removes it, and its "
            "finalizer would delete what it applied"
        )
        added.append(Kept(parent, (), reason))
        todo.append(added[-1])
    return added


def _where(k: Kept) -> tuple[str, int, str]:
    src = k.manifest.source
    return (
        (src.path, src.line, k.manifest.ref.display()) if src else ("", 0, k.manifest.ref.display())
    )
