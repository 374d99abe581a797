"""The prune plan as a tree: what a deploy deletes, force-replaces and orphans, where, and with
which verdict.

A flat list of findings repeats an object under every code; a reviewer asks another question
first: what goes, and is it safe? So the plan is grouped as `flux tree` groups a Kustomization's
inventory: deployer root (a Flux Kustomization, a --path, a rendered input) -> namespace ->
object (its action, verdict and codes) -> why it matters (the workloads that mount a claim, the
volume behind it, the pods and nodes holding it under --live). Pure: built from a `CheckResult`,
rendered by `gate.report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from gate.engine.argocd import APPSET_PREFIX
from gate.engine.argocd import ROOT_PREFIX as ARGO_PREFIX
from gate.engine.check import CheckResult
from gate.engine.kustomizations import ROOT_PREFIX
from gate.engine.plan import Action, Change
from gate.engine.policy import Policy
from gate.model.findings import Code, Finding
from gate.model.liveview import LiveView
from gate.model.objects import Inventory, Manifest, Source
from gate.model.refs import ObjectRef
from gate.model.workloads import claim_names, pod_spec_of

#: Verdicts an object can carry, strongest first (`exempt`: every finding on it was exempted).
ENTRY_VERDICTS = ("block", "defer", "warn", "exempt", "allow")

#: What the plan says the deploy does to an object.
ORPHAN = "orphan"  # removed from the manifests, but its deployer does not prune: left unmanaged
CASCADE = "cascade"  # not in the manifests: deleted live because its namespace is


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """One object the deploy touches, or one a finding names."""

    ref: ObjectRef
    api_version: str
    #: delete, replace, update (an immutable field: the apply fails), orphan, cascade, or ""
    #: (unchanged, named by a finding).
    action: str
    verdict: str
    codes: tuple[str, ...]
    source: Source | None
    head_source: Source | None
    #: Why the deploy does it (`removed from the manifests`, what turned force on, ...).
    cause: str
    #: What makes it matter, one line each: mounting workloads, volume, pods and their nodes.
    details: tuple[str, ...]
    guarded: bool


@dataclass(frozen=True, slots=True)
class NamespacePlan:
    """The entries of one namespace ("" for cluster-scoped objects); `entry` is the Namespace
    object's own, when the deploy touches it (everything under it goes with it)."""

    name: str
    entry: PlanEntry | None
    objects: tuple[PlanEntry, ...]


@dataclass(frozen=True, slots=True)
class RootPlan:
    """What one deployer root (a Flux Kustomization, a path) does."""

    root: str
    namespaces: tuple[NamespacePlan, ...]


@dataclass(frozen=True, slots=True)
class PlanTree:
    """The whole plan, and its counts."""

    roots: tuple[RootPlan, ...]
    deletes: int
    replaces: int
    orphans: int
    updates: int
    cascades: int

    def entries(self) -> Iterator[PlanEntry]:
        """Every entry, in tree order."""
        for root in self.roots:
            for ns in root.namespaces:
                if ns.entry is not None:
                    yield ns.entry
                yield from ns.objects

    @property
    def empty(self) -> bool:
        return not self.roots


def root_label(root: str) -> str:
    """How a root is named: `Kustomization flux-system/apps` for a Flux root, `Application
    argocd/db` for an Argo CD one (`ApplicationSet argocd/apps` for the Applications it
    generates), the path else."""
    if root.startswith(ROOT_PREFIX):
        return f"Kustomization {root[len(ROOT_PREFIX) :]}"
    for prefix, kind in ((ARGO_PREFIX, "Application"), (APPSET_PREFIX, "ApplicationSet")):
        if root.startswith(prefix):
            return f"{kind} {root[len(prefix) :]}"
    return root or "manifests"


