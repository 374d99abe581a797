"""The rules: one small function each, from a change and the world to findings.

Pure. A rule reads the `World` (base and candidate inventories, an optional live view, the context
and the policy) and returns findings with evidence and a remediation; severity and exemptions are
applied afterwards, in `gate.engine.verdict`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

from gate.engine.context import Context
from gate.engine.flux import root_removed
from gate.engine.kustomizations import (
    FLUX_FORCE,
    FLUX_GROUP,
    force_disabled,
    forcing_kustomization,
    kustomization_forces,
)
from gate.engine.plan import Action, Change
from gate.engine.policy import Policy
from gate.engine.updates import change_findings
from gate.model.errors import UncountedError
from gate.model.findings import Code, Finding, FixAction, Runner, Severity, command, edit
from gate.model.liveview import LiveView
from gate.model.objects import Inventory, Manifest, Source
from gate.model.refs import ObjectRef
from gate.model.webhooks import GUARD_WEBHOOKS
from gate.model.workloads import (
    POD_SPEC_PATHS,
    claim_names,
    pod_spec_of,
    statefulset_claim_matches,
)

CLAIM = ("", "PersistentVolumeClaim")
VOLUME = ("", "PersistentVolume")
NAMESPACE = ("", "Namespace")
STATEFULSET = ("apps", "StatefulSet")
CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")

#: Annotations that make a GitOps tool leave an object in the cluster when it leaves git.
KEEP_ANNOTATIONS: dict[str, Callable[[str], bool]] = {
    "kustomize.toolkit.fluxcd.io/prune": lambda v: v.lower() == "disabled",
    "argocd.argoproj.io/sync-options": lambda v: "Prune=false" in [p.strip() for p in v.split(",")],
    "helm.sh/resource-policy": lambda v: v == "keep",
    "kapp.k14s.io/delete-strategy": lambda v: v == "orphan",
}


@dataclass(frozen=True)
class World:
    """Everything a rule may look at. No I/O happens behind it; frozen, so a rule cannot change
    what the next rule sees (`run_rules` works on a copy that knows what the changes delete)."""

    base: Inventory
    head: Inventory
    context: Context
    policy: Policy = field(default_factory=Policy)
    live: LiveView | None = None
    #: Objects this deploy deletes (set by `run_rules` on its copy): a consumer that goes is no
    #: consumer.
    deleting: frozenset[ObjectRef] = frozenset()

    @cached_property
    def _template_users(self) -> dict[tuple[str, str], list[Manifest]]:
        return _index_template_users(self.head)

    @cached_property
    def deleting_by_name(self) -> dict[tuple[str, str, str], set[str]]:
        """(group, kind, name) -> namespaces of the objects this deploy deletes: an owner is
        matched against them per dependent, and a mass prune deletes thousands."""
        index: dict[tuple[str, str, str], set[str]] = {}
        for ref in self.deleting:
            index.setdefault((ref.group, ref.kind, ref.name), set()).add(ref.namespace)
        return index

    def template_users(self, namespace: str, claim: str) -> list[Manifest]:
        """Workloads in the candidate whose pod template mounts the claim (indexed once)."""
        users = list(self._template_users.get((namespace, claim), ()))
        base, _, ordinal = claim.rpartition("-")
        if base and ordinal.isdigit():
            users.extend(
                m
                for m in self._template_users.get((namespace, f"{_STS_PREFIX}{base}"), ())
                if statefulset_claim_matches(m.ref.name, m.body, claim)
            )
        return sorted(set(users), key=lambda m: m.ref)


def _kind(ref: ObjectRef) -> tuple[str, str]:
    return (ref.group, ref.kind)


def _finding(
    code: Code,
    change: Change,
    message: str,
    evidence: Iterable[str],
    fix: str,
    actions: Iterable[FixAction],
    suggested: Severity | None = None,
) -> Finding:
    m = change.base or change.head
    return Finding(
        code=code,
        ref=change.ref,
        message=message,
        evidence=tuple(evidence),
        remediation=fix,
        api_version=m.api_version if m else "",
        source=_source(change),
        suggested=suggested,
        actions=tuple(actions),
    )


def _source(change: Change) -> Source | None:
    if change.base is not None and change.base.source is not None:
        return change.base.source
    return change.head.source if change.head is not None else None


def keep_annotation(annotations: dict[str, str]) -> str | None:
    """The keep annotation (`key: value`) that makes a tool orphan the object, if any."""
    for key, is_keep in KEEP_ANNOTATIONS.items():
        value = annotations.get(key)
        if isinstance(value, str) and is_keep(value):
            return f"{key}: {value}"
    return None


@dataclass(frozen=True)
class Retirement:
    """Whether stage 1 of retirement counts for an object, and the evidence line that says why."""

    #: The retire reason when stage 1 counts, else None.
    reason: str | None
    evidence: str


def _mark(annotations: dict[str, str] | None, key: str) -> str:
    value = (annotations or {}).get(key)
    return value.strip() if isinstance(value, str) else ""


def retirement(change: Change, world: World) -> Retirement:
    """Stage 1 counts only when the base branch (the merged revision) carries the retire mark
    and, with a live view that has the object, the live object carries it too.

    Base alone is a mark merged but not deployed yet; live alone is a mark that no merged
    revision made, which a speculative (unmerged) deploy may have applied: a candidate that is
    evicted must not leave behind a mark that lets the next deploy delete the object.
    """
    key = world.policy.retire_annotation
    base = _mark(change.base.annotations, key) if change.base is not None else ""
    live_obj = world.live.get(change.ref) if world.live is not None else None
    live = _mark(live_obj.annotations, key) if live_obj is not None else ""
    if world.context is Context.ADMISSION:  # base is the request's oldObject: the live object
        found = base or live
        if found:
            return Retirement(found, f'`{key}: "{found}"` on the live object')
        return Retirement(None, f"no `{key}` annotation on the live object")
    if not base:
        if live:
            return Retirement(
                None,
                f'`{key}: "{live}"` is marked live but not on the base branch: a speculative '
                "deploy may have applied it",
            )
        where = "base revision" if change.base is not None else "base revision (not declared)"
        also = " nor on the live object" if live_obj is not None else ""
        return Retirement(None, f"no `{key}` annotation on the {where}{also}")
    if live_obj is not None and not live:
        return Retirement(
            None,
            f"`{key}` is on the base branch but not on the live object: stage 1 is merged but "
            "not deployed yet",
        )
    where = "base revision and the live object" if live_obj is not None else "base revision"
    return Retirement(base, f'`{key}: "{base}"` on the {where}')


def _guarded_contents(namespace: str, world: World) -> list[ObjectRef]:
    refs = {
        m.ref
        for m in world.base.in_namespace(namespace)
        if world.policy.is_guarded_kind(*_kind(m.ref))
    }
    if world.live is not None:
        refs.update(world.live.guarded_in_namespace(namespace))
    return sorted(refs)


def _when_deleted(change: Change, world: World) -> str:
    if world.live is not None:
        live = world.live.get(change.ref)
        if live is not None and "whenDeleted" in live.facts:
            return live.facts["whenDeleted"]
    m = change.base or change.head
    policy = (m.spec.get("persistentVolumeClaimRetentionPolicy") or {}) if m else {}
    return str(policy.get("whenDeleted", "Retain"))


def _custom_resources(change: Change, world: World) -> tuple[list[ObjectRef], int]:
    m = change.base or change.head
    spec = m.spec if m else {}
    group = spec.get("group")
    kind = (spec.get("names") or {}).get("kind")
    live = world.live.get(change.ref) if m is None and world.live is not None else None
    if live is not None:  # pruned from the cluster, never declared in base
        group, kind = live.facts.get("group"), live.facts.get("kind")
    if not isinstance(group, str) or not isinstance(kind, str):
        return [], 0
    # What remains after the change: the resources the candidate still declares, and live ones
    # this deploy does not delete. Those it deletes with the CRD are judged by their own change.
    remaining = sorted(o.ref for o in world.head.of_kind(group, kind))
    count = len(remaining)
    if world.live is not None:
        live_count = world.live.custom_resource_count(group, kind)
        if live_count is not None:
            going = sum(1 for r in world.deleting if (r.group, r.kind) == (group, kind))
            count = max(count, live_count - going)
    return remaining, count


def is_guarded(change: Change, world: World) -> bool:
    """A guarded object: a guarded kind, or a namespace/StatefulSet/CRD that takes data with it."""
    kind = _kind(change.ref)
    if world.policy.is_guarded_kind(*kind):
        return True
    if kind == NAMESPACE:
        return bool(_guarded_contents(change.ref.name, world))
    if kind == STATEFULSET:
        return _when_deleted(change, world) == "Delete"
    if kind == CRD:
        return _custom_resources(change, world)[1] > 0
    return False


def _retire_fix(ref: ObjectRef, world: World, source: Source | None) -> tuple[str, list[FixAction]]:
    """How to retire `ref`, in the words of the door: a candidate is told to keep the object
    and retire it through two merges; at the API server there is no candidate, so the person
    (or the deployer's owner) is told to mark the live object and delete again."""
    key = world.policy.retire_annotation
    mark = f'kubectl annotate {ref.kubectl()} {key}="<reason>"'
    if world.context is Context.ADMISSION:
        return (
            f"retire it first: mark it ({mark}, or merge the mark into its manifest where a "
            "deployer manages it) and stop what mounts it, then delete it again; to keep it "
            "instead, restore its manifest in the repository",
            [command(mark), edit(f'annotate {ref.display()} `{key}: "<reason>"` in its manifest')],
        )
    where = f" (base declares it at {source})" if source else ""
    return (
        f"keep it in the candidate{where} and retire {ref.display()} in two stages: "
        f'1) merge a change that annotates it `{key}: "<reason>"` and removes its consumers, '
        f"and let it deploy; 2) then remove the manifest",
        [
            edit(f"keep {ref.display()} in the candidate as base declares it", source),
            edit(
                f'stage 1: annotate it `{key}: "<reason>"` and remove its consumers; merge and '
                "let it deploy",
                source,
            ),
            edit("stage 2: remove its manifest, in a later change", source),
        ],
    )


# --- rules on deletions -----------------------------------------------------------------------


def check_orphaned_by_keep(change: Change, world: World) -> Iterator[Finding]:
    """ORPHANED_BY_KEEP: the tool will not delete it; it stays, unmanaged."""
    if change.action is not Action.DELETE:
        return
    if change.orphaned:
        yield _finding(
            Code.ORPHANED_BY_KEEP,
            change,
            f"{change.ref.display()} leaves the manifests but {change.orphaned}: it stays in the "
            "cluster, unmanaged",
            [change.orphaned],
            f"if the object should go, delete it by hand after checking it: kubectl delete "
            f"{change.ref.kubectl()}; if it should stay, keep it in the manifests",
            [
                command(f"kubectl get {change.ref.kubectl()} -o yaml"),
                command(f"kubectl delete {change.ref.kubectl()}"),
            ],
        )
        return
    keep, where = _keep_of(change, world)
    if keep:
        yield _finding(
            Code.ORPHANED_BY_KEEP,
            change,
            f"{change.ref.display()} leaves the manifests but carries `{keep}`: it stays in the "
            "cluster, unmanaged",
            [f"the {where} carries `{keep}`", f"cause: {change.cause}"],
            f"if the object should go, delete it by hand after checking it: kubectl delete "
            f"{change.ref.kubectl()}; if it should stay, keep it in the manifests",
            [
                command(f"kubectl get {change.ref.kubectl()} -o yaml"),
                command(f"kubectl delete {change.ref.kubectl()}"),
            ],
        )


def _keep_of(change: Change, world: World) -> tuple[str | None, str]:
    """The keep annotation on the base manifest, or on the live object when base lacks it."""
    if change.base is not None:
        keep = keep_annotation(change.base.annotations)
        if keep:
            return keep, "base manifest"
    live = world.live.get(change.ref) if world.live is not None else None
    if live is not None:
        return keep_annotation(live.annotations), "live object"
    return None, ""


def check_not_retired(change: Change, world: World) -> Iterator[Finding]:
    """NOT_RETIRED: a guarded kind is deleted or replaced without stage 1 of retirement."""
    if not change.deletes or not world.policy.is_guarded_kind(*_kind(change.ref)):
        return
    stage_1 = retirement(change, world)
    if stage_1.reason:
        return
    verb = "force-replaced" if change.action is Action.REPLACE else "deleted"
    fix, actions = _retire_fix(change.ref, world, _source(change))
    if change.action is Action.REPLACE:
        fix = (
            f"revert the change to {', '.join(change.immutable)}; if the object must change, "
            "create its replacement under a new name and retire this one in two stages"
        )
        actions = [
            edit(f"revert {', '.join(change.immutable)} to what base declares", _source(change)),
            edit("or: create the replacement under a new name and retire this one in two stages"),
        ]
    elif change.base is None and change.head is None and world.context is not Context.ADMISSION:
        dump = f"kubectl get {change.ref.kubectl()} -o yaml"
        fix = (
            "no manifest declares it, so the deployer will prune it: add its manifest to the "
            f"candidate (start from {dump}), then "
            + fix.removeprefix("keep it in the candidate and ")
        )
        actions = [
            command(dump),
            edit(f"add the manifest of {change.ref.display()} to the candidate"),
            *actions[1:],
        ]
    yield _finding(
        Code.NOT_RETIRED,
        change,
        f"{change.ref.display()} would be {verb} but was never retired",
        [f"cause: {change.cause}", stage_1.evidence],
        fix,
        actions,
    )


def check_speculative_prune(change: Change, world: World) -> Iterator[Finding]:
    """SPECULATIVE_PRUNE: a candidate that may never merge would delete a guarded object."""
    if world.context is not Context.SPECULATIVE or not change.deletes:
        return
    if not is_guarded(change, world):
        return
    yield _finding(
        Code.SPECULATIVE_PRUNE,
        change,
        f"this merge-queue candidate would delete {change.ref.display()}; a deletion cannot be "
        "undone if the candidate is evicted",
        [f"context: {world.context}", f"cause: {change.cause}"],
        f"let the deletion wait for the merge: deploy this candidate with {change.ref.display()} "
        f"kept exactly as in base{_at(change)}, so that only the merged deploy deletes it, after "
        "these checks run again: run the same gate check with --defer-to DIR, which writes that "
        "candidate to DIR, and deploy DIR (or hold the webhook's speculation fence: see "
        "'Passing stage 2 through the merge queue' in the README)",
        [
            edit(
                "in the merge queue's workflow, add --defer-to DIR to this gate check and "
                f"deploy DIR instead of the candidate: {change.ref.display()} is kept there "
                "exactly as base declares it, and the merged deploy deletes it",
                _source(change),
            ),
        ],
    )


def check_consumer_remains(change: Change, world: World) -> Iterator[Finding]:
    """CONSUMER_REMAINS: a deleted claim is still referenced by a workload template."""
    if change.action is not Action.DELETE or _kind(change.ref) != CLAIM:
        return
    yield from _consumers(change, world, "is removed")


def check_namespace_holds_claims(change: Change, world: World) -> Iterator[Finding]:
    """NAMESPACE_HOLDS_CLAIMS: deleting a namespace deletes the guarded objects inside."""
    if not change.deletes or _kind(change.ref) != NAMESPACE:
        return
    contents = _guarded_contents(change.ref.name, world)
    if not contents:
        return
    names = [r.display() for r in contents]
    yield _finding(
        Code.NAMESPACE_HOLDS_CLAIMS,
        change,
        f"Namespace {change.ref.name} is deleted while it holds {len(contents)} guarded "
        f"object(s): {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}",
        [f"{n} is in the namespace" for n in names[:20]],
        f"retire and remove the guarded objects in {change.ref.name} first (two stages each), "
        "then remove the namespace",
        [
            command(f"kubectl get pvc -n {change.ref.name}"),
            edit(f"retire and remove each guarded object in {change.ref.name} (two stages)"),
            edit(f"then remove Namespace {change.ref.name}"),
        ],
    )


def check_statefulset_deletes_claims(change: Change, world: World) -> Iterator[Finding]:
    """STATEFULSET_DELETES_CLAIMS: whenDeleted: Delete takes the claims with the StatefulSet."""
    if not change.deletes or _kind(change.ref) != STATEFULSET:
        return
    if _when_deleted(change, world) != "Delete":
        return
    yield _finding(
        Code.STATEFULSET_DELETES_CLAIMS,
        change,
        f"StatefulSet {change.ref.namespace}/{change.ref.name} has "
        "persistentVolumeClaimRetentionPolicy.whenDeleted: Delete: deleting it deletes its claims",
        ["spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Delete", f"cause: {change.cause}"],
        "first merge and deploy `whenDeleted: Retain` on the StatefulSet, then remove it; retire "
        "its claims separately if their data should go",
        [
            edit(
                "set spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Retain; merge and "
                "let it deploy",
                _source(change),
            ),
            edit("then remove the StatefulSet; retire its claims separately (two stages)"),
        ],
    )


def check_crd_holds_resources(change: Change, world: World) -> Iterator[Finding]:
    """CRD_HOLDS_RESOURCES: deleting a CRD deletes every custom resource of its kind."""
    if not change.deletes or _kind(change.ref) != CRD:
        return
    try:
        declared, count = _custom_resources(change, world)
    except UncountedError as exc:
        yield _finding(
            Code.RESOURCES_UNCOUNTED,
            change,
            f"CustomResourceDefinition {change.ref.name} is deleted but its custom resources "
            "cannot be counted; deleting it would delete any that exist",
            [str(exc)],
            "let prune-gate list this kind (the chart's rbac.countedResources), or repair the "
            "CustomResourceDefinition so its resources can be listed, then delete it again",
            [
                edit("add the kind to the chart's rbac.countedResources (helm upgrade)"),
                command(f"kubectl get {change.ref.name} -A"),
            ],
        )
        return
    if count == 0:
        return
    yield _finding(
        Code.CRD_HOLDS_RESOURCES,
        change,
        f"CustomResourceDefinition {change.ref.name} is deleted while {count} custom resource(s) "
        "of its kind exist; they are deleted with it",
        [f"{r.display()} exists" for r in declared[:20]] or [f"{count} live custom resource(s)"],
        "remove (or migrate) the custom resources first, then the CustomResourceDefinition; to "
        f"keep it, restore the manifest{_at(change)}",
        [
            command(f"kubectl get {change.ref.name} -A"),
            edit("remove (or migrate) those custom resources first"),
            edit("then remove the CustomResourceDefinition"),
        ],
    )


def check_pv_bound(change: Change, world: World) -> Iterator[Finding]:
    """PV_BOUND: a removed PersistentVolume is bound to a claim that stays."""
    if not change.deletes or _kind(change.ref) != VOLUME or change.base is None:
        return
    claim_ref = change.base.spec.get("claimRef") or {}
    name, ns = claim_ref.get("name"), claim_ref.get("namespace") or "default"
    if not isinstance(name, str):
        return
    claim = ObjectRef("", "PersistentVolumeClaim", str(ns), name)
    stays = claim in world.head or (
        world.live is not None and world.live.get(claim) is not None and claim not in world.base
    )
    if not stays:
        return
    yield _finding(
        Code.PV_BOUND,
        change,
        f"PersistentVolume {change.ref.name} is removed but is bound to claim {ns}/{name}, "
        "which stays",
        [f"spec.claimRef: {ns}/{name}", f"{claim.display()} is still declared or live"],
        f"retire the claim {ns}/{name} first, or keep the volume{_at(change)}",
        [edit(f"retire claim {ns}/{name} first (two stages), or keep the volume", _source(change))],
    )


def check_immutable_change(change: Change, world: World) -> Iterator[Finding]:
    """IMMUTABLE_FIELD_CHANGE / FORCED_REPLACEMENT: the apply fails, or deletes and recreates."""
    if change.action is Action.UPDATE and change.immutable:
        fix = (
            "revert the change to these fields; to really change them, create a new object "
            "under a new name and retire the old one in two stages"
        )
        actions = [
            edit(f"revert {', '.join(change.immutable)} to what base declares", _source(change))
        ]
        if _kind(change.ref) == STATEFULSET:
            orphan = f"kubectl delete {change.ref.kubectl()} --cascade=orphan"
            fix += (
                "; or, for a StatefulSet, replace only the object and keep its pods and claims: "
                f"{orphan}, then let the deploy "
                "recreate it (resize existing claims by hand: the template does not touch them)"
            )
            actions.append(command(orphan))
        yield _finding(
            Code.IMMUTABLE_FIELD_CHANGE,
            change,
            f"{change.ref.display()} changes immutable field(s) {', '.join(change.immutable)}: the "
            "API server will reject the apply and every later deploy fails the same way",
            [f"{path} differs between base and candidate" for path in change.immutable],
            fix,
            actions,
        )
    elif change.action is Action.REPLACE:
        yield _finding(
            Code.FORCED_REPLACEMENT,
            change,
            f"{change.ref.display()} would be deleted and recreated ({change.force}) because "
            f"immutable field(s) change: {', '.join(change.immutable)}",
            [f"{path} differs between base and candidate" for path in change.immutable]
            + [f"force: {change.force}"],
            "revert the immutable change, or create a new object under a new name and retire the "
            "old one in two stages; do not rely on force for objects that hold data",
            [
                edit(
                    f"revert {', '.join(change.immutable)} to what base declares", _source(change)
                ),
                edit("or: create the new object under a new name and retire this one"),
            ],
        )


def check_claim_mounted(change: Change, world: World) -> Iterator[Finding]:
    """CLAIM_MOUNTED: a pod pvc-protection counts as a user holds the claim: it would stick."""
    if not change.deletes or _kind(change.ref) != CLAIM or world.live is None:
        return
    users = world.live.claim_users(change.ref.namespace, change.ref.name)
    if not users:
        return
    first = users[0]
    finished = [u for u in users if u.phase in ("Succeeded", "Failed")]
    ns = change.ref.namespace
    names = " ".join(u.name for u in users[:20])
    delete_pods = command(f"kubectl delete pod -n {ns} {names}")
    if world.context is Context.ADMISSION:  # a person (or a deployer) at the API server
        fix = (
            "stop what mounts it first: remove the claim from the workloads that create these "
            f"pods, or scale them to zero, or delete the pods ({delete_pods.text}); then delete "
            "the claim again (deleted now, it would stay Terminating until they are gone)"
        )
        actions = [command(f"kubectl get pod -n {ns} {names} -o wide"), delete_pods]
    elif retirement(change, world).reason:  # stage 1 deployed: what is left is the pods
        fix = (
            "stage 1 is deployed, but these pods still use the claim: remove the claim from "
            "whatever creates them (see CONSUMER_REMAINS), wait for them to go, or delete them: "
            f"{delete_pods.text}; then remove the claim"
        )
        actions = [edit("remove the claim from the workloads that create these pods"), delete_pods]
    else:
        fix, actions = _retire_fix(change.ref, world, _source(change))
        if finished and len(finished) == len(users):
            delete_pods = command(
                f"kubectl delete pod -n {ns} {' '.join(u.name for u in finished)}"
            )
            fix = f"only finished pods hold it: delete them first ({delete_pods.text}), or {fix}"
            actions = [delete_pods, *actions]
    yield _finding(
        Code.CLAIM_MOUNTED,
        change,
        f"claim {change.ref.namespace}/{change.ref.name} is mounted by pod {first.name} on node "
        f"{first.node}"
        + (f" and {len(users) - 1} more pod(s)" if len(users) > 1 else "")
        + ": the deletion would stick Terminating behind kubernetes.io/pvc-protection",
        [u.describe() for u in users[:20]],
        fix,
        actions,
    )


def check_reclaim_delete(change: Change, world: World) -> Iterator[Finding]:
    """RECLAIM_DELETE_LOSES_DATA: reclaimPolicy Delete and no ready snapshot of the claim."""
    if not change.deletes or _kind(change.ref) != CLAIM or world.live is None:
        return
    ns, name = change.ref.namespace, change.ref.name
    volume = world.live.bound_volume(ns, name)
    if volume is None or volume.reclaim_policy != "Delete":
        return
    if world.live.ready_snapshots(ns, name):
        return
    retired = retirement(change, world).reason
    retain = command(
        f"kubectl patch pv {volume.name} -p "
        '\'{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}\''
    )
    yield _finding(
        Code.RECLAIM_DELETE_LOSES_DATA,
        change,
        f"claim {ns}/{name} is bound to PersistentVolume {volume.name} with reclaimPolicy "
        "Delete and no ready VolumeSnapshot: its data is destroyed with the claim",
        [
            f"PersistentVolume {volume.name}: persistentVolumeReclaimPolicy: Delete",
            f"no VolumeSnapshot of {ns}/{name} with readyToUse: true",
        ],
        f"keep the data: {retain.text}, or take a "
        f"VolumeSnapshot of {ns}/{name} and wait for readyToUse before removing the claim",
        [retain, edit(f"or: snapshot {ns}/{name} and wait for readyToUse before removing it")],
        suggested=Severity.WARN if retired else None,
    )


def _at(change: Change) -> str:
    src = _source(change)
    return f" ({src})" if src else ""


def _consumers(change: Change, world: World, what: str) -> Iterator[Finding]:
    ref = change.ref
    users: list[str] = []
    steps: list[FixAction] = []
    for m in world.template_users(ref.namespace, ref.name):
        where = f" ({m.source})" if m.source else ""
        users.append(f"{m.ref.display()}{where} mounts claim {ref.name} in its pod template")
        steps.append(edit(f"remove claim {ref.name} from {m.ref.display()}", m.source))
    if world.live is not None:
        for consumer in world.live.claim_consumers(ref.namespace, ref.name):
            if consumer in world.head or consumer in world.deleting:
                continue  # reported from the candidate already, or deleted by this deploy
            users.append(f"live {consumer.display()} mounts claim {ref.name} in its pod template")
            steps.append(
                edit(f"remove claim {ref.name} from live {consumer.display()}, or retire it too")
            )
    if not users:
        return
    change_source = _source(change)
    yield _finding(
        Code.CONSUMER_REMAINS,
        change,
        f"claim {ref.namespace}/{ref.name} {what} but {len(users)} workload(s) still use it",
        users,
        f"remove claim {ref.name} from these workloads in the same change that retires the claim "
        "(stage 1), and remove the claim only after that has deployed",
        [*steps, edit(f"remove claim {ref.name} only after that has deployed", change_source)],
    )


def _index_template_users(head: Inventory) -> dict[tuple[str, str], list[Manifest]]:
    """(namespace, claim) -> workloads in the candidate whose pod template mounts it.

    StatefulSet claim templates are indexed by their claim prefix `tpl-sts` (claims `tpl-sts-N`).
    """
    index: dict[tuple[str, str], list[Manifest]] = {}
    # Only workloads have a pod template; users are sorted when asked, so kind order is fine.
    workloads = (w for kind in POD_SPEC_PATHS for w in head.of_kind(*kind))
    for m in workloads:
        spec = pod_spec_of(m.ref.group, m.ref.kind, m.body)
        names = set(claim_names(spec)) if spec is not None else set()
        if _kind(m.ref) == STATEFULSET:
            for tpl in m.spec.get("volumeClaimTemplates") or ():
                tpl_name = ((tpl or {}).get("metadata") or {}).get("name")
                if isinstance(tpl_name, str):
                    names.add(f"{_STS_PREFIX}{tpl_name}-{m.ref.name}")
        for name in names:
            index.setdefault((m.ref.namespace, name), []).append(m)
    return index


_STS_PREFIX = "\0sts:"


#: Rules that look at one change each, in report order.
CHANGE_RULES: tuple[Callable[[Change, World], Iterator[Finding]], ...] = (
    check_not_retired,
    check_speculative_prune,
    check_consumer_remains,
    check_immutable_change,
    check_namespace_holds_claims,
    check_statefulset_deletes_claims,
    check_crd_holds_resources,
    check_pv_bound,
    check_claim_mounted,
    check_reclaim_delete,
)


def check_retiring_consumers(world: World) -> Iterator[Finding]:
    """CONSUMER_REMAINS for stage 1: a claim marked for retirement must lose its consumers."""
    key = world.policy.retire_annotation
    for m in world.head.of_kind(*CLAIM):
        if m.annotations.get(key):
            change = Change(m.ref, Action.UPDATE, world.base.get(m.ref), m, "retiring")
            yield from _consumers(change, world, f"is marked `{key}`")


def check_already_terminating(changes: Iterable[Change], world: World) -> Iterator[Finding]:
    """ALREADY_TERMINATING: the candidate declares (or prunes) an object that is being deleted."""
    if world.live is None:
        return
    deleting = {c.ref: c for c in changes if c.deletes}
    terminating = {}
    pruned = (ref for ref in deleting if ref not in world.head)
    for ref in itertools.chain((m.ref for m in world.head), pruned):
        live = world.live.get(ref)
        if live is not None and live.deletion_timestamp:
            terminating[ref] = live
    for ref in sorted(terminating):  # the few being deleted, not every object, are sorted
        live = terminating[ref]
        head = world.head.get(ref)
        change = deleting.get(ref) or Change(
            ref, Action.UPDATE, world.base.get(ref), head, "declared by the candidate"
        )
        pending = ", ".join(live.finalizers) or "none"
        yield _finding(
            Code.ALREADY_TERMINATING,
            change,
            f"{ref.display()} is already being deleted (deletionTimestamp "
            f"{live.deletion_timestamp}): a deploy that declares it waits on it and fails",
            [f"deletionTimestamp: {live.deletion_timestamp}", f"finalizers: {pending}"],
            f"see what holds it (kubectl get {ref.kubectl()} -o yaml: finalizers, and for a "
            "claim the pods that still mount it); let the deletion finish before deploying "
            "this object again",
            [
                command(f"kubectl get {ref.kubectl()} -o yaml"),
                edit("deploy the object again only once its deletion has finished"),
            ],
        )


def check_candidate_updates(world: World) -> Iterator[Finding]:
    """OWNER_REFERENCE_ADDED, RETENTION_DELETES_CLAIMS, OVERRIDE_IN_MANIFEST: an object in base
    and candidate that the candidate changes so that a controller deletes it (or that carries
    the override from a manifest), judged as the webhook judges the UPDATE (`gate.engine.updates`).

    The deploy applies no DELETE here, so no deletion rule sees it: the garbage collector or the
    StatefulSet controller deletes the claims later, on the strength of this change. An object
    the candidate adds is judged as the webhook judges its CREATE (an owner or the override it
    already carries).
    """
    for head in world.head:
        base = world.base.get(head.ref)
        if base is not None and (base.body is head.body or base.body == head.body):
            continue
        cause = "changed by the candidate" if base is not None else "created by the candidate"
        guarded = world.policy.is_guarded_kind(head.ref.group, head.ref.kind)
        # Stage 1 matters only to an owner added to a guarded object: read it only then.
        stage_1 = (
            retirement(Change(head.ref, Action.UPDATE, base, head, cause), world)
            if guarded
            else Retirement(None, "")
        )
        for f in change_findings(
            head.ref,
            base.body if base is not None else {},
            head.body,
            world.policy,
            cause,
            guarded=guarded,
            created=base is None,
            retired=stage_1.reason is not None,
            unretired=stage_1.evidence,
        ):
            yield replace(f, source=head.source or (base.source if base is not None else None))


def run_rules(changes: Iterable[Change], world: World) -> list[Finding]:
    """Every finding the rules make for these changes, before policy is applied."""
    changes = list(changes)
    world = replace(
        world,
        deleting=frozenset(c.ref for c in changes if c.action is Action.DELETE and not c.orphaned),
    )
    findings: list[Finding] = []
    for change in changes:
        if change.action is Action.DELETE:
            orphaned = list(check_orphaned_by_keep(change, world))
            if orphaned:
                findings.extend(orphaned)  # the tool will not delete it: no deletion rules apply
                continue
        for rule in CHANGE_RULES:
            findings.extend(rule(change, world))
    from gate.engine.cascades import check_cascades  # cascades builds on this module's helpers

    findings.extend(check_cascades(changes, world))
    from gate.engine.moves import check_flux_moves  # moves builds on this module's helpers too

    findings.extend(check_flux_moves(world))
    findings.extend(check_retiring_consumers(world))
    findings.extend(check_candidate_updates(world))
    findings.extend(check_already_terminating(changes, world))
    findings.extend(check_guard_tampered(world))
    findings.extend(check_deployer_identities(world))
    findings.extend(check_mass_prune(world))
    findings.extend(check_void_force_disabled(world))
    return [_with_live_api_version(f, world) for f in findings]


def check_void_force_disabled(world: World) -> Iterator[Finding]:
    """FORCE_DISABLED_VOID: `force: disabled` on an object whose Kustomization forces.

    The annotation reads like a guard, and Flux ignores it under `spec.force: true` (fluxcd/pkg
    ssa): the next immutable change to the object deletes and recreates it. Said once per object
    in the candidate, whatever else changes, so it is fixed before it matters."""
    kustomizations = world.head.of_kind(FLUX_GROUP, "Kustomization")
    if not any(kustomization_forces(k) for k in kustomizations):
        return  # none forces: no object can be forced whatever it says (and most say nothing)
    for m in world.head:
        if not force_disabled(m):
            continue
        k = forcing_kustomization(m, world.head)
        if k is None:
            continue
        yield Finding(
            code=Code.FORCE_DISABLED_VOID,
            ref=m.ref,
            message=f"{m.ref.display()} carries {FLUX_FORCE}: disabled, which does nothing: "
            f"{k.ref.display()} has spec.force: true, so Flux still deletes and recreates it on an "
            "immutable change",
            evidence=(
                f"{k.ref.display()}: spec.force: true"
                + (f" ({k.source})" if k.source is not None else ""),
                f"{m.ref.display()}: {FLUX_FORCE}: disabled",
            ),
            remediation=f"turn force off on {k.ref.display()} (spec.force: false) and mark the "
            f"objects that need it with {FLUX_FORCE}: enabled, or move this object to a "
            "Kustomization without force",
            severity=Severity.WARN,
            suggested=Severity.WARN,
            api_version=m.api_version,
            source=m.source,
            actions=(
                edit(f"set spec.force: false on {k.ref.display()}", k.source),
                edit(f"annotate only the objects that must be replaced with {FLUX_FORCE}: enabled"),
            ),
        )


def check_mass_prune(world: World) -> Iterator[Finding]:
    """MASS_PRUNE: a root that loses all, or more than the policy's share, of its objects at once.

    That is the signature of a broken render or a wrong path, not of a change someone meant;
    judged one removal at a time it would pass wherever nothing guarded is among them. Counted
    against the whole candidate: an object that moves to another root is not lost."""
    lost_by_root: dict[str, list[Manifest]] = {}
    for ref in world.deleting:  # the few objects this deploy deletes, not every object in base
        gone = world.base.get(ref)
        if gone is not None:
            lost_by_root.setdefault(gone.root, []).append(gone)
    if not lost_by_root:
        return
    sizes = Counter(m.root for m in world.base)
    kept = world.head.roots()
    policy = world.policy
    for root in sorted(lost_by_root):
        if root_removed(root, world.base, world.head):
            continue  # a Kustomization removed on purpose: its objects go with it
        lost = sorted(lost_by_root[root], key=lambda m: m.ref)
        size = sizes[root]
        everything = (
            len(lost) == size and root not in kept and size >= policy.mass_prune_empty_min_objects
        )
        share = len(lost) / size
        if not everything and not (
            size >= policy.mass_prune_min_objects and share > policy.mass_prune_fraction
        ):
            continue
        where = f"root {root}" if root else "the input"
        how = (
            "every one of its objects"
            if everything
            else f"{len(lost)} of its {size} objects ({share:.0%})"
        )
        first = lost[0]
        yield Finding(
            code=Code.MASS_PRUNE,
            ref=first.ref,
            message=f"{where} loses {how} at once: a broken path or render looks like this, "
            "and the deployer would prune them all",
            evidence=(
                f"base: {size} object(s) in {where}; candidate: {size - len(lost)} of them remain",
                *(f"{m.ref.display()} is removed" for m in lost[:10]),
            ),
            remediation=f"check that {where} still builds what it should (the --path given, "
            "its kustomization, the renderer's output); if the removal is meant, make it in "
            "smaller changes, or exempt this one (exemptions with codes: [MASS_PRUNE])",
            api_version=first.api_version,
            source=first.source,
            actions=(
                command(f"kustomize build {root}", Runner.CI)
                if root and ":" not in root
                else edit(f"check what {where} builds to"),
                edit("if the removal is meant: make it in smaller changes, or exempt this one"),
            ),
        )


def _with_live_api_version(f: Finding, world: World) -> Finding:
    """Objects no manifest declares (pruned live) take their apiVersion from the live object."""
    if f.api_version or world.live is None:
        return f
    live = world.live.get(f.ref)
    return replace(f, api_version=live.api_version) if live and live.api_version else f


#: The labels of the chart's webhook Deployment.
GUARD_LABELS = {"app.kubernetes.io/part-of": "prune-gate"}
_VWC = ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")
_LEASE = ("coordination.k8s.io", "Lease")
_DEPLOYMENT = ("apps", "Deployment")
_GUARD_KINDS = (_VWC, _LEASE, _DEPLOYMENT)


def _is_guard(m: Manifest, world: World) -> bool:
    """prune-gate's own guards: its webhook configuration, the fence Lease, its Deployment."""
    key = _kind(m.ref)
    if key == _VWC:
        hooks = m.body.get("webhooks")
        return isinstance(hooks, list) and any(
            isinstance(h, dict) and h.get("name") in GUARD_WEBHOOKS for h in hooks
        )
    if key == _LEASE:
        return (m.ref.namespace, m.ref.name) == world.policy.webhook.fence
    if key == _DEPLOYMENT:
        return GUARD_LABELS.items() <= m.labels.items()
    return False


def _guards(side: Inventory, world: World) -> list[Manifest]:
    """The guards one side declares: only objects of the guards' kinds are looked at."""
    return [m for k in _GUARD_KINDS for m in side.of_kind(*k) if _is_guard(m, world)]


def check_guard_tampered(world: World) -> Iterator[Finding]:
    """GUARD_TAMPERED: the candidate deletes or rewrites prune-gate's own guards.

    A deploy that removes the webhook configuration, weakens it, takes the fence, or removes the
    webhook's Deployment or its namespace switches prune-gate off for every later prune. The
    webhook cannot refuse a change to its own configuration (the API server exempts it), so
    this is the door that must see it.
    """
    base_guards = _guards(world.base, world)
    guard_namespaces = {m.ref.namespace for m in base_guards if _kind(m.ref) == _DEPLOYMENT}
    for m in world.base.of_kind(*NAMESPACE):
        if m.ref.name in guard_namespaces and world.head.get(m.ref) is None:
            yield _guard_finding(
                Change(m.ref, Action.DELETE, m, None, "removed from the manifests"),
                "deletes the namespace of prune-gate's webhook",
            )
    for ref in sorted({m.ref for m in (*base_guards, *_guards(world.head, world))}):
        base, head = world.base.get(ref), world.head.get(ref)
        if head is None:
            yield _guard_finding(
                Change(ref, Action.DELETE, base, None, "removed from the manifests"), "deletes it"
            )
        elif base is None or base.body != head.body:
            what = "declares it" if base is None else "changes it"
            yield _guard_finding(
                Change(ref, Action.UPDATE, base, head, "changed by the candidate"), what
            )


#: The kinds whose `spec.serviceAccountName` names the identity their controller impersonates
#: to apply and prune (kustomize-controller, helm-controller, flux-operator's ResourceSet,
#: kapp-controller's App), and whose `spec.kubeConfig` (Flux) swaps in a Secret's credentials.
_IMPERSONATING = (
    (FLUX_GROUP, "Kustomization"),
    ("helm.toolkit.fluxcd.io", "HelmRelease"),
    ("fluxcd.controlplane.io", "ResourceSet"),
    ("kappctrl.k14s.io", "App"),
)


def _service_account(m: Manifest | None) -> str | None:
    name = m.spec.get("serviceAccountName") if m is not None else None
    return name if isinstance(name, str) and name else None


def check_deployer_identities(world: World) -> Iterator[Finding]:
    """GUARD_TAMPERED: the candidate has a Flux Kustomization or HelmRelease apply as a service
    account that `webhook.deployers` does not list.

    kustomize-controller and helm-controller impersonate `spec.serviceAccountName` to apply and
    prune (Flux multi-tenancy), and the webhook's guards (the fence, NOT_RETIRED for deployers,
    the marks a deployer may not write, the fence Lease itself) bind only the listed identities:
    a candidate that ships a ServiceAccount and points its Kustomization at it would prune and
    write past them. Only a new or changed name is judged (base's is merged), and only when the
    policy lists deployers at all."""
    deployers = set(world.policy.webhook.deployers)
    if not deployers:
        return
    for group, kind in _IMPERSONATING:
        for head in world.head.of_kind(group, kind):
            base = world.base.get(head.ref)
            kubeconfig = head.spec.get("kubeConfig")
            if kubeconfig is not None and kubeconfig != (base.spec if base else {}).get(
                "kubeConfig"
            ):
                yield _kubeconfig_finding(Change(head.ref, Action.UPDATE, base, head, "changed"))
            name = _service_account(head)
            if name is None or name == _service_account(base):
                continue
            user = f"system:serviceaccount:{head.ref.namespace}:{name}"
            if user in deployers:
                continue
            change = Change(head.ref, Action.UPDATE, base, head, "changed by the candidate")
            yield _finding(
                Code.GUARD_TAMPERED,
                change,
                f"{head.ref.display()} would apply and prune as {user} (spec.serviceAccountName: "
                f"{name}), which webhook.deployers does not list: the webhook's guards bind only "
                "the listed deployers, so its prunes and writes would pass them",
                [
                    f"serviceAccountName: {_service_account(base) or 'none'} -> {name}",
                    f"webhook.deployers: {', '.join(sorted(deployers))}",
                ],
                f"keep spec.serviceAccountName as base has it; to deploy as {user}, a person "
                "first adds it to webhook.deployers (the chart's values and prune-gate.yaml, a "
                "guard setting: see 'The speculation fence' in the README), then this change "
                "passes",
                [
                    edit(f"keep spec.serviceAccountName of {head.ref.display()} as base has it"),
                    edit(f"or: add {user} to webhook.deployers first, on its own"),
                ],
            )


def _kubeconfig_finding(change: Change) -> Finding:
    """GUARD_TAMPERED for a new or changed `spec.kubeConfig`: the controller applies and prunes
    with whatever identity the Secret's credentials are, which no policy can name."""
    return _finding(
        Code.GUARD_TAMPERED,
        change,
        f"{change.ref.display()} would apply and prune with the credentials of a kubeconfig "
        "Secret (spec.kubeConfig, new or changed by the candidate): an identity webhook.deployers "
        "cannot name, so the webhook's guards would not bind its prunes",
        ["spec.kubeConfig: new or changed by the candidate"],
        "keep spec.kubeConfig as base has it; a person changes it outside the merge queue, once "
        "the identity it carries is listed in webhook.deployers",
        [edit(f"keep spec.kubeConfig of {change.ref.display()} as base has it")],
    )


def _guard_finding(change: Change, what: str) -> Finding:
    return _finding(
        Code.GUARD_TAMPERED,
        change,
        f"{change.ref.display()} is one of prune-gate's own guards and the candidate {what}: "
        "a deploy may not switch off the guards that check its own prunes",
        [f"cause: {change.cause}"],
        "change prune-gate's webhook, fence or Deployment outside the guarded deploy (a "
        "person with `helm upgrade`), or exempt this object in prune-gate.yaml `exemptions` "
        "with a reason and an expiry",
        [
            edit(f"leave {change.ref.display()} out of this deploy; change it with helm upgrade"),
            edit("or: exempt it in prune-gate.yaml with a reason and an expiry"),
        ],
    )
