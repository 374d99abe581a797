"""The rule registry: one record per rule, and the doors it runs at.

Adding a rule is one record here, its function (in the module of its kind: `deletion`,
`candidate`, `guard`, `cascades`, `moves`) and its golden case; every door asks this table for
its rules (`change_rules`, `world_rules`) instead of listing functions by hand: `gate check`
through `gate.engine.rules.runner`, the admission webhook through `webhook.decide`. The codes a
rule may produce are listed on its record (one function may make several); what each code means
and how heavily it weighs by default is the closed vocabulary's (`gate.model.findings.CODES`),
which the schemas are generated from (`scripts/gen-schemas`) and the README is checked against.

Order is report order: the runner judges each change with the per-change rules in the order
listed, then runs the rules over the whole deploy in the order listed.

Not rules of this table (their own doors, outside the DELETE path): the webhook judges UPDATEs
and CREATEs with `gate.engine.updates.change_findings` (which `check_candidate_updates` runs at
`gate check`) and its guards of its own objects (`webhook.guards`); `gate check` judges the policy
file's guard settings with `gate.engine.guardsettings`. Their codes are in the code table too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from gate.engine.plan import Change
from gate.engine.rules.candidate import (
    check_already_terminating,
    check_candidate_updates,
    check_retiring_consumers,
    check_void_force_disabled,
)
from gate.engine.rules.cascades import check_cascades, check_uninstalled_member
from gate.engine.rules.deletion import (
    check_claim_mounted,
    check_consumer_remains,
    check_crd_holds_resources,
    check_immutable_change,
    check_mass_prune,
    check_namespace_holds_claims,
    check_not_retired,
    check_orphaned_by_keep,
    check_pv_bound,
    check_reclaim_delete,
    check_speculative_prune,
    check_statefulset_deletes_claims,
)
from gate.engine.rules.guard import (
    check_deployer_identities,
    check_guard_tampered,
    check_speculation_fence,
)
from gate.engine.rules.moves import check_flux_moves
from gate.engine.rules.world import World
from gate.model.findings import Code, Finding

#: A rule on one change: the change and the world it happens in -> findings.
ChangeCheck = Callable[[Change, World], Iterator[Finding]]
#: A rule over the whole deploy: the world (its `changes`, and what they are `deleting`) ->
#: findings.
WorldCheck = Callable[[World], Iterator[Finding]]


class Door(StrEnum):
    """Where a rule runs: each door asks the registry for its own."""

    #: `gate check` (and what runs it: `gate history`, the Action), before the deploy.
    CHECK = "check"
    #: The admission webhook, on every guarded DELETE, whoever makes it.
    ADMISSION = "admission"
    #: The admission webhook, on a guarded DELETE by a deployer identity or a cascading
    #: controller only (a prune, not a person's hand).
    DEPLOYER = "deployer"


class Scope(StrEnum):
    """What a rule reads: one change at a time, or the whole deploy at once."""

    CHANGE = "change"
    WORLD = "world"


@dataclass(frozen=True, kw_only=True)
class ChangeRule:
    """A rule judged on each change: its function, the codes it may produce, its doors."""

    scope: ClassVar[Scope] = Scope.CHANGE
    check: ChangeCheck
    codes: tuple[Code, ...]
    doors: frozenset[Door]
    #: When it finds something, the change's later rules do not run: ORPHANED_BY_KEEP says the
    #: tool will not delete the object, so no deletion rule applies to it.
    settles: bool = False

    @property
    def name(self) -> str:
        """The rule's function name (`check_...`)."""
        return self.check.__name__


@dataclass(frozen=True, kw_only=True)
class WorldRule:
    """A rule over the whole deploy (parents and their children, roots, the guards): its
    function, the codes it may produce, its doors."""

    scope: ClassVar[Scope] = Scope.WORLD
    check: WorldCheck
    codes: tuple[Code, ...]
    doors: frozenset[Door]

    @property
    def name(self) -> str:
        """The rule's function name (`check_...`)."""
        return self.check.__name__


#: One record of the registry.
Rule = ChangeRule | WorldRule

_CHECK = frozenset({Door.CHECK})
_EVERYWHERE = frozenset({Door.CHECK, Door.ADMISSION})

