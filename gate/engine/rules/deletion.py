"""Rules on deletions: what deleting (or force-replacing) an object does, one change at a time;
and MASS_PRUNE, which weighs the deletions of a root together.

Pure, one small function each (`gate.engine.rules.registry` says where each runs). Severity and
exemptions are applied afterwards, in `gate.engine.verdict`; a rule may only suggest one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gate.engine.context import Context
from gate.engine.deployers import live_keep_mark
from gate.engine.flux import root_removed
from gate.engine.plan import Action, Change
from gate.engine.rules.common import (
    at_source,
    consumer_findings,
    finding,
    retire_fix,
    source_of,
    with_data,
)
from gate.engine.rules.volumes import DataFate, data_fate, rebind_claim_json
from gate.engine.rules.world import (
    CLAIM,
    CRD,
    NAMESPACE,
    STATEFULSET,
    VOLUME,
    World,
    custom_resources,
    guarded_contents,
    is_guarded,
    keep_annotation,
    kind_of,
    retirement,
    when_deleted,
)
from gate.model.errors import UncountedError
from gate.model.findings import DOCS_SITE, Code, Finding, Runner, Severity, command, edit
from gate.model.liveview import retain_command
from gate.model.objects import Manifest
from gate.model.refs import ObjectRef


def check_orphaned_by_keep(change: Change, world: World) -> Iterator[Finding]:
    """ORPHANED_BY_KEEP: the tool will not delete it; it stays, unmanaged."""
    if change.action is not Action.DELETE:
        return
    if change.orphaned:
        yield finding(
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
        yield finding(
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
        keep = keep_annotation(change.base.annotations, change.event)
        if keep:
            return keep, "base manifest"
    live = world.live.get(change.ref) if world.live is not None else None
    if live is not None:
        found = live_keep_mark(live.annotations, event=change.event)
        return (None if found is None else str(found)), "live object"
    return None, ""


def check_not_retired(change: Change, world: World) -> Iterator[Finding]:
    """NOT_RETIRED: a guarded kind is deleted or replaced without stage 1 of retirement."""
    if not change.deletes or not world.policy.is_guarded_kind(*kind_of(change.ref)):
        return
    stage_1 = retirement(change, world)
    if stage_1.reason:
        return
    fate = data_fate(change, world) if change.action is Action.DELETE else None
    if fate is not None and fate.kept:
        yield _volume_retains_data(change, world, fate, stage_1.evidence)
        return
    verb = "force-replaced" if change.action is Action.REPLACE else "deleted"
    fix, actions = retire_fix(change.ref, world, source_of(change))
    if change.action is Action.REPLACE:
        fix = (
            f"revert the change to {', '.join(change.immutable)}; if the object must change, "
            "create its replacement under a new name and retire this one in two stages"
        )
        actions = [
            edit(f"revert {', '.join(change.immutable)} to what base declares", source_of(change)),
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
    yield finding(
        Code.NOT_RETIRED,
        change,
        f"{change.ref.display()} would be {verb} but was never retired",
        with_data(change, world, [f"cause: {change.cause}", stage_1.evidence]),
        fix,
        actions,
    )


def _volume_retains_data(change: Change, world: World, fate: DataFate, stage_1: str) -> Finding:
    """VOLUME_RETAINS_DATA: the claim goes but its Retain volume keeps the data, Released.

    What the owner has to know is that nothing brings it back by itself: a Released volume
    keeps the old claim's uid in its claimRef, so a claim re-created under the same name gets a
    new, empty volume. The fix is how to bind it again (KUBERNETES-FACTS, "Volumes")."""
    ref, pv = change.ref, fate.name
    unbind = command(
        f"kubectl patch pv {pv} -p "
        """'{"spec":{"claimRef":{"uid":null,"resourceVersion":null}}}'"""
    )
    body = rebind_claim_json(ref, fate, world)
    bind_to = f'spec.volumeName: {pv} and spec.storageClassName: "{fate.storage_class}"'
    by_hand = (
        f" (or by hand: echo '{body}' | kubectl create -f -)"
        if body is not None
        else " and the old claim's access modes and size"
    )
    # A claim is the repository's to declare: re-creating it is an edit, merged and deployed.
    rebind = edit(f"restore the manifest of {ref.display()} with {bind_to}; merge and deploy it")
    return finding(
        Code.VOLUME_RETAINS_DATA,
        change,
        f"{ref.display()} would be deleted without stage 1 of retirement, but its data stays: "
        f"PersistentVolume {pv} has persistentVolumeReclaimPolicy Retain and is left Released, "
        "data intact; no new claim binds it by itself",
        [f"cause: {change.cause}", stage_1, fate.evidence()],
        f"if the claim should go, nothing to do now: the data waits in PersistentVolume {pv}. "
        f"To use it again once the claim is gone: 1) {unbind.text} (drops the old claim's uid, "
        f"so the volume binds a claim of that name again); 2) restore the claim's manifest with "
        f"{bind_to}{by_hand}. To free the storage "
        f"instead: kubectl delete pv {pv}, then remove the data from its backend. To keep the "
        "claim, keep it in the candidate and retire it in two stages",
        [
            command(f"kubectl get pv {pv}"),
            unbind,
            rebind,
            edit(
                f"or: keep {ref.display()} in the candidate and retire it in two stages",
                source_of(change),
            ),
        ],
    )


def check_speculative_prune(change: Change, world: World) -> Iterator[Finding]:
    """SPECULATIVE_PRUNE: a candidate that may never merge would delete a guarded object."""
    if world.context is not Context.SPECULATIVE or not change.deletes:
        return
    if not is_guarded(change, world):
        return
    yield finding(
        Code.SPECULATIVE_PRUNE,
        change,
        f"this merge-queue candidate would delete {change.ref.display()}; a deletion cannot be "
        "undone if the candidate is evicted",
        with_data(change, world, _speculative_evidence(change, world)),
        f"let the deletion wait for the merge: deploy this candidate with {change.ref.display()} "
        f"kept exactly as in base{at_source(change)}, so that only the merged deploy deletes it, "
        "after these checks run again: run the same gate check with --defer-to DIR, which writes "
        "that candidate to DIR, and deploy DIR (or hold the webhook's speculation fence: "
        f"{DOCS_SITE}merge-queue/#passing-stage-2-through-the-merge-queue)",
        [
            edit(
                "in the merge queue's workflow, add --defer-to DIR to this gate check and "
                f"deploy DIR instead of the candidate: {change.ref.display()} is kept there "
                "exactly as base declares it, and the merged deploy deletes it",
                source_of(change),
            ),
        ],
    )


def _speculative_evidence(change: Change, world: World) -> list[str]:
    """Why the deletion waits for the merge, even where the data would outlive it: an evicted
    candidate leaves main declaring the claim, the next deploy re-creates it, and the new claim
    does not bind the Released volume (its claimRef keeps the old claim's uid)."""
    lines = [f"context: {world.context}", f"cause: {change.cause}"]
    fate = data_fate(change, world) if change.action is Action.DELETE else None
    if fate is not None and fate.kept:
        lines.append(
            f"if this candidate is evicted, main still declares the claim and the next deploy "
            f"re-creates it empty: a new claim does not bind the Released volume {fate.name}"
        )
    return lines


def check_consumer_remains(change: Change, world: World) -> Iterator[Finding]:
    """CONSUMER_REMAINS: a deleted claim is still referenced by a workload template."""
    if change.action is not Action.DELETE or kind_of(change.ref) != CLAIM:
        return
    yield from consumer_findings(change, world, "is removed")


def check_namespace_holds_claims(change: Change, world: World) -> Iterator[Finding]:
    """NAMESPACE_HOLDS_CLAIMS: deleting a namespace deletes the guarded objects inside."""
    if not change.deletes or kind_of(change.ref) != NAMESPACE:
        return
    contents = guarded_contents(change.ref.name, world)
    if not contents:
        return
    names = [r.display() for r in contents]
    yield finding(
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
    if not change.deletes or kind_of(change.ref) != STATEFULSET:
        return
    if when_deleted(change, world) != "Delete":
        return
    yield finding(
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
                source_of(change),
            ),
            edit("then remove the StatefulSet; retire its claims separately (two stages)"),
        ],
    )


