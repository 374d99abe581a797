"""`run_rules`: every rule the registry lists for `gate check`, in its order.

Pure. The runner knows no rule by name: it runs the records of `gate.engine.rules.registry` whose
doors include `check`, per change and then over the whole deploy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gate.engine.plan import Action, Change
from gate.engine.rules.registry import Door, change_rules, world_rules
from gate.engine.rules.world import World
from gate.model.findings import Finding


def run_rules(changes: Iterable[Change], world: World) -> list[Finding]:
    """Every finding the rules of `gate check` make for these changes, before policy is applied:
    each change through the per-change rules (a rule that `settles` it ends its turn), then the
    rules over the whole deploy, in the registry's order."""
    changes = tuple(changes)
    world = replace(
        world,
        deleting=frozenset(c.ref for c in changes if c.action is Action.DELETE and not c.orphaned),
        changes=changes,
    )
    findings: list[Finding] = []
    for change in changes:
        for rule in _CHANGE_RULES:
            if not rule.settles:
                findings.extend(rule.check(change, world))
                continue
            found = list(rule.check(change, world))
            findings.extend(found)
            if found:
                break
    for whole in _WORLD_RULES:
        findings.extend(whole.check(world))
    return [_with_live_api_version(f, world) for f in findings]


_CHANGE_RULES = change_rules(Door.CHECK)
_WORLD_RULES = world_rules(Door.CHECK)


def _with_live_api_version(f: Finding, world: World) -> Finding:
    """Objects no manifest declares (pruned live) take their apiVersion from the live object."""
    if f.api_version or world.live is None:
        return f
    live = world.live.get(f.ref)
    return replace(f, api_version=live.api_version) if live and live.api_version else f
