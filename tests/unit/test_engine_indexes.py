"""The engine's indexes answer exactly what the scans they replace answered."""

from __future__ import annotations

import itertools

from gate.engine.context import Context
from gate.engine.rules import World
from gate.engine.rules.cascades import _deleted, _same
from gate.model.objects import Inventory
from gate.model.refs import ObjectRef

REFS = [
    ObjectRef(group, kind, namespace, name)
    for group, kind, namespace, name in itertools.product(
        ("", "example.com"), ("Owner", "Other"), ("", "app", "db"), ("a", "b")
    )
]


def test_an_owner_is_deleted_exactly_when_it_is_the_same_as_a_deleted_object() -> None:
    core = REFS[:12]  # the core group: every kind, namespace (none too) and name
    for deleting in itertools.chain.from_iterable(
        itertools.combinations(core, size) for size in range(4)
    ):
        world = World(Inventory(), Inventory(), Context.MERGED, deleting=frozenset(deleting))
        for owner in REFS:
            expected = any(_same(owner, d) for d in deleting)
            assert _deleted(owner, world) == expected, (owner, deleting)
