"""The guard settings of the policy, and GUARD_TAMPERED for a candidate that changes them.

Most of the policy says what the gate decides (guarded kinds, severities, exemptions): `gate
check` reads it from the base revision, so a candidate's change to it takes effect only once it
is merged, reviewed like any other change. The guard settings are different. They say who the
guards bind and who may get past them:

- `webhook.fence`: which Lease the webhook obeys and CI holds during a speculative deploy;
- `webhook.deployers`: whose deletions the fence holds back, and who may never touch the guards;
- `webhook.breakGlassGroups`: who may override a refusal or clear a held fence;
- `webhook.protectedLabels`: which labels of a guarded object a deployer may not change;
- `annotations.retire` and `annotations.allowDelete`: which annotation is stage 1 of a
  retirement, and which is a person's override (the webhook reads its own copy: pointed at an
  annotation every object carries, the check would count every claim retired or overridden);
- `heal.disposableClaims`: which claims' data `gate heal` may lose to release them;
- `heal.trustedManagers`: whose field-manager writes unattended heal takes for a person's hand;
- `heal.watch`: what `gate heal --watch` does unasked.

Each has a second copy where the webhook and the healer read it (the cluster: the chart's
`policy` values), so a change in the repository alone splits the doors: the Action would hold a
Lease the webhook does not watch, or the healer would lose data the check thinks is kept. And
each weakens a guard for every later deploy once merged. So a candidate that changes one is
refused (GUARD_TAMPERED); a person changes a guard setting in both places, after the base
policy exempts the change (an exemption of kind `Policy.prune-gate.io` naming the setting).

What the webhook reads for itself and nothing else (`guardedKinds`, `resync`, `maxCacheAge`) and
the rules' own settings are not guard settings: they decide what is checked, not who is bound.

Pure: both policies and the line of each key arrive from `gate.sources`; the finding names the
setting as an object of kind `Policy` in group `prune-gate.io` (no Kubernetes object has it), so
an exemption can name exactly one setting and no manifest's exemption matches it by accident.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gate.engine.placement import FILE_LEVEL
from gate.engine.policy import Policy
from gate.model.findings import Code, Finding, edit
from gate.model.objects import Source
from gate.model.refs import ObjectRef

#: The group and kind a policy finding's object has: the policy is not a Kubernetes object.
POLICY_GROUP = "prune-gate.io"
POLICY_KIND = "Policy"

_NONE = "none"


def policy_ref(name: str) -> ObjectRef:
    """The object a policy finding names: one setting (`webhook.fence`), or the file."""
    return ObjectRef(POLICY_GROUP, POLICY_KIND, "", name)


def _names(values: tuple[str, ...]) -> frozenset[object]:
    return frozenset(values)


def _fence(policy: Policy) -> object:
    fence = policy.webhook.fence
    return f"{fence[0]}/{fence[1]}" if fence else _NONE


def _entry(value: object) -> str:
    """A setting's list entry as text: a string as it is, a record as `{field: value, ...}`
    with every field it has (a field added later is shown without a change here)."""
    if isinstance(value, str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = []
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if isinstance(v, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in v):
                v = dict(v)  # labels, kept as sorted pairs
            parts.append(f"{_camel(f.name)}: {_scalar(v)}")
        return "{" + ", ".join(parts) + "}"
    return repr(value)


def _scalar(value: object) -> str:
    """A value as the policy file writes it: `true`, not Python's `True`."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


@dataclass(frozen=True, slots=True)
class GuardSetting:
    """One guard setting: its key in the policy file, what it decides, and how to read it from
    a `Policy` as a value that compares equal when it means the same (a list as a set)."""

    key: str
    decides: str
    read: Callable[[Policy], object]


GUARD_SETTINGS: tuple[GuardSetting, ...] = (
    GuardSetting("webhook.fence", "which Lease the webhook obeys and CI holds", _fence),
    GuardSetting(
        "webhook.deployers",
        "whose deletions the speculation fence holds back, and who may not touch the guards",
        lambda p: _names(p.webhook.deployers),
    ),
    GuardSetting(
        "webhook.breakGlassGroups",
        "who may override a refusal or clear a held fence",
        lambda p: _names(p.webhook.break_glass_groups),
    ),
    GuardSetting(
        "webhook.protectedLabels",
        "which labels of a guarded object a deployer may not change",
        lambda p: _names(p.webhook.protected_labels),
    ),
    GuardSetting(
        "annotations.retire",
        "which annotation marks stage 1 of a retirement",
        lambda p: p.retire_annotation,
    ),
    GuardSetting(
        "annotations.allowDelete",
        "which annotation is a person's override of a refused deletion",
        lambda p: p.allow_delete_annotation,
    ),
    GuardSetting(
        "heal.disposableClaims",
        "which claims' data gate heal may lose to release them",
        lambda p: frozenset(p.disposable_claims),
    ),
    GuardSetting(
        "heal.trustedManagers",
        "whose field-manager writes unattended heal takes for a person's hand",
        lambda p: _names(p.heal_trusted_managers),
    ),
    GuardSetting("heal.watch", "what gate heal --watch does unasked", lambda p: p.heal_watch),
)


