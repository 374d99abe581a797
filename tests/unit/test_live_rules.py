"""Rules that read the live view, fed by a LiveState built from raw API objects."""

from __future__ import annotations

from typing import Any

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.livestate import LiveState
from gate.engine.plan import Action, Change
from gate.engine.policy import Policy
from gate.engine.verdict import Verdict
from gate.model.findings import Code, Severity
from gate.model.liveview import LiveView
from gate.model.refs import ObjectRef
from tests.unit.helpers import TODAY, claim, codes, deployment, doc, live_pod, live_workload, run

GUARDED = Policy().guarded_kinds


def live_claim(name: str = "data", volume: str | None = "pv-1", **ann: str) -> dict[str, Any]:
    spec = {"volumeName": volume} if volume else {}
    return {"metadata": {"name": name, "namespace": "app", "annotations": ann}, "spec": spec}


def state(*objs: tuple[str, str, dict[str, Any]]) -> LiveState:
    s = LiveState(GUARDED)
    for api_version, kind, obj in objs:
        s.upsert(obj, api_version, kind)
    return s


def test_livestate_is_a_liveview() -> None:
    view: LiveView = LiveState()
    assert view.get(ObjectRef("", "Pod", "a", "b")) is None


def test_claim_mounted_by_scheduled_pod() -> None:
    live = state(
        ("v1", "PersistentVolumeClaim", live_claim()), ("v1", "Pod", live_pod("web-1", "data"))
    )
    result = run(claim(), "", live=live)
    assert codes(result) == {Code.CLAIM_MOUNTED, Code.NOT_RETIRED}
    f = next(f for f in result.decision.findings if f.code is Code.CLAIM_MOUNTED)
    assert "pod web-1 on node n1" in f.message
    assert "pod app/web-1 on node n1 (Running" in f.evidence[0]


def test_unscheduled_pod_does_not_pin_but_finished_pod_does() -> None:
    live = state(("v1", "Pod", live_pod("p", "data", node="")))
    assert Code.CLAIM_MOUNTED not in codes(run(claim(retire="x"), "", live=live))
    done = state(("v1", "Pod", live_pod("job-1", "data", phase="Succeeded")))
    result = run(claim(retire="x"), "", live=done)
    (f,) = result.decision.findings
    assert f.code is Code.CLAIM_MOUNTED
    assert "kubectl delete pod -n app job-1" in f.remediation


def test_ephemeral_claim_pinned_until_pod_shut_down() -> None:
    meta: dict[str, Any] = {"name": "w", "namespace": "app", "uid": "u1"}
    eph = {
        "metadata": meta,
        "spec": {"nodeName": "n1", "volumes": [{"name": "scratch", "ephemeral": {}}]},
        "status": {"phase": "Running"},
    }
    live = state(("v1", "Pod", eph))
    ephemeral_claim = claim(retire="x").replace("name: data", "name: w-scratch")
    assert codes(run(ephemeral_claim, "", live=live)) == {Code.CLAIM_MOUNTED}
    meta.update(deletionTimestamp="2026-12-02T10:00:00Z", deletionGracePeriodSeconds=0)
    live.upsert(eph, "v1", "Pod")
    assert run(ephemeral_claim, "", live=live).decision.verdict is Verdict.ALLOW


def test_pod_deleted_from_cache_unpins() -> None:
    live = state(("v1", "Pod", live_pod("web-1", "data")))
    live.delete(ObjectRef("", "Pod", "app", "web-1"))
    assert run(claim(retire="x"), "", live=live).decision.verdict is Verdict.ALLOW


def test_stage_1_needs_the_mark_on_base_and_live() -> None:
    retired_live = state(
        ("v1", "PersistentVolumeClaim", live_claim(**{"prune-gate.io/retire": "x"}))
    )
    assert Code.NOT_RETIRED not in codes(run(claim(retire="x"), "", live=retired_live))
    unretired_live = state(("v1", "PersistentVolumeClaim", live_claim()))
    merged_not_deployed = run(claim(retire="x"), "", live=unretired_live)
    f = next(f for f in merged_not_deployed.decision.findings if f.code is Code.NOT_RETIRED)
    assert "on the base branch but not on the live object" in f.evidence[1]
    assert Code.NOT_RETIRED not in codes(run(claim(retire="x"), ""))  # no live view: base


