"""A guarded object that moves from one Flux Kustomization to another: the old one may prune it.

With `--flux-root`, an object that leaves Kustomization `apps` and appears in `db` is the same
object on both sides, so no deletion rule sees it. kustomize-controller does not see a move
either: each Kustomization reconciles on its own. What it does, read in fluxcd/kustomize-
controller (internal/controller/kustomization_controller.go) and fluxcd/pkg (ssa/manager_delete.go):

- `apps` reconciles the new revision, diffs its old `status.inventory` against what it applied
  (`inventory.Diff`) and, with `spec.prune: true`, hands the stale objects to `prune` ->
  `deleteObjects`, which calls `ssa.ResourceManager.DeleteAll` with `Inclusions` set to its own
  owner labels (`GetOwnerLabels`: `kustomize.toolkit.fluxcd.io/name` and `/namespace`) and
  `Exclusions` `kustomize.toolkit.fluxcd.io/prune: disabled` (also `reconcile: disabled`,
  `ssa: ignore`). `Delete` GETs the live object and skips it when its labels do not match the
  inclusions or its labels or annotations match an exclusion (`utils.AnyInMetadata`); otherwise
  it deletes it. A removed `apps`' finalizer goes through the same `deleteObjects`.
- `db` applying the object sets its owner labels to `db`'s: from then on `apps` skips it.

So the object survives only if `db` applies it before `apps` prunes. With `db` `dependsOn: apps`
(`checkDependencies`: `db` waits until `apps` is Ready at the source's revision) `apps` always goes
first: the object is deleted and `db` creates a new one (a claim comes back empty, with a new
uid). Without `dependsOn` it is a race. The safe way is two stages: mark the object
`kustomize.toolkit.fluxcd.io/prune: disabled` where `apps` applies it and let that deploy (Flux
reads the mark from the live object), then move it.

Whose word counts for the mark is stage 1's convention (`gate.engine.rules.world.retirement`):
the base revision's, and, with a live view that holds the object, the live object's too. A
live-only mark may have come from a speculative deploy of an evicted candidate; the next deploy of
base takes it off again. Only Flux roots are judged: plain `--path` roots are applied together by
one deployer, for which a move between paths is a move. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator

from gate.engine.deployers import FLUX, Event, flux
from gate.engine.flux import deletes_when_removed, parent_ref
from gate.engine.kustomizations import ROOT_PREFIX
from gate.engine.plan import Action, Change
from gate.engine.rules.common import finding
from gate.engine.rules.world import World, is_guarded
from gate.model.findings import Code, Finding, edit
from gate.model.objects import Manifest
from gate.model.refs import ObjectRef

#: The mark kustomize-controller's prune skips (an annotation or a label, value case-insensitive).


def _marked(annotations: dict[str, str], labels: dict[str, str]) -> bool:
    """`prune: disabled` as `utils.AnyInMetadata` matches it: in labels or annotations,
    compared case-insensitively (`gate.engine.deployers.flux`)."""
    return FLUX.keeps(annotations, labels, Event.PRUNE) is not None


def _prune_mark(m: Manifest, world: World) -> tuple[bool, str]:
    """Whether the old Kustomization's prune skips the object, and the evidence line."""
    base = _marked(m.annotations, m.labels)
    live_obj = world.live.get(m.ref) if world.live is not None else None
    live = live_obj is not None and _marked(live_obj.annotations, live_obj.labels)
    mark = f"`{flux.PRUNE}: disabled`"
    if not base:
        if live:
            return False, (
                f"{mark} is on the live object but not on the base revision: a speculative "
                "deploy may have applied it, and the next deploy of base takes it off"
            )
        also = " nor on the live object" if live_obj is not None else ""
        return False, f"no {mark} on the base revision{also}"
    if live_obj is not None and not live:
        return False, (
            f"{mark} is on the base revision but not on the live object: merged but not "
            "deployed yet (kustomize-controller reads it from the live object)"
        )
    where = "base revision and the live object" if live_obj is not None else "base revision"
    return True, f"{mark} on the {where}"


def _prunes(old: ObjectRef, world: World) -> tuple[bool, str]:
    """Whether the old Kustomization deletes what leaves it, and the evidence: removed, its
    finalizer (base's deletionPolicy and prune); kept, `spec.prune` in base or the candidate
    (the first reconcile of the new revision may run with either spec) or live."""
    before, now = world.base.get(old), world.head.get(old)
    if before is None:
        return True, f"{old.display()} is not declared in base: assumed to prune"
    if now is None:
        deletes = deletes_when_removed(before)
        policy = before.spec.get("deletionPolicy") or "MirrorPrune"
        prune = str(before.spec.get("prune") is True).lower()
        return deletes, (
            f"{old.display()} is removed (spec.prune: {prune}, spec.deletionPolicy: {policy}): "
            "its finalizer deletes what it applied"
            if deletes
            else f"{old.display()} is removed with nothing deleted (deletionPolicy {policy})"
        )
    where = [w for w, k in (("base", before), ("candidate", now)) if k.spec.get("prune") is True]
    live = world.live.get(old) if world.live is not None else None
    if live is not None and live.facts.get("prune") == "true":
        where.append("live")
    if where:
        return True, f"{old.display()}: spec.prune: true ({', '.join(where)})"
    return False, f"{old.display()}: spec.prune off"