@dataclass(frozen=True, slots=True)
class PolicySide:
    """The policy file at one revision: the policy it gives (None: the file does not exist
    there, so the defaults apply) and the 1-based line of each key it sets, by dotted path."""

    policy: Policy | None
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def effective(self) -> Policy:
        return self.policy if self.policy is not None else Policy()

    def line_of(self, key: str) -> int | None:
        """The line of `key`, else of its nearest parent the file sets; None when neither."""
        parts = key.split(".")
        while parts:
            line = self.lines.get(".".join(parts))
            if line is not None:
                return line
            parts.pop()
        return None


def _show(value: object) -> str:
    if isinstance(value, frozenset):
        return "[" + ", ".join(sorted(_entry(v) for v in value)) + "]" if value else _NONE
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _entry(value)
    return str(value)


def _details(old: object, new: object) -> list[str]:
    """What was added and removed (for a set), or which fields changed (for a record)."""
    if isinstance(old, frozenset) and isinstance(new, frozenset):
        added = sorted(_entry(v) for v in new - old)
        removed = sorted(_entry(v) for v in old - new)
        return [f"added: {a}" for a in added] + [f"removed: {r}" for r in removed]
    if dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new):
        return [
            f"{_camel(f.name)}: {_scalar(getattr(old, f.name))} -> {_scalar(getattr(new, f.name))}"
            for f in dataclasses.fields(old)
            if getattr(old, f.name) != getattr(new, f.name)
        ]
    return []


def check_guard_settings(path: str, base: PolicySide, head: PolicySide | str) -> list[Finding]:
    """GUARD_TAMPERED for each guard setting the candidate's policy file `path` changes, or one
    for the file when the candidate's cannot be read (`head` is then why): its guard settings
    are unknown, so the change is refused rather than guessed.

    A setting is compared by what it means: the defaults when the file or the key is absent, a
    list as a set (reordering is not a change).
    """
    if isinstance(head, str):
        return [_unreadable(path, head)]
    found = []
    for setting in GUARD_SETTINGS:
        old, new = setting.read(base.effective()), setting.read(head.effective())
        if old != new:
            found.append(_changed(path, setting, (old, new), base, head))
    return found


def _changed(
    path: str,
    setting: GuardSetting,
    values: tuple[object, object],
    base: PolicySide,
    head: PolicySide,
) -> Finding:
    old, new = values
    key = setting.key
    head_line = head.line_of(key)
    if head.policy is None:
        head_at = Source(path, FILE_LEVEL)  # the candidate removes the file
    else:
        head_at = Source(path, head_line if head_line is not None else 1)
    base_line = base.lines.get(key)
    source = Source(path, base_line) if base_line is not None else head_at
    if source.line == FILE_LEVEL:
        source = Source(path, base.line_of(key) or 1)
    was, now = _show(old), _show(new)
    exemption = (
        f"{{kind: {POLICY_KIND}.{POLICY_GROUP}, name: {key}, codes: "
        "[GUARD_TAMPERED], reason: ..., expires: ...}"
    )
    return Finding(
        code=Code.GUARD_TAMPERED,
        ref=policy_ref(key),
        message=f"the candidate changes {key} in {path}, a guard setting: it decides "
        f"{setting.decides}, and a candidate may not set its own guards",
        evidence=(f"{key}: {was} -> {now}", *_details(old, new)),
        remediation=f"revert {key} in {path}. A guard setting is a person's change, made with "
        "the merge queue paused, in the chart's `policy` values (helm upgrade: what the "
        f"webhook and the healer read) and in {path}; merge it once the base policy exempts "
        f"it: add {exemption} to `exemptions` in a change of its own, merged first",
        actions=(
            edit(f"revert {key} in {path} to {was}", head_at),
            edit(
                f"or, as a person: exempt the change in the base policy first ({exemption}), "
                f"then change {key} in the chart's policy values and in {path}",
                source,
            ),
        ),
        source=source,
        head_source=head_at,
    )


def _unreadable(path: str, why: str) -> Finding:
    at = Source(path, 1)
    return Finding(
        code=Code.GUARD_TAMPERED,
        ref=policy_ref(path),
        message=f"the candidate's {path} cannot be read as a policy, so its guard settings "
        "(webhook.fence, webhook.deployers, webhook.breakGlassGroups, webhook.protectedLabels, "
        "heal.*) are unknown: refused rather than guessed",
        evidence=(why,),
        remediation=f"make {path} a regular file holding a valid policy (the evidence says "
        "what is wrong); a guard setting it changes is then reported on its own",
        actions=(edit(f"fix {path}: {why}", at),),
        source=at,
        head_source=at,
    )