#: Every rule, in report order.
RULES: tuple[Rule, ...] = (
    ChangeRule(
        check=check_orphaned_by_keep, codes=(Code.ORPHANED_BY_KEEP,), doors=_CHECK, settles=True
    ),
    ChangeRule(
        check=check_uninstalled_member,
        codes=(Code.RELEASE_UNINSTALL_DELETES, Code.SPECULATIVE_PRUNE),
        doors=_CHECK,
        settles=True,
    ),
    ChangeRule(
        check=check_not_retired,
        codes=(Code.NOT_RETIRED, Code.VOLUME_RETAINS_DATA),
        doors=frozenset({Door.CHECK, Door.DEPLOYER}),
    ),
    ChangeRule(check=check_speculative_prune, codes=(Code.SPECULATIVE_PRUNE,), doors=_CHECK),
    ChangeRule(check=check_consumer_remains, codes=(Code.CONSUMER_REMAINS,), doors=_CHECK),
    ChangeRule(
        check=check_immutable_change,
        codes=(Code.IMMUTABLE_FIELD_CHANGE, Code.FORCED_REPLACEMENT),
        doors=_CHECK,
    ),
    ChangeRule(
        check=check_namespace_holds_claims, codes=(Code.NAMESPACE_HOLDS_CLAIMS,), doors=_EVERYWHERE
    ),
    ChangeRule(
        check=check_statefulset_deletes_claims,
        codes=(Code.STATEFULSET_DELETES_CLAIMS,),
        doors=_EVERYWHERE,
    ),
    ChangeRule(
        check=check_crd_holds_resources,
        codes=(Code.CRD_HOLDS_RESOURCES, Code.RESOURCES_UNCOUNTED),
        doors=_EVERYWHERE,
    ),
    ChangeRule(check=check_pv_bound, codes=(Code.PV_BOUND,), doors=_EVERYWHERE),
    ChangeRule(check=check_claim_mounted, codes=(Code.CLAIM_MOUNTED,), doors=_EVERYWHERE),
    ChangeRule(check=check_reclaim_delete, codes=(Code.RECLAIM_DELETE_LOSES_DATA,), doors=_CHECK),
    ChangeRule(
        check=check_speculation_fence,
        codes=(Code.SPECULATION_FENCE,),
        doors=frozenset({Door.DEPLOYER}),
    ),
    WorldRule(
        check=check_cascades,
        codes=(
            Code.RELEASE_UNINSTALL_DELETES,
            Code.RELEASE_CONTENT_UNKNOWN,
            Code.KUSTOMIZATION_PRUNES_GUARDED,
            Code.KUSTOMIZATION_REMOVED,
            Code.APPLICATION_DELETES_RESOURCES,
            Code.OWNER_DELETES_DEPENDENTS,
            Code.SPECULATIVE_PRUNE,
        ),
        doors=_CHECK,
    ),
    WorldRule(check=check_flux_moves, codes=(Code.FLUX_MOVE_PRUNES,), doors=_CHECK),
    WorldRule(check=check_retiring_consumers, codes=(Code.CONSUMER_REMAINS,), doors=_CHECK),
    WorldRule(
        check=check_candidate_updates,
        codes=(
            Code.OWNER_REFERENCE_ADDED,
            Code.RETENTION_DELETES_CLAIMS,
            Code.RECLAIM_SWITCHED_TO_DELETE,
            Code.OVERRIDE_IN_MANIFEST,
            Code.GUARD_TAMPERED,
        ),
        doors=_CHECK,
    ),
    WorldRule(check=check_already_terminating, codes=(Code.ALREADY_TERMINATING,), doors=_CHECK),
    WorldRule(check=check_guard_tampered, codes=(Code.GUARD_TAMPERED,), doors=_CHECK),
    WorldRule(check=check_deployer_identities, codes=(Code.GUARD_TAMPERED,), doors=_CHECK),
    WorldRule(check=check_mass_prune, codes=(Code.MASS_PRUNE,), doors=_CHECK),
    WorldRule(check=check_void_force_disabled, codes=(Code.FORCE_DISABLED_VOID,), doors=_CHECK),
)

#: Codes no rule of this registry makes: a door makes them itself, from what only it sees.
DOOR_CODES: dict[Code, str] = {
    Code.REMOTE_CONTENT_UNKNOWN: "gate check and gate history (gate.engine.remotes), from the "
    "remote resources the confined build left out of each revision: no objects of either side",
    Code.UNIDENTIFIED_OBJECT: "the webhook, for a request that names no object it can identify "
    "(webhook.decide): there is no change to judge",
}


def change_rules(door: Door) -> tuple[ChangeRule, ...]:
    """The per-change rules that run at `door`, in report order."""
    return tuple(r for r in RULES if isinstance(r, ChangeRule) and door in r.doors)


def world_rules(door: Door) -> tuple[WorldRule, ...]:
    """The rules over the whole deploy that run at `door`, in report order."""
    return tuple(r for r in RULES if isinstance(r, WorldRule) and door in r.doors)


def codes_made() -> frozenset[Code]:
    """Every code some rule or door may produce."""
    return frozenset(c for r in RULES for c in r.codes) | frozenset(DOOR_CODES)
