"""The webhook's decisions on the bypasses of issue 8: identity, UPDATEs that delete by proxy,
and DELETEs by the garbage collector and the StatefulSet controller."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from gate.engine.fence import FenceStatus, Lease, fence_status
from gate.engine.livestate import LiveState
from gate.sources.policyfile import policy_from_dict
from webhook.decide import decide_admission, ref_of_request
from webhook.identity import GARBAGE_COLLECTOR, STATEFULSET_CONTROLLER
from webhook.outcome import Outcome
from webhook.review import parse_review

NOW = dt.datetime(2026, 12, 3, 7, 0, tzinfo=dt.UTC)
FLUX = "system:serviceaccount:flux-system:kustomize-controller"
POLICY = policy_from_dict({"webhook": {"deployers": [FLUX], "breakGlassGroups": ["sre"]}})
RETIRE = "prune-gate.io/retire"
ALLOW = "prune-gate.io/allow-delete"
FREE = fence_status(None, NOW)
HELD = fence_status(
    Lease("prune-gate", "fence", "3f2c9a1", NOW - dt.timedelta(seconds=10), 300), NOW
)


def claim(
    name: str = "data",
    owners: list[dict[str, Any]] | None = None,
    ann: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "app",
        "uid": f"uid-{name}",
        "annotations": ann or {},
    }
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": {}}


def sts(
    when_scaled: str | None = None, when_deleted: str | None = None, templates: bool = True
) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 2}
    retention = {k: v for k, v in (("whenScaled", when_scaled), ("whenDeleted", when_deleted)) if v}
    if retention:
        spec["persistentVolumeClaimRetentionPolicy"] = retention
    if templates:
        spec["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": {}}]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "app", "uid": "uid-db"},
        "spec": spec,
    }


def pod(name: str, claim_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "app", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": "n1",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
        "status": {"phase": "Running"},
    }


OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "bait", "uid": "uid-bait"}


def request(
    operation: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None = None,
    user: str = FLUX,
    name: str | None = None,
    groups: tuple[str, ...] = (),
) -> dict[str, Any]:
    some = old or new or {}
    group, _, version = str(some.get("apiVersion", "v1")).rpartition("/")
    req: dict[str, Any] = {
        "uid": "u-1",
        "kind": {
            "group": group,
            "version": version,
            "kind": some.get("kind", "PersistentVolumeClaim"),
        },
        "operation": operation,
        "name": (some.get("metadata") or {}).get("name", "") if name is None else name,
        "namespace": "app",
        "userInfo": {"username": user, "groups": list(groups)},
    }
    if old is not None:
        req["oldObject"] = old
    if new is not None:
        req["object"] = new
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def decide(doc: dict[str, Any], *live: dict[str, Any], fence: FenceStatus = FREE) -> Outcome:
    state = LiveState(POLICY.guarded_kinds)
    for o in live:
        state.upsert(o)
    req = parse_review(json.dumps(doc).encode())
    return decide_admission(req, POLICY, state, fence, NOW.date())


def refused(outcome: Outcome) -> str:
    assert not outcome.response.allowed, outcome
    assert outcome.response.status is not None
    return outcome.response.status.reason


# ------------------------------------------------------------------ identity (attack 1)


def test_collection_delete_takes_the_name_from_old_object() -> None:
    doc = request("DELETE", claim(), user="kubernetes-admin", name="")
    ref = ref_of_request(parse_review(json.dumps(doc).encode()))
    assert (ref.namespace, ref.name) == ("app", "data")
    outcome = decide(doc, claim(), pod("web-0", "data"))
    assert refused(outcome) == "CLAIM_MOUNTED"
    assert "pod web-0" in outcome.response.status.message  # type: ignore[union-attr]


def test_collection_delete_of_an_unmounted_claim_by_a_person_is_allowed() -> None:
    assert decide(
        request("DELETE", claim(), user="kubernetes-admin", name=""), claim()
    ).response.allowed


def test_a_delete_with_no_name_anywhere_is_refused() -> None:
    doc = request("DELETE", None, user="kubernetes-admin", name="")
    doc["request"]["kind"] = {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"}
    outcome = decide(doc)
    assert refused(outcome) == "UNIDENTIFIED_OBJECT"
    assert "one at a time by name" in outcome.response.status.message  # type: ignore[union-attr]


def test_an_unguarded_kind_without_a_name_is_not_refused() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "app"}}
    assert decide(request("DELETE", cm, user="kubernetes-admin", name="")).response.allowed


# ------------------------------------------------------ deployer UPDATEs (attacks 2 and 6)


def test_deployer_adding_an_owner_reference_to_a_claim_is_refused() -> None:
    outcome = decide(request("UPDATE", claim(), claim(owners=[OWNER])))
    assert refused(outcome) == "OWNER_REFERENCE_ADDED"
    assert "ConfigMap bait" in outcome.response.status.message  # type: ignore[union-attr]
    assert [e.reason for e in outcome.events] == ["PruneBlocked"]


def test_owner_reference_on_a_retired_claim_or_unchanged_is_allowed() -> None:
    retired_old, retired_new = (
        claim(ann={RETIRE: "moved"}),
        claim(owners=[OWNER], ann={RETIRE: "moved"}),
    )
    assert decide(request("UPDATE", retired_old, retired_new)).response.allowed
    same = claim(owners=[OWNER])
    assert decide(request("UPDATE", same, claim(owners=[OWNER], ann={"x": "y"}))).response.allowed


def test_a_controller_adding_an_owner_reference_is_allowed_and_noted() -> None:
    pod_owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "db-1",
        "uid": "uid-db-1",
        "controller": True,
    }
    outcome = decide(
        request("UPDATE", claim(), claim(owners=[pod_owner]), user=STATEFULSET_CONTROLLER)
    )
    assert outcome.response.allowed
    assert outcome.code == "OWNER_REFERENCE_ADDED"  # logged, not refused


@pytest.mark.parametrize("field", ["whenScaled", "whenDeleted"])
def test_deployer_switching_retention_to_delete_is_refused(field: str) -> None:
    new = sts(when_scaled="Delete") if field == "whenScaled" else sts(when_deleted="Delete")
    outcome = decide(request("UPDATE", sts(), new))
    assert refused(outcome) == "RETENTION_DELETES_CLAIMS"
    assert f"{field} from Retain to Delete" in outcome.response.status.message  # type: ignore[union-attr]


def test_retention_unchanged_or_without_templates_is_allowed() -> None:
    already = sts(when_scaled="Delete")
    assert decide(request("UPDATE", already, sts(when_scaled="Delete"))).response.allowed
    bare = sts(templates=False)
    assert decide(
        request("UPDATE", bare, sts(when_scaled="Delete", templates=False))
    ).response.allowed
    assert decide(
        request("UPDATE", sts(), sts(when_scaled="Delete"), user="alice")
    ).response.allowed


def test_deployer_retire_mark_under_a_held_fence_is_refused() -> None:
    doc = request("UPDATE", claim(), claim(ann={RETIRE: "moved"}))
    assert refused(decide(doc, fence=HELD)) == "SPECULATION_FENCE"
    assert decide(doc).response.allowed  # no fence: the merged deploy applies stage 1
    person = request("UPDATE", claim(), claim(ann={RETIRE: "moved"}), user="alice")
    assert decide(person, fence=HELD).response.allowed


def test_deployer_adding_the_override_is_refused() -> None:
    outcome = decide(request("UPDATE", claim(), claim(ann={ALLOW: "please"})))
    assert refused(outcome) == "OVERRIDE_IN_MANIFEST"
    kept = claim(ann={ALLOW: "by hand"})
    assert decide(request("UPDATE", kept, claim(ann={ALLOW: "by hand"}))).response.allowed


def _namespace(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app", **meta}}


def test_a_namespaces_finalize_update_is_judged_as_the_update_it_is() -> None:
    """A Namespace's /finalize keeps metadata changes (seen on a v1.34 API server): a deployer
    that adds an owner there has the garbage collector delete the namespace, and everything in
    it; with the override too, that DELETE would pass. It is judged as an UPDATE now."""
    owner = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "name": "gone", "uid": "0f0f0f0f"}]  # fmt: skip
    through_finalize = request("UPDATE", _namespace(), _namespace(ownerReferences=owner))
    through_finalize["request"]["subResource"] = "finalize"
    assert refused(decide(through_finalize)) == "OWNER_REFERENCE_ADDED"
    override = request("UPDATE", _namespace(), _namespace(annotations={ALLOW: "please"}))
    override["request"]["subResource"] = "finalize"
    assert refused(decide(override)) == "OVERRIDE_IN_MANIFEST"
    # Other subresources (none registered) are let through as before.
    override["request"]["subResource"] = "scale"
    assert decide(override).response.allowed


def test_the_override_is_not_honoured_for_a_deployer_delete() -> None:
    marked = claim(ann={ALLOW: "slipped in"})
    assert refused(decide(request("DELETE", marked), marked)) == "NOT_RETIRED"
    person = decide(request("DELETE", marked, user="alice"), marked, pod("web-0", "data"))
    assert person.response.allowed and person.overridden_by is not None


# ------------------------------------------------- cascades (garbage collector, StatefulSet)


@pytest.mark.parametrize("user", [GARBAGE_COLLECTOR, STATEFULSET_CONTROLLER])
def test_controller_delete_of_an_unretired_claim_is_refused(user: str) -> None:
    outcome = decide(request("DELETE", claim(owners=[OWNER]), user=user), claim())
    assert refused(outcome) == "NOT_RETIRED"
    assert any(user in e for f in outcome.findings for e in f.evidence)


def test_controller_delete_of_a_retired_unused_claim_is_allowed() -> None:
    retired = claim(ann={RETIRE: "moved"})
    assert decide(request("DELETE", retired, user=GARBAGE_COLLECTOR), retired).response.allowed


def test_controller_delete_waits_for_a_held_fence_and_honours_a_persons_override() -> None:
    retired = claim(ann={RETIRE: "moved"})
    held = decide(request("DELETE", retired, user=GARBAGE_COLLECTOR), retired, fence=HELD)
    assert refused(held) == "SPECULATION_FENCE"
    overridden = claim(ann={ALLOW: "operator: cascade wanted"})
    outcome = decide(request("DELETE", overridden, user=GARBAGE_COLLECTOR), overridden)
    assert outcome.response.allowed and outcome.overridden_by is not None


# ------------------------------------------ CREATEs that split an UPDATE's bypass in two calls


def test_deployer_creating_a_claim_with_the_override_is_refused() -> None:
    """A claim created with the override and an owner: the garbage collector's DELETE honours
    the override once the owner goes, so the deployer may not create it so."""
    outcome = decide(request("CREATE", None, claim(owners=[OWNER], ann={ALLOW: "x"})))
    assert refused(outcome) in {"OWNER_REFERENCE_ADDED", "OVERRIDE_IN_MANIFEST"}
    assert {f.code.value for f in outcome.findings} == {
        "OWNER_REFERENCE_ADDED",
        "OVERRIDE_IN_MANIFEST",
    }
    assert refused(decide(request("CREATE", None, claim(ann={ALLOW: "x"})))) == (
        "OVERRIDE_IN_MANIFEST"
    )
    assert refused(decide(request("CREATE", None, claim(owners=[OWNER])))) == (
        "OWNER_REFERENCE_ADDED"
    )


def test_creates_without_what_is_judged_or_by_others_are_allowed() -> None:
    assert decide(request("CREATE", None, claim())).response.allowed
    assert decide(request("CREATE", None, claim(ann={RETIRE: "moved"}))).response.allowed
    controller = request("CREATE", None, claim(owners=[OWNER]), user=STATEFULSET_CONTROLLER)
    noted = decide(controller)
    assert noted.response.allowed and [f.code.value for f in noted.findings] == [
        "OWNER_REFERENCE_ADDED"
    ]
    # A StatefulSet is not judged at CREATE: claims it adopts go only by a decided GC DELETE.
    assert decide(request("CREATE", None, sts(when_deleted="Delete"))).response.allowed


def test_create_with_the_retire_mark_under_a_held_fence_is_refused() -> None:
    doc = request("CREATE", None, claim(ann={RETIRE: "moved"}))
    assert refused(decide(doc, fence=HELD)) == "SPECULATION_FENCE"


def test_create_with_generate_name_is_judged_not_refused_as_unidentified() -> None:
    body = claim(ann={ALLOW: "x"})
    body["metadata"]["name"] = ""
    body["metadata"]["generateName"] = "data-"
    outcome = decide(request("CREATE", None, body, name=""))
    assert refused(outcome) == "OVERRIDE_IN_MANIFEST"
    assert "data-<generated>" in outcome.findings[0].message
    plain = claim()
    plain["metadata"]["name"] = ""
    assert decide(request("CREATE", None, plain, name="")).response.allowed


# ------------------------------------------ relabelling out of the webhook's objectSelector

LABELLED = policy_from_dict(
    {"webhook": {"deployers": [FLUX], "protectedLabels": ["prune-gate.io/guard"]}}
)


def labelled(value: str | None) -> dict[str, Any]:
    body = claim()
    if value is not None:
        body["metadata"]["labels"] = {"prune-gate.io/guard": value, "tier": "db"}
    return body


def _decide(doc: dict[str, Any], policy: Any = LABELLED) -> Outcome:
    req = parse_review(json.dumps(doc).encode())
    return decide_admission(req, policy, LiveState(policy.guarded_kinds), FREE, NOW.date())


@pytest.mark.parametrize(("was", "now"), [("true", None), ("true", "false"), (None, "true")])
def test_deployer_changing_a_protected_label_is_refused(was: str | None, now: str | None) -> None:
    outcome = _decide(request("UPDATE", labelled(was), labelled(now)))
    assert refused(outcome) == "GUARD_TAMPERED"
    assert "prune-gate.io/guard" in outcome.findings[0].message


def test_other_labels_and_other_users_may_relabel() -> None:
    other = labelled("true")
    other["metadata"]["labels"]["tier"] = "cache"
    assert _decide(request("UPDATE", labelled("true"), other)).response.allowed
    person = request("UPDATE", labelled("true"), labelled(None), user="alice")
    assert _decide(person).response.allowed
    # Without protected labels in the policy, nothing about labels is judged.
    assert _decide(request("UPDATE", labelled("true"), labelled(None)), POLICY).response.allowed


# ------------------------------------------------ a volume's reclaim policy switched to Delete


def volume(reclaim: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "hostPath": {"path": "/data"},
        "claimRef": {"namespace": "app", "name": "data"},
    }
    if reclaim is not None:
        spec["persistentVolumeReclaimPolicy"] = reclaim
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-1"},
        "spec": spec,
    }


@pytest.mark.parametrize("was", ["Retain", "Recycle", None])
def test_deployer_switching_a_volume_to_reclaim_delete_is_refused(was: str | None) -> None:
    outcome = decide(request("UPDATE", volume(was), volume("Delete")))
    assert refused(outcome) == "RECLAIM_SWITCHED_TO_DELETE"
    assert "bound to claim app/data" in outcome.findings[0].evidence


def test_reclaim_unchanged_or_by_a_person_is_allowed() -> None:
    assert decide(request("UPDATE", volume("Delete"), volume("Delete"))).response.allowed
    assert decide(request("UPDATE", volume("Delete"), volume("Retain"))).response.allowed
    person = request("UPDATE", volume("Retain"), volume("Delete"), user="alice")
    assert decide(person).response.allowed


# ------------------------------------------------ exemptions leave a trace (issue 9, item 7)

EXEMPT = policy_from_dict(
    {
        "webhook": {"deployers": [FLUX]},
        "exemptions": [
            {
                "kind": "PersistentVolumeClaim",
                "namespace": "app",
                "labels": {"tier": "scratch"},
                "reason": "INC-42 scratch claims",
                "expires": "2027-01-31",
            }
        ],
    }
)


def scratch(**extra: Any) -> dict[str, Any]:
    obj = claim(**extra)
    obj["metadata"]["labels"] = {"tier": "scratch"}
    return obj


def _decide_exempt(doc: dict[str, Any], *live: dict[str, Any]) -> Outcome:
    state = LiveState(EXEMPT.guarded_kinds)
    for o in live:
        state.upsert(o)
    return decide_admission(parse_review(json.dumps(doc).encode()), EXEMPT, state, FREE, NOW.date())


def test_an_exempted_refusal_is_allowed_with_a_warning_and_a_prune_exempted_event() -> None:
    outcome = _decide_exempt(request("DELETE", scratch()), scratch(), pod("web-0", "data"))
    assert outcome.response.allowed
    assert outcome.overridden_by is None
    assert {e.finding.code.value for e in outcome.exempted} == {"CLAIM_MOUNTED", "NOT_RETIRED"}
    assert outcome.code in {"CLAIM_MOUNTED", "NOT_RETIRED"}
    (warning, *_rest) = outcome.response.warnings
    assert warning.startswith("prune-gate: allowed by policy exemption ('INC-42 scratch claims'")
    assert "expires 2027-01-31" in warning
    (event,) = outcome.events
    assert event.reason == "PruneExempted"
    assert event.ref.name == "data" and event.uid == "uid-data"
    assert "INC-42 scratch claims" in event.message and event.message.endswith(f"by {FLUX}")


def test_an_exemption_that_silences_no_refusal_leaves_no_event() -> None:
    unlabelled = _decide_exempt(request("DELETE", claim()), claim(), pod("web-0", "data"))
    assert refused(unlabelled) == "CLAIM_MOUNTED"
    assert "PruneExempted" not in [e.reason for e in unlabelled.events]
    quiet = _decide_exempt(request("DELETE", scratch(), user="alice"), scratch())
    assert quiet.response.allowed and not quiet.exempted and not quiet.events
    assert quiet.code == "none"


def test_an_exempted_deployer_update_is_allowed_with_a_trace() -> None:
    outcome = _decide_exempt(request("UPDATE", scratch(), scratch(owners=[OWNER])))
    assert outcome.response.allowed
    assert outcome.code == "OWNER_REFERENCE_ADDED"
    assert [e.reason for e in outcome.events] == ["PruneExempted"]
    assert outcome.response.warnings[0].startswith("prune-gate: allowed by policy exemption")
