"""What a deleted claim's findings say about its data, and VOLUME_RETAINS_DATA: a claim whose
volume keeps the data (Retain, live or declared static) is a warning with the commands that bind
it again, not NOT_RETIRED; a Delete volume is said to lose it; the merge queue still defers."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from gate.engine.context import Context
from gate.engine.fence import fence_status
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.engine.verdict import Verdict
from gate.model.findings import Code, Finding, Severity
from gate.sources.policyfile import policy_from_dict
from tests.unit.helpers import claim, codes, doc, run
from webhook.decide import decide_admission
from webhook.review import parse_review

STATIC_PV = """\
apiVersion: v1
kind: PersistentVolume
metadata:
  name: nfs-data
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteMany]{policy}
  storageClassName: ""
  nfs: {{server: nas, path: /export/data}}
  claimRef: {{namespace: app, name: data}}
"""

CLASS = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
provisioner: ebs.csi.aws.com{policy}
"""

CLASSED_CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: app
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: fast
  resources: {requests: {storage: 10Gi}}
"""


def pv(policy: str | None = "Retain") -> str:
    return STATIC_PV.format(policy=f"\n  persistentVolumeReclaimPolicy: {policy}" if policy else "")


def live(policy: str, volume: str = "pvc-1", cls: str = "fast") -> LiveState:
    state = LiveState(Policy().guarded_kinds)
    state.upsert(
        {"metadata": {"name": "data", "namespace": "app"}, "spec": {"volumeName": volume}},
        "v1",
        "PersistentVolumeClaim",
    )
    state.upsert(
        {
            "metadata": {"name": volume},
            "spec": {"persistentVolumeReclaimPolicy": policy, "storageClassName": cls},
        },
        "v1",
        "PersistentVolume",
    )
    return state


def one(findings: tuple[Finding, ...] | list[Finding], code: Code) -> Finding:
    (found,) = [f for f in findings if f.code is code]
    return found


def data_line(f: Finding) -> str:
    (line,) = [e for e in f.evidence if e.startswith("data: ")]
    return line


# ------------------------------------------------------------------------------ the data line


def test_a_static_retain_volume_keeps_the_data_and_only_warns() -> None:
    result = run(doc(pv(), claim()), pv(), context=Context.MERGED)
    assert codes(result) == {Code.VOLUME_RETAINS_DATA}
    f = one(result.decision.findings, Code.VOLUME_RETAINS_DATA)
    assert f.severity is Severity.WARN
    assert result.decision.verdict is Verdict.WARN
    assert "its data stays" in f.message and "Released" in f.message
    assert data_line(f) == (
        "data: PersistentVolume nfs-data (declared at head.yaml:1), reclaimPolicy Retain: "
        "the data stays in the volume, Released"
    )


def test_the_fix_clears_the_old_uid_and_recreates_the_claim_bound_to_the_volume() -> None:
    result = run(doc(pv(), claim()), pv(), context=Context.MERGED)
    f = one(result.decision.findings, Code.VOLUME_RETAINS_DATA)
    get, patch = f.commands()
    assert get == "kubectl get pv nfs-data"
    assert patch == (
        'kubectl patch pv nfs-data -p \'{"spec":{"claimRef":{"uid":null,"resourceVersion":null}}}\''
    )
    restore = f.actions[2]
    assert restore.runner.value == "ci"  # a claim is the repository's to declare
    assert 'spec.volumeName: nfs-data and spec.storageClassName: ""' in restore.text
    body = json.loads(by_hand(f))
    assert body["metadata"] == {"name": "data", "namespace": "app"}
    assert body["spec"]["volumeName"] == "nfs-data"
    assert body["spec"]["storageClassName"] == ""  # the class-less volume's: it must match
    assert body["spec"]["accessModes"] == ["ReadWriteOnce"]  # as base declared the claim
    assert body["spec"]["resources"] == {"requests": {"storage": "10Gi"}}
    assert patch in f.remediation and "kubectl delete pv nfs-data" in f.remediation


def by_hand(f: Finding) -> str:
    """The claim the fix's prose re-creates by hand (`echo '...' | kubectl create -f -`)."""
    return f.remediation.split("echo '", 1)[1].split("' | kubectl create -f -", 1)[0]


def test_a_volume_without_a_policy_is_retain_as_the_api_server_defaults_it() -> None:
    result = run(doc(pv(None), claim()), pv(None), context=Context.MERGED)
    f = one(result.decision.findings, Code.VOLUME_RETAINS_DATA)
    assert "reclaimPolicy Retain (the default)" in data_line(f)


def test_a_static_delete_volume_blocks_and_says_the_data_goes() -> None:
    result = run(doc(pv("Delete"), claim()), pv("Delete"), context=Context.MERGED)
    f = one(result.decision.findings, Code.NOT_RETIRED)
    assert f.severity is Severity.BLOCK
    assert data_line(f).endswith(
        "reclaimPolicy Delete: the volume and its data are deleted with the claim"
    )


def test_a_retain_volume_removed_with_its_claim_is_not_kept() -> None:
    result = run(doc(pv(), claim()), "", context=Context.MERGED)
    claims = [f for f in result.decision.findings if f.ref.kind == "PersistentVolumeClaim"]
    f = one(claims, Code.NOT_RETIRED)
    assert "this deploy deletes the PersistentVolume too" in data_line(f)
    assert Code.VOLUME_RETAINS_DATA not in codes(result)