def build_plan_tree(result: CheckResult) -> PlanTree:
    """The plan of `result` as a tree: every change, every object a finding names (exempted and
    standing ones too), and under --live the guarded objects a deleted namespace takes along."""
    findings = _findings_by_ref(result)
    entries: dict[ObjectRef, PlanEntry] = {}
    roots: dict[ObjectRef, str] = {}
    for change in result.changes:
        if change.action is Action.UPDATE and change.ref not in findings:
            continue  # an update that breaks nothing is not the plan's business
        entries[change.ref] = _entry_of_change(change, findings.get(change.ref, []), result)
        roots[change.ref] = _root_of(change.ref, result)
    for ref, found in findings.items():
        if ref not in entries:
            entries[ref] = _entry_of_findings(ref, found, result)
            roots[ref] = _root_of(ref, result)
    for ref, root in _cascaded(entries, result.live):
        entries[ref] = _cascade_entry(ref, findings.get(ref, []))
        roots[ref] = root
    return PlanTree(
        roots=_group(entries, roots),
        deletes=sum(1 for e in entries.values() if e.action == Action.DELETE.value),
        replaces=sum(1 for e in entries.values() if e.action == Action.REPLACE.value),
        orphans=sum(1 for e in entries.values() if e.action == ORPHAN),
        updates=sum(1 for e in entries.values() if e.action == Action.UPDATE.value),
        cascades=sum(1 for e in entries.values() if e.action == CASCADE),
    )


@dataclass(frozen=True, slots=True)
class _Found:
    finding: Finding
    how: str  # the finding's severity, or "exempt"


def _findings_by_ref(result: CheckResult) -> dict[ObjectRef, list[_Found]]:
    """The decision's findings per object: weighed, exempted and standing alike."""
    out: dict[ObjectRef, list[_Found]] = {}
    decision = result.decision
    for f in (*decision.findings, *decision.standing):
        out.setdefault(f.ref, []).append(_Found(f, f.severity.value))
    for ex in decision.exempted:
        out.setdefault(ex.finding.ref, []).append(_Found(ex.finding, "exempt"))
    return out


def _verdict(found: Iterable[_Found]) -> str:
    hows = {x.how for x in found}
    return next((v for v in ENTRY_VERDICTS if v in hows), "allow")


def _codes(found: Iterable[_Found]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x.finding.code.value for x in found))


def _action(change: Change, found: list[_Found]) -> str:
    """What the deploy does: a deletion its deployer will not carry out (a Kustomization that
    does not prune, a keep mark on the object) leaves the object orphaned."""
    kept = any(x.finding.code is Code.ORPHANED_BY_KEEP for x in found)
    if change.action is Action.DELETE and (change.orphaned or kept):
        return ORPHAN
    return change.action.value


def _entry_of_change(change: Change, found: list[_Found], result: CheckResult) -> PlanEntry:
    m = change.base or change.head
    head_source = change.head.source if change.head is not None else None
    if change.action is Action.DELETE:
        head_source = _head_source(found)
    cause = change.orphaned or change.cause
    if change.force and change.force not in cause:
        cause = f"{cause}: {change.force}"
    if change.immutable:
        cause = f"{cause}: {', '.join(change.immutable)}"
    return PlanEntry(
        ref=change.ref,
        api_version=m.api_version if m is not None else "",
        action=_action(change, found),
        verdict=_verdict(found),
        codes=_codes(found),
        source=m.source if m is not None else _source(found),
        head_source=head_source,
        cause=cause,
        details=tuple(_details(change.ref, result)),
        guarded=_guarded(change.ref, result),
    )


def _entry_of_findings(ref: ObjectRef, found: list[_Found], result: CheckResult) -> PlanEntry:
    """An object no change names (a live object a cascade reaches, a setting of the policy)."""
    m = result.head.get(ref) or result.base.get(ref)
    return PlanEntry(
        ref=ref,
        api_version=m.api_version if m is not None else found[0].finding.api_version,
        action="",
        verdict=_verdict(found),
        codes=_codes(found),
        source=_source(found),
        head_source=_head_source(found),
        cause="",
        details=tuple(_details(ref, result)),
        guarded=_guarded(ref, result),
    )


def _cascade_entry(ref: ObjectRef, found: list[_Found]) -> PlanEntry:
    return PlanEntry(
        ref=ref,
        api_version="",
        action=CASCADE,
        verdict=_verdict(found),
        codes=_codes(found),
        source=None,
        head_source=None,
        cause=f"live only: deleted with Namespace {ref.namespace}",
        details=(),
        guarded=True,
    )


def _source(found: list[_Found]) -> Source | None:
    return next((x.finding.source for x in found if x.finding.source is not None), None)


def _head_source(found: list[_Found]) -> Source | None:
    return next((x.finding.head_source for x in found if x.finding.head_source), None)