def check_crd_holds_resources(change: Change, world: World) -> Iterator[Finding]:
    """CRD_HOLDS_RESOURCES: deleting a CRD deletes every custom resource of its kind."""
    if not change.deletes or kind_of(change.ref) != CRD:
        return
    try:
        declared, count = custom_resources(change, world)
    except UncountedError as exc:
        yield finding(
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
    yield finding(
        Code.CRD_HOLDS_RESOURCES,
        change,
        f"CustomResourceDefinition {change.ref.name} is deleted while {count} custom resource(s) "
        "of its kind exist; they are deleted with it",
        [f"{r.display()} exists" for r in declared[:20]] or [f"{count} live custom resource(s)"],
        "remove (or migrate) the custom resources first, then the CustomResourceDefinition; to "
        f"keep it, restore the manifest{at_source(change)}",
        [
            command(f"kubectl get {change.ref.name} -A"),
            edit("remove (or migrate) those custom resources first"),
            edit("then remove the CustomResourceDefinition"),
        ],
    )


def check_pv_bound(change: Change, world: World) -> Iterator[Finding]:
    """PV_BOUND: a removed PersistentVolume is bound to a claim that stays."""
    if not change.deletes or kind_of(change.ref) != VOLUME or change.base is None:
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
    yield finding(
        Code.PV_BOUND,
        change,
        f"PersistentVolume {change.ref.name} is removed but is bound to claim {ns}/{name}, "
        "which stays",
        [f"spec.claimRef: {ns}/{name}", f"{claim.display()} is still declared or live"],
        f"retire the claim {ns}/{name} first, or keep the volume{at_source(change)}",
        [
            edit(
                f"retire claim {ns}/{name} first (two stages), or keep the volume",
                source_of(change),
            )
        ],
    )


def check_immutable_change(change: Change, world: World) -> Iterator[Finding]:
    """IMMUTABLE_FIELD_CHANGE / FORCED_REPLACEMENT: the apply fails, or deletes and recreates."""
    if change.action is Action.UPDATE and change.immutable:
        fix = (
            "revert the change to these fields; to really change them, create a new object "
            "under a new name and retire the old one in two stages"
        )
        actions = [
            edit(f"revert {', '.join(change.immutable)} to what base declares", source_of(change))
        ]
        if kind_of(change.ref) == STATEFULSET:
            orphan = f"kubectl delete {change.ref.kubectl()} --cascade=orphan"
            fix += (
                "; or, for a StatefulSet, replace only the object and keep its pods and claims: "
                f"{orphan}, then let the deploy "
                "recreate it (resize existing claims by hand: the template does not touch them)"
            )
            actions.append(command(orphan))
        yield finding(
            Code.IMMUTABLE_FIELD_CHANGE,
            change,
            f"{change.ref.display()} changes immutable field(s) {', '.join(change.immutable)}: the "
            "API server will reject the apply and every later deploy fails the same way",
            [f"{path} differs between base and candidate" for path in change.immutable],
            fix,
            actions,
        )
    elif change.action is Action.REPLACE:
        yield finding(
            Code.FORCED_REPLACEMENT,
            change,
            f"{change.ref.display()} would be deleted and recreated ({change.force}) because "
            f"immutable field(s) change: {', '.join(change.immutable)}",
            with_data(
                change,
                world,
                [f"{path} differs between base and candidate" for path in change.immutable]
                + [f"force: {change.force}"],
            ),
            "revert the immutable change, or create a new object under a new name and retire the "
            "old one in two stages; do not rely on force for objects that hold data",
            [
                edit(
                    f"revert {', '.join(change.immutable)} to what base declares", source_of(change)
                ),
                edit("or: create the new object under a new name and retire this one"),
            ],
        )


def check_claim_mounted(change: Change, world: World) -> Iterator[Finding]:
    """CLAIM_MOUNTED: a pod pvc-protection counts as a user holds the claim: it would stick."""
    if not change.deletes or kind_of(change.ref) != CLAIM or world.live is None:
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
        fix, actions = retire_fix(change.ref, world, source_of(change))
        if finished and len(finished) == len(users):
            delete_pods = command(
                f"kubectl delete pod -n {ns} {' '.join(u.name for u in finished)}"
            )
            fix = f"only finished pods hold it: delete them first ({delete_pods.text}), or {fix}"
            actions = [delete_pods, *actions]
    yield finding(
        Code.CLAIM_MOUNTED,
        change,
        f"claim {change.ref.namespace}/{change.ref.name} is mounted by pod {first.name} on node "
        f"{first.node}"
        + (f" and {len(users) - 1} more pod(s)" if len(users) > 1 else "")
        + ": the deletion would stick Terminating behind kubernetes.io/pvc-protection",
        with_data(change, world, [u.describe() for u in users[:20]]),
        fix,
        actions,
    )


def check_reclaim_delete(change: Change, world: World) -> Iterator[Finding]:
    """RECLAIM_DELETE_LOSES_DATA: reclaimPolicy Delete and no ready snapshot of the claim."""
    if not change.deletes or kind_of(change.ref) != CLAIM or world.live is None:
        return
    ns, name = change.ref.namespace, change.ref.name
    volume = world.live.bound_volume(ns, name)
    if volume is None or volume.reclaim_policy != "Delete":
        return
    if world.live.ready_snapshots(ns, name):
        return
    retired = retirement(change, world).reason
    retain = command(retain_command(volume.name))
    yield finding(
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