def _depends_on(new: Manifest | None, old: ObjectRef) -> bool:
    """Whether the new Kustomization waits for the old one (`spec.dependsOn`; a dependency's
    namespace defaults to the dependent's)."""
    deps = new.spec.get("dependsOn") if new is not None else None
    for dep in deps if isinstance(deps, list) else ():
        if not isinstance(dep, dict):
            continue
        ns = str(dep.get("namespace") or (new.ref.namespace if new is not None else ""))
        if (ns, str(dep.get("name", ""))) == (old.namespace, old.name):
            return True
    return False


def check_flux_moves(world: World) -> Iterator[Finding]:
    """FLUX_MOVE_PRUNES: a guarded object the candidate moves out of a pruning Flux
    Kustomization (its root `flux:NS/NAME` changes), without `prune: disabled` deployed first."""
    if not any(r.startswith(ROOT_PREFIX) for r in world.base.roots()):
        return  # no Flux root: nothing prunes by inventory
    for m in world.base:
        head = world.head.get(m.ref)
        if head is None or (head.root == m.root and m.ref not in world.base.duplicates):
            continue  # removed (the deletion rules judge it), or one root that stays
        # Every Kustomization that stops applying it: an object two of them apply is pruned by
        # the one that lets it go when the live labels are that one's (the last to apply it).
        gone = world.base.roots_of(m.ref) - world.head.roots_of(m.ref)
        for root in sorted(r for r in gone if r.startswith(ROOT_PREFIX)):
            old = parent_ref(root)
            if old is None or (old.group, old.kind) != flux.KUSTOMIZATION.gk:
                continue
            change = Change(m.ref, Action.UPDATE, m, head, f"moves from {old.display()}")
            if not is_guarded(change, world):
                break
            prunes, prune_evidence = _prunes(old, world)
            if not prunes:
                continue
            safe, mark_evidence = _prune_mark(m, world)
            if safe:
                break
            yield _move_finding(change, old, m, head, world, [prune_evidence, mark_evidence])


def _move_finding(
    change: Change,
    old: ObjectRef,
    base: Manifest,
    head: Manifest,
    world: World,
    evidence: list[str],
) -> Finding:
    ref = change.ref
    added = sorted(world.head.roots_of(ref) - world.base.roots_of(ref))
    new_root = added[0] if added else head.root
    new = parent_ref(new_root)
    new_k = world.head.get(new) if new is not None else None
    to = new.display() if new is not None else f"root {new_root}"
    a, b = old.name, (new.name if new is not None else new_root)
    if _depends_on(new_k, old):
        order = f"{b} has dependsOn {a}, so {a} always reconciles first and deletes it"
    else:
        order = "the two reconcile in no set order: a race"
    live_obj = world.live.get(ref) if world.live is not None else None
    if live_obj is not None:
        owner = live_obj.labels.get(flux.NAMESPACE, ""), live_obj.labels.get(flux.NAME, "")
        named = f"{owner[0]}/{owner[1]}" if all(owner) else "no Kustomization"
        evidence.append(f"the live object's {flux.NAME}/namespace labels name {named}")
    at_base = f" ({base.source})" if base.source else ""
    at_head = f" ({head.source})" if head.source else ""
    mark = f"{flux.PRUNE}: disabled"
    return finding(
        Code.FLUX_MOVE_PRUNES,
        change,
        f"{ref.display()} moves from {old.display()} to {to}: kustomize-controller's prune of "
        f"{a} deletes it unless {b} has applied it first, and {b} then creates it again, "
        f"empty; {order}",
        [
            f"base: {old.display()} applies it{at_base}; candidate: {to} applies it{at_head}",
            *evidence,
            f"{a} prunes a live object that still carries its labels {flux.NAME}: {old.name}, "
            f"{flux.NAMESPACE}: {old.namespace} and not `{mark}`",
        ],
        f"move it in two stages: 1) keep it where {old.display()} applies it{at_base}, "
        f"annotate it `{mark}` there, merge and let it deploy; 2) then move it to {to} (the "
        f"mark may go in the same change: {a} skips it while the live object carries it, and "
        f"once {b} has applied it, its labels name {b})",
        [
            edit(f"keep {ref.display()} where {old.display()} applies it", base.source),
            edit(f"stage 1: annotate it `{mark}`; merge and let it deploy", base.source),
            edit(f"stage 2: move it to {to}, in a later change", head.source),
        ],
    )
