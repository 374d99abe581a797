"""The UPDATEs that delete by proxy: a change that makes a controller delete a guarded object.

A deployer that may not delete a claim could still have it deleted: add an ownerReference (the
garbage collector deletes the claim with its owner), switch a StatefulSet's claim retention to
Delete (the StatefulSet controller has its claims deleted on scale-down or deletion), or satisfy
the rules one call early (apply the retire mark from a speculative deploy, or put the allow-delete
override in a manifest; the speculation fence's part is the webhook's, in `webhook.updates`), or
hide it from the webhook (change a label its objectSelector reads). Each function here compares
the object before a change with the object after it, so a field a change leaves as it was never
refuses: only the change is judged.

Both doors use them, through `change_findings`: the webhook on an UPDATE or CREATE (`oldObject`
against `object`), `gate check` on an object in the candidate (the base manifest against the
candidate's), so the two cannot disagree on what such a change is. Pure: no cluster, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gate.engine.ledger import DATA_ANNOTATION, DISPOSABLE, FieldKey, field_writers
from gate.engine.marks import hand_owners
from gate.engine.policy import Policy
from gate.model.findings import Code, Finding, command, edit
from gate.model.refs import ObjectRef

#: The retention fields of a StatefulSet and what `Delete` in each makes the controller do.
RETENTION_FIELDS: dict[str, str] = {
    "whenScaled": "the claims of every ordinal scaled away are deleted",
    "whenDeleted": "every claim is deleted with the StatefulSet",
}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _annotation(obj: dict[str, Any], key: str) -> str:
    value = (_meta(obj).get("annotations") or {}).get(key)
    return value.strip() if isinstance(value, str) else ""


def annotation_added(old: dict[str, Any], new: dict[str, Any], key: str) -> str:
    """The value of annotation `key` when this UPDATE adds it; empty when it was there already,
    or is not there now."""
    return "" if _annotation(old, key) else _annotation(new, key)


def _owner_key(ref: dict[str, Any]) -> str:
    uid = ref.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    return f"{ref.get('apiVersion')}/{ref.get('kind')}/{ref.get('name')}"


def _owners(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    refs = _meta(obj).get("ownerReferences") or []
    return {_owner_key(r): r for r in refs if isinstance(r, dict)}


def owner_references_added(
    ref: ObjectRef,
    old: dict[str, Any],
    new: dict[str, Any],
    policy: Policy,
    cause: str,
    *,
    retired: bool | None = None,
    unretired: str = "",
) -> Iterator[Finding]:
    """OWNER_REFERENCE_ADDED: an owner appears on an object that was never retired.

    `retired` says whether stage 1 counts for the object (default: the retire mark on `old`);
    `unretired` is the evidence line saying why it does not (default: no mark on the live object).
    """
    key = policy.retire_annotation
    if _annotation(old, key) if retired is None else retired:
        return
    before = _owners(old)
    added = [r for k, r in _owners(new).items() if k not in before]
    if not added:
        return
    owners = ", ".join(f"{r.get('kind')} {r.get('name')}" for r in added)
    yield Finding(
        code=Code.OWNER_REFERENCE_ADDED,
        ref=ref,
        message=f"{ref.display()} gets an ownerReference to {owners}: the garbage collector "
        "deletes it when that owner goes (at once if the owner is already gone), and it was "
        "never retired",
        evidence=(
            *(
                f"ownerReference added: {r.get('kind')} {r.get('name')} uid {r.get('uid')}"
                for r in added
            ),
            f"cause: {cause}",
            unretired or f"no `{key}` annotation on the live object",
        ),
        remediation="remove the ownerReference from the manifest; if the object must go with its "
        f'owner, retire it first: a merged revision annotates it {key}="<reason>" and removes '
        "its consumers, then a later revision may add the reference",
        actions=(
            edit(f"remove the ownerReference to {owners} from the manifest"),
            edit(f'or: retire it first ({key}: "<reason>", merged and deployed), then add it'),
        ),
        api_version=str(new.get("apiVersion") or ""),
    )


def _retention(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    policy = (
        (spec or {}).get("persistentVolumeClaimRetentionPolicy") if isinstance(spec, dict) else None
    )
    return policy if isinstance(policy, dict) else {}


def _claim_templates(obj: dict[str, Any]) -> list[str]:
    spec = obj.get("spec")
    templates = (spec or {}).get("volumeClaimTemplates") if isinstance(spec, dict) else None
    if not isinstance(templates, list):
        return []
    return [str(_meta(t).get("name") or "?") for t in templates if isinstance(t, dict)]


def retention_deletes_claims(
    ref: ObjectRef, old: dict[str, Any], new: dict[str, Any], policy: Policy, cause: str
) -> Iterator[Finding]:
    """RETENTION_DELETES_CLAIMS: a StatefulSet with claim templates switches a retention to
    Delete (from Retain, or from absent, which means Retain)."""
    if (ref.group, ref.kind) != ("apps", "StatefulSet"):
        return
    templates = _claim_templates(new)
    if not templates:
        return
    before, after = _retention(old), _retention(new)
    for name, effect in RETENTION_FIELDS.items():
        was, now = str(before.get(name) or "Retain"), str(after.get(name) or "Retain")
        if now != "Delete" or was == "Delete":
            continue
        yield Finding(
            code=Code.RETENTION_DELETES_CLAIMS,
            ref=ref,
            message=f"{ref.display()} switches persistentVolumeClaimRetentionPolicy.{name} from "
            f"{was} to Delete: {effect} (the StatefulSet controller gives them an owner and the "
            "garbage collector deletes them)",
            evidence=(f"volumeClaimTemplates: {', '.join(templates)}", f"cause: {cause}"),
            remediation=f"keep {name}: Retain in the manifest; retire the claims that should go "
            f"in two stages instead (a merged revision annotates them {policy.retire_annotation}, "
            "a later one deletes them)",
            actions=(
                edit(f"keep persistentVolumeClaimRetentionPolicy.{name}: Retain in the manifest"),
                edit("retire the claims that should go in two stages instead"),
            ),
            api_version=str(new.get("apiVersion") or ""),
        )


def _reclaim(obj: dict[str, Any]) -> str:
    spec = obj.get("spec")
    value = spec.get("persistentVolumeReclaimPolicy") if isinstance(spec, dict) else None
    return value if isinstance(value, str) and value else "Retain"  # the API server's default


def reclaim_switched_to_delete(
    ref: ObjectRef, old: dict[str, Any], new: dict[str, Any], policy: Policy, cause: str
) -> Iterator[Finding]:
    """RECLAIM_SWITCHED_TO_DELETE: a PersistentVolume's reclaimPolicy becomes Delete.

    The PV controller then deletes the volume, data and all, when its claim goes: a retired
    claim's stage 2 included, though whoever chose Retain chose to keep the data past it.
    """
    if (ref.group, ref.kind) != ("", "PersistentVolume"):
        return
    was, now = _reclaim(old), _reclaim(new)
    if now != "Delete" or was == "Delete":
        return
    spec = new.get("spec")
    claim = spec.get("claimRef") if isinstance(spec, dict) else None
    bound = (
        f"bound to claim {claim.get('namespace')}/{claim.get('name')}"
        if isinstance(claim, dict) and claim.get("name")
        else "not bound to a claim now"
    )
    yield Finding(
        code=Code.RECLAIM_SWITCHED_TO_DELETE,
        ref=ref,
        message=f"{ref.display()} switches persistentVolumeReclaimPolicy from {was} to Delete: "
        "the volume and its data are deleted when its claim is",
        evidence=(bound, f"cause: {cause}"),
        remediation=f"keep persistentVolumeReclaimPolicy: {was} in the manifest; if the data "
        f"may go, a person switches it (kubectl patch pv {ref.name} -p "
        """'{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}') after taking a snapshot""",
        actions=(
            edit(f"keep persistentVolumeReclaimPolicy: {was} in the manifest"),
            command(
                f"kubectl patch pv {ref.name} -p "
                """'{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}'"""
            ),
        ),
        api_version=str(new.get("apiVersion") or ""),
    )


def override_in_manifest(
    ref: ObjectRef, old: dict[str, Any], new: dict[str, Any], policy: Policy, cause: str
) -> Iterator[Finding]:
    """OVERRIDE_IN_MANIFEST: a deploy adds the allow-delete override annotation."""
    key = policy.allow_delete_annotation
    value = annotation_added(old, new, key)
    if not value:
        return
    yield Finding(
        code=Code.OVERRIDE_IN_MANIFEST,
        ref=ref,
        message=f"{ref.display()} gets the `{key}` annotation from a deploy: the override is a "
        "person's act at the moment of a deletion, not part of a manifest",
        evidence=(f'{key}: "{value}"', f"cause: {cause}"),
        remediation=f"remove `{key}` from the manifest; a person who must delete the object "
        f'annotates it by hand (kubectl annotate {ref.kubectl()} {key}="<reason>") or acts from '
        "a break-glass group",
        actions=(
            edit(f"remove `{key}` from the manifest"),
            command(f'kubectl annotate {ref.kubectl()} {key}="<reason>"'),
        ),
        api_version=str(new.get("apiVersion") or ""),
    )


def _label(obj: dict[str, Any], key: str) -> str | None:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    value = labels.get(key) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def _how(was: str | None, now: str | None) -> str:
    if was is None:
        return f'added ("{now}")'
    if now is None:
        return f'removed (was "{was}")'
    return f'changed from "{was}" to "{now}"'


def protected_label_changes(
    ref: ObjectRef, old: dict[str, Any], new: dict[str, Any], policy: Policy, cause: str
) -> Iterator[Finding]:
    """GUARD_TAMPERED for each protected label this change adds, changes or removes: labels
    come from the deployer's manifests, so one relabel could hide the object from the webhook's
    objectSelector, and every later DELETE with it."""
    for key in policy.webhook.protected_labels:
        was, now = _label(old, key), _label(new, key)
        if was == now:
            continue
        yield Finding(
            code=Code.GUARD_TAMPERED,
            ref=ref,
            message=f"{ref.display()} has label {key} {_how(was, now)}: the webhook's "
            "objectSelector reads that label, so the change could take the object out "
            "of prune-gate's sight before it is deleted",
            evidence=(
                f"protected label (policy webhook.protectedLabels): {key}",
                f"cause: {cause}",
            ),
            remediation=f"keep label {key} as it is live in the manifest; if the object should "
            f"leave prune-gate's guard, a person relabels it (kubectl label {ref.kubectl()} "
            f"{key}=... --overwrite) or the chart's webhook.objectSelector changes",
            actions=(
                edit(f"keep label {key} in the manifest as it is live"),
                command(f"kubectl label {ref.kubectl()} {key}=... --overwrite"),
            ),
            api_version=str(new.get("apiVersion") or ""),
        )


def _disposable_marks(ref: ObjectRef, obj: dict[str, Any], policy: Policy) -> dict[FieldKey, str]:
    """The marks on a claim that could make heal lose its data, with their values: the
    disposable annotation, and each label `heal.disposableClaims` reads at a value an entry
    covering this claim reads."""
    out: dict[FieldKey, str] = {}
    if _annotation(obj, DATA_ANNOTATION) == DISPOSABLE:
        out[("annotations", DATA_ANNOTATION)] = DISPOSABLE
    for key in policy.disposable_label_keys():
        value = _label(obj, key)
        if value is not None and value in policy.disposable_label_values(ref, key):
            out[("labels", key)] = value
    return out


def disposable_marks_added(
    ref: ObjectRef, old: dict[str, Any], new: dict[str, Any], policy: Policy, cause: str
) -> Iterator[Finding]:
    """GUARD_TAMPERED for each disposable mark this change puts on a claim: the
    `prune-gate.io/data: disposable` annotation, or a label `heal.disposableClaims` reads set
    to the value it reads; and for each such mark whose managedFields this change makes a
    trusted manager own (`heal.trustedManagers`), its value unchanged.

    Heal loses a claim's data on such a mark. A deploy that writes one decides that the data
    may go, a speculative deploy included, and a deploy that makes managedFields name a person as
    a mark's writer (a manifest carrying managedFields, which client-side apply sends; or a
    deployer writing under a person's manager name) forges the evidence unattended heal reads
    (`gate.engine.marks`)."""
    if (ref.group, ref.kind) != ("", "PersistentVolumeClaim"):
        return
    before, after = _disposable_marks(ref, old, policy), _disposable_marks(ref, new, policy)
    if not after:
        return
    old_writers, new_writers = field_writers(old), field_writers(new)
    trusted = policy.heal_trusted_managers
    for (part, key), value in sorted(after.items()):
        label = part == "labels"
        what = f"label {key}" if label else f"annotation {key}"
        kubectl = "label" if label else "annotate"
        reads = (
            "a heal.disposableClaims entry covering this claim reads it"
            if label
            else "heal releases a claim so marked"
        )
        if before.get((part, key)) != value:
            was = _label(old, key) if label else (_annotation(old, key) or None)
            how = _how(was, value)
            why = (
                f"{ref.display()} has {what} {how} from a deploy: heal may lose a claim's data on "
                "that mark, and a deploy (a speculative one included) may not decide that"
            )
        else:
            gained = hand_owners(new_writers.get((part, key), ()), trusted) - hand_owners(
                old_writers.get((part, key), ()), trusted
            )
            if not gained:
                continue
            how = f'now owned by {", ".join(sorted(gained))} in managedFields (value "{value}")'
            why = (
                f"{ref.display()} has {what} {how} from a deploy: managedFields are what "
                "unattended heal reads to tell a person's mark from a deployer's, and a deploy "
                "may not rewrite them"
            )
        yield Finding(
            code=Code.GUARD_TAMPERED,
            ref=ref,
            message=why,
            evidence=(
                f'{what}: "{value}" ({reads})',
                f"cause: {cause}",
            ),
            remediation=f"keep {what} out of the manifest (and managedFields out of every "
            "manifest); if the claim's data may go, a person marks it by hand "
            f"(kubectl {kubectl} {ref.kubectl()} {key}={value}) or names it in the policy's "
            "heal.disposableClaims by namespace and name",
            actions=(
                edit(f"remove {what} (and any metadata.managedFields) from the manifest"),
                command(f"kubectl {kubectl} {ref.kubectl()} {key}={value}"),
            ),
            api_version=str(new.get("apiVersion") or ""),
        )


def change_findings(
    ref: ObjectRef,
    old: dict[str, Any],
    new: dict[str, Any],
    policy: Policy,
    cause: str,
    *,
    guarded: bool,
    created: bool = False,
    retired: bool | None = None,
    unretired: str = "",
) -> list[Finding]:
    """Every finding of one change, in both doors: the webhook's UPDATE or CREATE (`oldObject`
    against `object`), `gate check`'s object in base and candidate. `guarded` is the door's own
    answer for the kind (the webhook's guarded kinds, or the gate's). A `created` object (`old`
    empty) is not judged for a StatefulSet's retention or a volume's reclaim policy: a new
    StatefulSet's claims and a new volume's data are new. `retired` and `unretired` are stage 1
    as the caller reads it (default: the retire mark on `old`). The speculation fence is the
    webhook's part (`webhook.updates`)."""
    found: list[Finding] = []
    if guarded:
        found.extend(
            owner_references_added(
                ref, old, new, policy, cause, retired=retired, unretired=unretired
            )
        )
        found.extend(override_in_manifest(ref, old, new, policy, cause))
        found.extend(disposable_marks_added(ref, old, new, policy, cause))
        if not created:  # a new object out of the selector was never in sight
            found.extend(protected_label_changes(ref, old, new, policy, cause))
    if not created:
        found.extend(retention_deletes_claims(ref, old, new, policy, cause))
        found.extend(reclaim_switched_to_delete(ref, old, new, policy, cause))
    return found
