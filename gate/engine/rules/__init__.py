"""The rules: one small function each, from a change and the world to findings.

Pure. A rule reads the `World` (base and candidate inventories, an optional live view, the context
and the policy) and returns findings with evidence and a remediation; severity and exemptions are
applied afterwards, in `gate.engine.verdict` (a rule may suggest a severity, never set one).

The package, from the bottom up (an import-linter contract holds the order, lazy imports
included): `world` (the `World` and what every rule asks of it: guarded, retired, kept), `common`
(a finding's shape and the fixes several rules give), the rules by kind (`deletion`, `candidate`,
`guard`, `cascades`, `moves`), `registry` (one record per rule: its codes and doors) and `runner`
(`run_rules`, what `gate check` runs). The names other modules use are re-exported here.
"""

from __future__ import annotations

from gate.engine.rules.registry import RULES, ChangeRule, Door, Rule, WorldRule, change_rules
from gate.engine.rules.runner import run_rules
from gate.engine.rules.world import (
    Retirement,
    World,
    is_guarded,
    keep_annotation,
    retirement,
)

__all__ = [
    "RULES",
    "ChangeRule",
    "Door",
    "Retirement",
    "Rule",
    "World",
    "WorldRule",
    "change_rules",
    "is_guarded",
    "keep_annotation",
    "retirement",
    "run_rules",
]
