"""What the rules share to make a finding: its shape, its source, and the fixes several give.

Pure. A finding names the change's object and the manifest that declares it (base first: what
is removed is declared there); retiring in two stages and removing a claim's consumers are the
fix of more than one rule, so they are written once, in the words of the door that shows them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from gate.engine.context import Context
from gate.engine.plan import Change
from gate.engine.rules.volumes import data_fate
from gate.engine.rules.world import World
from gate.model.findings import Code, Finding, FixAction, Severity, command, edit
from gate.model.objects import Source
from gate.model.refs import ObjectRef
from gate.model.stateful import catalogued


def finding(
    code: Code,
    change: Change,
    message: str,
    evidence: Iterable[str],
    fix: str,
    actions: Iterable[FixAction],
    suggested: Severity | None = None,
) -> Finding:
    """A finding on the change's object, from the manifest that declares it. `suggested` is a
    severity the rule suggests (the policy may override it); the severity itself is the policy's,
    applied afterwards (`gate.engine.verdict`)."""
    m = change.base or change.head
    return Finding(
        code=code,
        ref=change.ref,
        message=message,
        evidence=tuple(evidence),
        remediation=fix,
        api_version=m.api_version if m else "",
        source=source_of(change),
        suggested=suggested,
        actions=tuple(actions),
    )


def with_data(change: Change, world: World, evidence: Iterable[str]) -> list[str]:
    """The evidence, and for a deleted claim a last line that says what happens to its data
    (`gate.engine.rules.volumes`): whether the data outlives the claim is what the owner weighs
    first, and a `Delete` volume and a `Retain` one call for different fixes. For a catalogued
    stateful kind (`gate.model.stateful`), what its operator does to its claims on deletion."""
    lines = list(evidence)
    fate = data_fate(change, world) if change.deletes else None
    if fate is not None:
        lines.append(fate.evidence())
    stateful = catalogued(change.ref.group, change.ref.kind) if change.deletes else None
    if stateful is not None:
        lines.append(f"data: {stateful.operator} {stateful.kind}: {stateful.claims}")
        if stateful.protection:
            lines.append(f"the operator's own protection: {stateful.protection}")
    return lines


def source_of(change: Change) -> Source | None:
    """Where the change's object is declared: base first (what is removed is declared there)."""
    if change.base is not None and change.base.source is not None:
        return change.base.source
    return change.head.source if change.head is not None else None


def retire_fix(ref: ObjectRef, world: World, source: Source | None) -> tuple[str, list[FixAction]]:
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
    shared = shared_template(ref, world, source)
    if shared is not None:
        mine = world.base.get(ref)
        api = mine.api_version if mine is not None else "v1"
        return _retire_one_of_shared(ref, api, key, source, where, shared)
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


def shared_template(ref: ObjectRef, world: World, source: Source | None) -> list[ObjectRef] | None:
    """The other objects of `ref`'s kind that base builds from the same document (a kustomize
    Component or a template that many apps use, such as a volsync component making
    each app's claim from `${APP}`), or None when the file is its alone: annotating that file
    would mark every app's object."""
    if source is None:
        return None
    others = [
        m.ref
        for m in world.base
        if m.ref != ref
        and (m.ref.group, m.ref.kind) == (ref.group, ref.kind)
        and m.source == source  # the same document: one text made both (not a multi-doc file)
    ]
    return sorted(others) or None


def _retire_one_of_shared(
    ref: ObjectRef,
    api: str,
    key: str,
    source: Source | None,
    where: str,
    shared: list[ObjectRef],
) -> tuple[str, list[FixAction]]:
    """Retiring one app's object that a shared file makes: the mark goes in a patch where that
    app is built, so the other apps' objects stay unmarked."""
    others = ", ".join(r.display() for r in shared[:3]) + (
        f" and {len(shared) - 3} more" if len(shared) > 3 else ""
    )
    patch = (
        f"patches: [{{target: {{kind: {ref.kind}, name: {ref.name}}}, patch: "
        f'"{{apiVersion: {api}, kind: {ref.kind}, metadata: {{name: '
        f'{ref.name}, annotations: {{{key}: <reason>}}}}}}"}}]'
    )
    return (
        f"keep it in the candidate{where} and retire {ref.display()} in two stages; its "
        f"manifest is shared (it also makes {others}: a kustomize Component or template), so "
        "mark this one only: 1) add a patch where this app is built (its kustomization.yaml, "
        f"or its Flux Kustomization's spec.patches) that annotates it, e.g. `{patch}`, remove "
        "its consumers, merge and let it deploy; 2) then remove it (the app's ks.yaml or its "
        "components: entry), in a later change",
        [
            edit(f"keep {ref.display()} in the candidate as base declares it", source),
            edit(
                f"stage 1: in this app's kustomization.yaml (or its Flux Kustomization's "
                f"spec.patches) add {patch}; remove its consumers; merge and let it deploy"
            ),
            edit("stage 2: remove it in a later change (the app's entry, not the shared file)"),
        ],
    )


def at_source(change: Change) -> str:
    """` (file:line)` where the change's object is declared, for a message; empty if unknown."""
    src = source_of(change)
    return f" ({src})" if src else ""


def consumer_findings(change: Change, world: World, what: str) -> Iterator[Finding]:
    """CONSUMER_REMAINS for a claim that `what` (is removed, is marked for retirement) while
    workloads of the candidate, or live ones this deploy keeps, still mount it."""
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
    change_source = source_of(change)
    yield finding(
        Code.CONSUMER_REMAINS,
        change,
        f"claim {ref.namespace}/{ref.name} {what} but {len(users)} workload(s) still use it",
        with_data(change, world, users),
        f"remove claim {ref.name} from these workloads in the same change that retires the claim "
        "(stage 1), and remove the claim only after that has deployed",
        [*steps, edit(f"remove claim {ref.name} only after that has deployed", change_source)],
    )
