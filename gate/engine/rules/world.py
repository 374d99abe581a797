"""The `World` a rule looks at, and the questions every rule asks of it.

Pure. What is guarded (a guarded kind, or a Namespace, StatefulSet or CustomResourceDefinition
that takes data with it), whether stage 1 of retirement counts, which keep annotation makes a
tool orphan an object: answered once here, the same way for every rule and every door.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from gate.engine.context import Context
from gate.engine.deployers import Event, keep_mark
from gate.engine.fence import FenceStatus
from gate.engine.plan import Change
from gate.engine.policy import Policy
from gate.model.liveview import LiveView
from gate.model.objects import Inventory, Manifest
from gate.model.refs import ObjectRef
from gate.model.workloads import (
    POD_SPEC_PATHS,
    claim_names,
    pod_spec_of,
    statefulset_claim_matches,
)

#: The kinds the rules name, as (group, kind).
CLAIM = ("", "PersistentVolumeClaim")
VOLUME = ("", "PersistentVolume")
NAMESPACE = ("", "Namespace")
STATEFULSET = ("apps", "StatefulSet")
CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")


@dataclass(frozen=True)
class World:
    """Everything a rule may look at. No I/O happens behind it; frozen, so a rule cannot change
    what the next rule sees (`run_rules` works on a copy that knows the changes and what they
    delete)."""

    base: Inventory
    head: Inventory
    context: Context
    policy: Policy = field(default_factory=Policy)
    live: LiveView | None = None
    #: Objects this deploy deletes (set by `run_rules` on its copy): a consumer that goes is no
    #: consumer.
    deleting: frozenset[ObjectRef] = frozenset()
    #: The changes being judged (set by `run_rules` on its copy): what a rule over the whole
    #: deploy reads.
    changes: tuple[Change, ...] = ()
    #: The speculation fence as the webhook read it at this instant (admission only; None at
    #: `gate check`, where CI holds the fence and nothing reads it).
    fence: FenceStatus | None = None

    @cached_property
    def _template_users(self) -> dict[tuple[str, str], list[Manifest]]:
        return index_template_users(self.head)

    @cached_property
    def deleting_by_name(self) -> dict[tuple[str, str, str], set[str]]:
        """(group, kind, name) -> namespaces of the objects this deploy deletes: an owner is
        matched against them per dependent, and a mass prune deletes thousands."""
        index: dict[tuple[str, str, str], set[str]] = {}
        for ref in self.deleting:
            index.setdefault((ref.group, ref.kind, ref.name), set()).add(ref.namespace)
        return index

    @cached_property
    def volumes_by_claim(self) -> dict[tuple[str, str], Manifest]:
        """(namespace, claim) -> the PersistentVolume base declares with a claimRef naming it
        (namespace `default` when the claimRef has none): indexed once, asked per claim."""
        index: dict[tuple[str, str], Manifest] = {}
        for pv in self.base.of_kind(*VOLUME):
            claim_ref = pv.spec.get("claimRef")
            if isinstance(claim_ref, dict) and isinstance(claim_ref.get("name"), str):
                key = (str(claim_ref.get("namespace") or "default"), claim_ref["name"])
                index.setdefault(key, pv)
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


def kind_of(ref: ObjectRef) -> tuple[str, str]:
    """(group, kind): how the rules compare an object's kind with the kinds they know."""
    return (ref.group, ref.kind)


def keep_annotation(annotations: dict[str, str], event: Event = Event.PRUNE) -> str | None:
    """The keep annotation (`key: value`) that makes a deployer orphan the object at `event`
    (a prune, or its parent's deletion), if any: the deployers' registry decides
    (`gate.engine.deployers.keep_mark`)."""
    found = keep_mark(annotations, event=event)
    return None if found is None else str(found)


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


def guarded_contents(namespace: str, world: World) -> list[ObjectRef]:
    """The guarded objects in a namespace: declared in base, or live (a namespace's deletion takes
    both)."""
    refs = {
        m.ref
        for m in world.base.in_namespace(namespace)
        if world.policy.is_guarded_kind(*kind_of(m.ref))
    }
    if world.live is not None:
        refs.update(world.live.guarded_in_namespace(namespace))
    return sorted(refs)


def when_deleted(change: Change, world: World) -> str:
    """A StatefulSet's `persistentVolumeClaimRetentionPolicy.whenDeleted`: the live object's when
    the live view has it (what the controller acts on), else the manifest's, else `Retain`."""
    if world.live is not None:
        live = world.live.get(change.ref)
        if live is not None and "whenDeleted" in live.facts:
            return live.facts["whenDeleted"]
    m = change.base or change.head
    policy = (m.spec.get("persistentVolumeClaimRetentionPolicy") or {}) if m else {}
    return str(policy.get("whenDeleted", "Retain"))


def custom_resources(change: Change, world: World) -> tuple[list[ObjectRef], int]:
    """The custom resources of a CustomResourceDefinition that remain after the change: those the
    candidate declares, and how many exist (live ones this deploy does not delete counted too).
    Raises `UncountedError` when the live view cannot count them."""
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
    kind = kind_of(change.ref)
    if world.policy.is_guarded_kind(*kind):
        return True
    if kind == NAMESPACE:
        return bool(guarded_contents(change.ref.name, world))
    if kind == STATEFULSET:
        return when_deleted(change, world) == "Delete"
    if kind == CRD:
        return custom_resources(change, world)[1] > 0
    return False


def index_template_users(head: Inventory) -> dict[tuple[str, str], list[Manifest]]:
    """(namespace, claim) -> workloads in the candidate whose pod template mounts it.

    StatefulSet claim templates are indexed by their claim prefix `tpl-sts` (claims `tpl-sts-N`).
    """
    index: dict[tuple[str, str], list[Manifest]] = {}
    # Only workloads have a pod template; users are sorted when asked, so kind order is fine.
    workloads = (w for kind in POD_SPEC_PATHS for w in head.of_kind(*kind))
    for m in workloads:
        spec = pod_spec_of(m.ref.group, m.ref.kind, m.body)
        names = set(claim_names(spec)) if spec is not None else set()
        if kind_of(m.ref) == STATEFULSET:
            for tpl in m.spec.get("volumeClaimTemplates") or ():
                tpl_name = ((tpl or {}).get("metadata") or {}).get("name")
                if isinstance(tpl_name, str):
                    names.add(f"{_STS_PREFIX}{tpl_name}-{m.ref.name}")
        for name in names:
            index.setdefault((m.ref.namespace, name), []).append(m)
    return index


_STS_PREFIX = "\0sts:"