def _cascaded(
    entries: Mapping[ObjectRef, PlanEntry], live: LiveView | None
) -> Iterator[tuple[ObjectRef, str]]:
    """Guarded live objects in a namespace the deploy deletes that no manifest declares (claims a
    StatefulSet's templates made): the namespace's deletion takes them along."""
    if live is None:
        return
    for ref, entry in list(entries.items()):
        if ref.kind != "Namespace" or ref.group or entry.action != Action.DELETE.value:
            continue
        for member in live.guarded_in_namespace(ref.name):
            if member not in entries:
                yield member, ""


def _details(ref: ObjectRef, result: CheckResult) -> Iterator[str]:
    """What makes an object matter: for a claim, the workloads that mount it (each side), the
    volume behind it and, under --live, the pods pvc-protection counts and their nodes."""
    if ref.group or ref.kind != "PersistentVolumeClaim":
        return
    before = [m.ref for m in _mounting(ref, result.base)]
    after = [m.ref for m in _mounting(ref, result.head)]
    for workload in before:
        fate = "still mounts it" if workload in after else _fate(workload, result)
        yield f"mounted by {workload.kind} {workload.name} ({fate})"
    for workload in after:
        if workload not in before:
            yield f"mounted by {workload.kind} {workload.name} (new in the candidate)"
    live = result.live
    if live is None:
        return
    for use in live.claim_users(ref.namespace, ref.name):
        yield f"used by {use.describe()}"
    volume = live.bound_volume(ref.namespace, ref.name)
    if volume is not None:
        fate = "deleted with the claim" if volume.reclaim_policy == "Delete" else "kept"
        yield f"volume {volume.name}, reclaimPolicy {volume.reclaim_policy}: {fate}"


def _fate(ref: ObjectRef, result: CheckResult) -> str:
    if result.head.get(ref) is None:
        return "deleted too"
    return "no longer mounts it"


def _mounting(claim: ObjectRef, side: Inventory) -> Iterator[Manifest]:
    """The workloads of one side whose pod template mounts `claim` by name."""
    for m in side.in_namespace(claim.namespace):
        spec = pod_spec_of(m.ref.group, m.ref.kind, m.body)
        if spec is not None and claim.name in claim_names(spec):
            yield m


def _guarded(ref: ObjectRef, result: CheckResult) -> bool:
    """Whether the policy guards the object's kind (the default policy when none is known)."""
    policy = result.policy if result.policy is not None else Policy()
    return policy.is_guarded_kind(ref.group, ref.kind)


def _root_of(ref: ObjectRef, result: CheckResult) -> str:
    m = result.base.get(ref) or result.head.get(ref)
    return m.root if m is not None else ""


def _group(
    entries: Mapping[ObjectRef, PlanEntry], roots: Mapping[ObjectRef, str]
) -> tuple[RootPlan, ...]:
    """Entries by root, then namespace; a namespace's entries follow its Namespace object's root
    when the object is deleted there (everything in it goes too), in a stable, readable order:
    roots and namespaces by name, objects guarded first, then by kind and name."""
    ns_root = {
        ref.name: roots[ref]
        for ref, e in entries.items()
        if ref.kind == "Namespace" and not ref.group and e.action
    }
    tree: dict[str, dict[str, list[PlanEntry]]] = {}
    for ref, entry in entries.items():
        if ref.kind == "Namespace" and not ref.group:
            tree.setdefault(ns_root.get(ref.name, roots[ref]), {}).setdefault(ref.name, [])
            continue
        root = ns_root.get(ref.namespace, roots[ref]) if ref.namespace else roots[ref]
        tree.setdefault(root, {}).setdefault(ref.namespace, []).append(entry)
    out: list[RootPlan] = []
    for root in sorted(tree):
        spaces = []
        for name in sorted(tree[root]):
            own = entries.get(ObjectRef("", "Namespace", "", name)) if name else None
            objects = tuple(sorted(tree[root][name], key=_order))
            spaces.append(NamespacePlan(name, own, objects))
        out.append(RootPlan(root, tuple(spaces)))
    return tuple(out)


def _order(entry: PlanEntry) -> tuple[int, int, str, str]:
    strength = ENTRY_VERDICTS.index(entry.verdict)
    return (0 if entry.guarded else 1, strength, entry.ref.kind, entry.ref.name)