def test_live_mark_without_base_mark_does_not_count() -> None:
    """Attack 6: a retire mark that only a speculative deploy applied is live, not merged."""
    retired_live = state(
        ("v1", "PersistentVolumeClaim", live_claim(**{"prune-gate.io/retire": "x"}))
    )
    result = run(claim(), "", live=retired_live)
    f = next(f for f in result.decision.findings if f.code is Code.NOT_RETIRED)
    assert (
        "marked live but not on the base branch: a speculative deploy may have applied it"
        in (f.evidence[1])
    )
    pruned = check_pruned_claim(retired_live)  # declared nowhere: no base to carry the mark
    assert Code.NOT_RETIRED in codes(pruned)


def test_reclaim_delete_without_snapshot() -> None:
    pv = {"metadata": {"name": "pv-1"}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}
    live = state(
        ("v1", "PersistentVolumeClaim", live_claim(**{"prune-gate.io/retire": "x"})),
        ("v1", "PersistentVolume", pv),
    )
    result = run(claim(retire="x"), "", live=live)
    (f,) = result.decision.findings
    assert f.code is Code.RECLAIM_DELETE_LOSES_DATA
    assert f.severity is Severity.WARN  # retired on base and live: a warning
    assert "kubectl patch pv pv-1" in f.remediation
    live_only = run(claim(), "", live=live)  # marked live only: stage 1 does not count
    assert {f.severity for f in live_only.decision.findings} == {Severity.BLOCK}
    assert codes(live_only) == {Code.RECLAIM_DELETE_LOSES_DATA, Code.NOT_RETIRED}
    live.upsert(live_claim(), "v1", "PersistentVolumeClaim")  # not retired: a block
    blocked = run(claim(retire="x"), "", live=live)
    assert {f.severity for f in blocked.decision.findings} == {Severity.BLOCK}
    snap = {
        "metadata": {"name": "s1", "namespace": "app"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
        "status": {"readyToUse": True},
    }
    live.upsert(snap, "snapshot.storage.k8s.io/v1", "VolumeSnapshot")
    assert Code.RECLAIM_DELETE_LOSES_DATA not in codes(run(claim(), "", live=live))


def test_live_consumers_and_namespace_contents() -> None:
    deploy = live_workload("api")
    live = state(("apps/v1", "Deployment", deploy), ("v1", "PersistentVolumeClaim", live_claim()))
    result = run(claim(retire="x"), "", live=live)
    f = next(f for f in result.decision.findings if f.code is Code.CONSUMER_REMAINS)
    assert "live Deployment app/api" in f.evidence[0]
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n"
    assert Code.NAMESPACE_HOLDS_CLAIMS in codes(run(ns, "", live=live))


def test_already_terminating() -> None:
    terminating = live_claim(**{"prune-gate.io/retire": "x"})
    terminating["metadata"]["deletionTimestamp"] = "2026-12-01T09:00:00Z"
    terminating["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
    live = state(("v1", "PersistentVolumeClaim", terminating))
    result = run(claim(), claim(), live=live, context=Context.MERGED)
    (f,) = result.decision.findings
    assert f.code is Code.ALREADY_TERMINATING
    assert "kubernetes.io/pvc-protection" in f.evidence[1]


def check_pruned_claim(live: LiveState) -> CheckResult:
    """Check a deploy that prunes the live claim app/data, which no manifest declares."""
    pruned = Change(
        ObjectRef("", "PersistentVolumeClaim", "app", "data"), Action.DELETE, None, None, "pruned"
    )
    return check_objects(
        [],
        [],
        context=Context.MERGED,
        policy=Policy(),
        today=TODAY,
        live=live,
        extra_changes=[pruned],
    )


def test_keep_annotation_on_live_object_of_a_pruned_claim() -> None:
    live = state(("v1", "PersistentVolumeClaim", live_claim(**{"helm.sh/resource-policy": "keep"})))
    result = check_pruned_claim(live)
    assert codes(result) == {Code.ORPHANED_BY_KEEP}
    assert "the live object carries" in result.decision.findings[0].evidence[0]


def test_live_consumer_deleted_by_the_same_deploy_does_not_count() -> None:
    deploy = live_workload("web")
    live = state(
        ("apps/v1", "Deployment", deploy),
        ("v1", "PersistentVolumeClaim", live_claim(volume=None, **{"prune-gate.io/retire": "x"})),
    )
    both_removed = run(doc(claim(retire="x"), deployment()), "", live=live)
    assert Code.CONSUMER_REMAINS not in codes(both_removed)
    only_claim = run(doc(claim(retire="x"), deployment()), deployment(), live=live)
    assert Code.CONSUMER_REMAINS in codes(only_claim)


def test_pruned_object_takes_api_version_from_live() -> None:
    live = state(("v1", "PersistentVolumeClaim", live_claim(volume=None)))
    result = check_pruned_claim(live)
    (f,) = result.decision.findings
    assert (f.code, f.api_version) == (Code.NOT_RETIRED, "v1")


def test_claim_mounted_after_stage_1_says_to_stop_the_pods() -> None:
    live = state(
        ("v1", "PersistentVolumeClaim", live_claim(volume=None, **{"prune-gate.io/retire": "x"})),
        ("v1", "Pod", live_pod("web-1", "data")),
    )
    (f,) = run(claim(retire="x"), "", live=live).decision.findings
    assert f.code is Code.CLAIM_MOUNTED
    assert f.remediation.startswith("stage 1 is deployed")
    assert "kubectl delete pod -n app web-1" in f.remediation


# Fields the API server filled in: the candidate against the live claim -------------------------

FORCE = "kustomize.toolkit.fluxcd.io/force: enabled"


def _classed(manifest: str, cls: str) -> str:
    return manifest.replace("spec:\n", f"spec:\n  storageClassName: {cls}\n", 1)


def _live_classed(cls: str) -> LiveState:
    obj = live_claim()
    obj["spec"]["storageClassName"] = cls
    obj["spec"]["volumeMode"] = "Filesystem"
    return state(("v1", "PersistentVolumeClaim", obj))


def test_setting_a_class_the_server_filled_in_differently_is_a_forced_replacement() -> None:
    """The incident's second commit: base leaves the class unset (the default, `standard`, was
    filled in at creation); the candidate sets `fast` with Flux force on. Live, that is a
    delete and recreate of the claim, and its data goes."""
    base = claim(extra_ann=FORCE)
    result = run(base, _classed(base, "fast"), live=_live_classed("standard"))
    assert codes(result) == {Code.FORCED_REPLACEMENT, Code.NOT_RETIRED}
    f = next(f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT)
    assert "spec.storageClassName (standard live, filled in by the API server -> fast)" in f.message
    assert result.decision.verdict is Verdict.BLOCK


def test_setting_the_class_the_server_filled_in_is_no_change() -> None:
    base = claim(extra_ann=FORCE)
    result = run(base, _classed(base, "standard"), live=_live_classed("standard"))
    assert result.decision.verdict is Verdict.ALLOW


def test_without_force_a_different_filled_in_class_wedges_the_apply() -> None:
    result = run(claim(), _classed(claim(), "fast"), live=_live_classed("standard"))
    assert codes(result) == {Code.IMMUTABLE_FIELD_CHANGE}


def test_without_a_live_view_a_forced_unset_to_set_is_not_silently_allowed() -> None:
    base = claim(extra_ann=FORCE)
    result = run(base, _classed(base, "fast"))
    f = next(f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT)
    assert "the API server may have filled in another at creation" in f.message
    assert "--live" in f.message
    # Without force the apply can only fail, never delete: the unset -> set rule stands.
    assert run(claim(), _classed(claim(), "fast")).decision.verdict is Verdict.ALLOW


def test_an_unset_volume_mode_is_the_default_filesystem() -> None:
    with_mode = claim().replace("spec:\n", "spec:\n  volumeMode: Filesystem\n", 1)
    assert run(claim(), with_mode).decision.verdict is Verdict.ALLOW
    block = claim().replace("spec:\n", "spec:\n  volumeMode: Block\n", 1)
    assert codes(run(claim(), block)) == {Code.IMMUTABLE_FIELD_CHANGE}


def test_a_claim_not_yet_live_may_be_given_a_class() -> None:
    """With a live view that has no such claim, the deploy creates it: nothing was filled in."""
    base = claim(extra_ann=FORCE)
    assert run(base, _classed(base, "fast"), live=state()).decision.verdict is Verdict.ALLOW