def test_a_claim_naming_its_volume_by_spec_volume_name_finds_it() -> None:
    named = claim().replace("spec:\n", "spec:\n  volumeName: nfs-data\n  storageClassName: ''\n")
    unbound_pv = pv().replace("  claimRef: {namespace: app, name: data}\n", "")
    result = run(doc(unbound_pv, named), unbound_pv, context=Context.MERGED)
    assert codes(result) == {Code.VOLUME_RETAINS_DATA}


def test_the_storage_class_says_what_a_provisioned_volume_gets() -> None:
    result = run(doc(CLASS.format(policy=""), CLASSED_CLAIM), CLASS.format(policy=""))
    line = data_line(one(result.decision.findings, Code.NOT_RETIRED))
    assert (
        "StorageClass fast (declared at base.yaml:1) has reclaimPolicy Delete (the default)" in line
    )
    assert "deleted, data and all," in line
    retain = CLASS.format(policy="\nreclaimPolicy: Retain")
    result = run(doc(retain, CLASSED_CLAIM), retain, context=Context.MERGED)
    # a class's Retain is not the volume's: it may have been patched since; still NOT_RETIRED
    line = data_line(one(result.decision.findings, Code.NOT_RETIRED))
    assert "reclaimPolicy Retain: a volume it provisioned is kept, Released," in line


def test_nothing_known_says_what_a_provisioned_claim_usually_gets() -> None:
    line = data_line(one(run(claim(), "").decision.findings, Code.NOT_RETIRED))
    assert line.startswith("data: not known")
    assert "StorageClass's reclaimPolicy, Delete by default" in line
    assert line.endswith("--live reads the bound volume's")


# ------------------------------------------------------------------------------ live


def test_live_retain_wins_over_what_is_declared() -> None:
    result = run(claim(), "", context=Context.MERGED, live=live("Retain"))
    f = one(result.decision.findings, Code.VOLUME_RETAINS_DATA)
    assert data_line(f) == (
        "data: PersistentVolume pvc-1 (live), reclaimPolicy Retain: the data stays in the "
        "volume, Released"
    )
    assert '"storageClassName":"fast","volumeName":"pvc-1"' in by_hand(f)  # the live volume's


def test_live_delete_keeps_not_retired_and_says_the_data_goes() -> None:
    result = run(doc(pv(), claim()), pv(), context=Context.MERGED, live=live("Delete"))
    f = one(result.decision.findings, Code.NOT_RETIRED)
    assert data_line(f) == (
        "data: PersistentVolume pvc-1 (live), reclaimPolicy Delete: the volume and its data "
        "are deleted with the claim"
    )
    assert Code.RECLAIM_DELETE_LOSES_DATA in codes(result)


def test_a_live_claim_bound_to_nothing_holds_no_data() -> None:
    state = LiveState(Policy().guarded_kinds)
    state.upsert({"metadata": {"name": "data", "namespace": "app"}}, "v1", "PersistentVolumeClaim")
    f = one(run(claim(), "", live=state).decision.findings, Code.NOT_RETIRED)
    assert data_line(f) == "data: none: the live claim is bound to no volume"


def test_a_retired_claim_is_neither() -> None:
    result = run(claim(retire="moved"), "", context=Context.MERGED, live=None)
    assert codes(result) == set()


# ------------------------------------------------------------------------------ the merge queue


def test_the_merge_queue_still_defers_a_retained_claim() -> None:
    result = run(doc(pv(), claim()), pv(), context=Context.SPECULATIVE)
    assert result.decision.verdict is Verdict.DEFER
    assert codes(result) == {Code.SPECULATIVE_PRUNE, Code.VOLUME_RETAINS_DATA}
    f = one(result.decision.findings, Code.SPECULATIVE_PRUNE)
    assert any("a new claim does not bind the Released volume nfs-data" in e for e in f.evidence)
    assert data_line(f).startswith("data: PersistentVolume nfs-data")


def test_the_policy_can_make_retained_data_block() -> None:
    policy = policy_from_dict({"severity": {"VOLUME_RETAINS_DATA": "block"}})
    result = run(doc(pv(), claim()), pv(), context=Context.MERGED, policy=policy)
    assert result.decision.verdict is Verdict.BLOCK


# ------------------------------------------------------------------------------ the webhook

FLUX = "system:serviceaccount:flux-system:kustomize-controller"


def _deployer_delete(policy_name: str) -> tuple[bool, str]:
    policy = policy_from_dict({"webhook": {"deployers": [FLUX]}})
    old: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "app", "uid": "u"},
        "spec": {"volumeName": "pvc-1"},
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r-1",
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "operation": "DELETE",
            "name": "data",
            "namespace": "app",
            "userInfo": {"username": FLUX, "groups": []},
            "oldObject": old,
        },
    }
    state = live(policy_name)
    now = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)
    req = parse_review(json.dumps(review).encode())
    outcome = decide_admission(req, policy, state, fence_status(None, now), now.date())
    status = outcome.response.status
    return outcome.response.allowed, (status.reason if status else "")


def test_the_webhook_answers_as_gate_check_does() -> None:
    # gate check warns on a live Retain volume, so the deployer's prune must pass the webhook
    # too (a refusal there would wedge the deploy gate check let through); a Delete one refuses.
    assert _deployer_delete("Retain") == (True, "")
    assert _deployer_delete("Delete") == (False, "NOT_RETIRED")
