"""One test group per rule: the case that fires, and the nearest case that must not."""

from __future__ import annotations

import datetime as dt

from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.engine.verdict import Verdict
from gate.model.findings import Code, Severity
from gate.sources.policyfile import policy_from_dict
from tests.unit.helpers import claim, codes, deployment, doc, run

NS = "apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n"

# A StatefulSet app/db; append more of its spec, indented two spaces.
STATEFULSET = """\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: app}
spec:
  selector: {matchLabels: {a: b}}
  serviceName: db
  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: x}]}}
"""


def test_unchanged_side_is_allowed() -> None:
    result = run(doc(claim(), deployment()), doc(claim(), deployment()))
    assert result.decision.verdict is Verdict.ALLOW
    assert result.decision.findings == ()


# NOT_RETIRED ------------------------------------------------------------------------------------


def test_removed_claim_not_retired_blocks_with_fix() -> None:
    result = run(claim(), "")
    (f,) = result.decision.findings
    assert f.code is Code.NOT_RETIRED
    assert f.severity is Severity.BLOCK
    assert f.ref.display() == "PersistentVolumeClaim app/data"
    assert f.source is not None and str(f.source) == "base.yaml:1"
    assert "prune-gate.io/retire" in f.remediation
    assert result.decision.verdict is Verdict.BLOCK


def test_removed_claim_retired_in_base_is_allowed() -> None:
    result = run(claim(retire="moved to S3"), "")
    assert Code.NOT_RETIRED not in codes(result)
    assert result.decision.verdict is Verdict.ALLOW


def test_removed_configmap_is_not_guarded() -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: app}\n"
    assert run(cm, "").decision.verdict is Verdict.ALLOW


def test_custom_annotation_name_from_policy() -> None:
    policy = policy_from_dict({"annotations": {"retire": "example.com/retire"}})
    retired = claim(extra_ann='example.com/retire: "yes"')
    assert Code.NOT_RETIRED not in codes(run(retired, "", policy=policy))
    assert Code.NOT_RETIRED in codes(run(claim(retire="x"), "", policy=policy))


# SPECULATIVE_PRUNE ------------------------------------------------------------------------------


def test_speculative_prune_defers_even_when_retired() -> None:
    result = run(claim(retire="done"), "", context=Context.SPECULATIVE)
    (f,) = result.decision.findings
    assert f.code is Code.SPECULATIVE_PRUNE
    assert f.severity is Severity.DEFER
    assert result.decision.verdict is Verdict.DEFER
    assert result.decision.verdict.exit_code == 1


def test_speculative_context_only() -> None:
    assert Code.SPECULATIVE_PRUNE not in codes(
        run(claim(retire="done"), "", context=Context.MERGED)
    )


# CONSUMER_REMAINS -------------------------------------------------------------------------------


def test_removed_claim_still_mounted_by_template() -> None:
    result = run(doc(claim(), deployment()), deployment())
    consumer = [f for f in result.decision.findings if f.code is Code.CONSUMER_REMAINS]
    assert len(consumer) == 1
    assert "Deployment app/web" in consumer[0].evidence[0]
    assert "head.yaml:1" in consumer[0].evidence[0]


def test_retiring_claim_with_consumer_is_stage1_incomplete() -> None:
    result = run(doc(claim(), deployment()), doc(claim(retire="bye"), deployment()))
    assert codes(result) == {Code.CONSUMER_REMAINS}


def test_retiring_claim_without_consumer_is_fine() -> None:
    result = run(doc(claim(), deployment()), doc(claim(retire="bye"), deployment("other")))
    assert result.decision.verdict is Verdict.ALLOW


def test_cronjob_and_statefulset_templates_count_as_consumers() -> None:
    cron = """\
apiVersion: batch/v1
kind: CronJob
metadata: {name: backup, namespace: app}
spec:
  schedule: "@daily"
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: b, image: busybox}]
          volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
"""
    assert Code.CONSUMER_REMAINS in codes(run(doc(claim(), cron), cron))
    sts = STATEFULSET + "  volumeClaimTemplates:\n    - metadata: {name: pgdata}\n"
    generated = claim().replace("name: data", "name: pgdata-db-0")
    assert Code.CONSUMER_REMAINS in codes(run(doc(generated, sts), sts))


def test_consumer_in_other_namespace_does_not_count() -> None:
    other = deployment().replace("namespace: app", "namespace: elsewhere")
    assert Code.CONSUMER_REMAINS not in codes(run(doc(claim(), other), other))


# IMMUTABLE_FIELD_CHANGE / FORCED_REPLACEMENT ----------------------------------------------------


def test_claim_shrink_is_immutable_change() -> None:
    result = run(claim("10Gi"), claim("5Gi"))
    (f,) = result.decision.findings
    assert f.code is Code.IMMUTABLE_FIELD_CHANGE
    assert "shrink" in f.message


def test_claim_growth_is_allowed() -> None:
    assert run(claim("10Gi"), claim("20Gi")).decision.verdict is Verdict.ALLOW
    assert run(claim("1Gi"), claim("1024Mi")).decision.verdict is Verdict.ALLOW


def test_claim_storage_class_unset_to_set_is_allowed_but_change_is_not() -> None:
    with_class = claim().replace("spec:\n", "spec:\n  storageClassName: fast\n")
    assert run(claim(), with_class).decision.verdict is Verdict.ALLOW
    other_class = with_class.replace("fast", "slow")
    assert codes(run(with_class, other_class)) == {Code.IMMUTABLE_FIELD_CHANGE}
    # `""` is a class, "none": the API server does not default it and refuses the change.
    no_class = with_class.replace("fast", '""')
    assert codes(run(no_class, with_class)) == {Code.IMMUTABLE_FIELD_CHANGE}


def test_access_mode_change_with_flux_force_is_forced_replacement() -> None:
    forced = claim(extra_ann="kustomize.toolkit.fluxcd.io/force: enabled")
    changed = forced.replace("ReadWriteOnce", "ReadWriteMany")
    result = run(forced, changed)
    assert codes(result) == {Code.FORCED_REPLACEMENT, Code.NOT_RETIRED}
    f = next(f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT)
    assert "spec.accessModes" in f.message
    not_retired = next(f for f in result.decision.findings if f.code is Code.NOT_RETIRED)
    assert "force-replaced" in not_retired.message
    assert not_retired.remediation.startswith("revert the change to spec.accessModes")


def test_argo_replace_and_cli_force() -> None:
    argo = claim(extra_ann='argocd.argoproj.io/sync-options: "ServerSideApply=true,Replace=true"')
    assert Code.FORCED_REPLACEMENT in codes(run(argo, argo.replace("10Gi", "1Gi")))
    plain = claim()
    assert Code.FORCED_REPLACEMENT in codes(run(plain, plain.replace("10Gi", "1Gi"), force=True))


def test_statefulset_volume_claim_template_change() -> None:
    sts = STATEFULSET + (
        "  replicas: 1\n"
        "  volumeClaimTemplates:\n"
        "    - metadata: {name: d}\n"
        "      spec: {resources: {requests: {storage: 1Gi}}}\n"
    )
    result = run(sts, sts.replace("storage: 1Gi", "storage: 2Gi"))
    assert codes(result) == {Code.IMMUTABLE_FIELD_CHANGE}
    assert "spec.volumeClaimTemplates" in result.decision.findings[0].message
    scaled = run(sts, sts.replace("replicas: 1", "replicas: 3").replace("image: x", "image: y"))
    assert scaled.decision.verdict is Verdict.ALLOW


def test_volume_source_is_immutable() -> None:
    pv = """\
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv1}
spec:
  capacity: {storage: 1Gi}
  persistentVolumeReclaimPolicy: Retain
  nfs: {server: a, path: /x}
"""
    assert codes(run(pv, pv.replace("server: a", "server: b"))) == {Code.IMMUTABLE_FIELD_CHANGE}
    # The reclaim policy is mutable (no IMMUTABLE_FIELD_CHANGE), but Delete loses the data.
    assert codes(run(pv, pv.replace("Retain", "Delete"))) == {Code.RECLAIM_SWITCHED_TO_DELETE}
    assert run(pv.replace("Retain", "Delete"), pv).decision.verdict is Verdict.ALLOW


# NAMESPACE_HOLDS_CLAIMS -------------------------------------------------------------------------


def test_removed_namespace_holding_claim() -> None:
    result = run(doc(NS, claim(retire="x")), claim(retire="x"))
    (f,) = result.decision.findings
    assert f.code is Code.NAMESPACE_HOLDS_CLAIMS
    assert "PersistentVolumeClaim app/data" in f.message


def test_removed_empty_namespace_is_allowed() -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: app}\n"
    assert run(doc(NS, cm), "").decision.verdict is Verdict.ALLOW


# STATEFULSET_DELETES_CLAIMS ---------------------------------------------------------------------

STS = STATEFULSET + "  persistentVolumeClaimRetentionPolicy: {whenDeleted: WHEN}\n"


def test_statefulset_when_deleted_delete() -> None:
    result = run(STS.replace("WHEN", "Delete"), "", context=Context.SPECULATIVE)
    assert codes(result) == {Code.STATEFULSET_DELETES_CLAIMS, Code.SPECULATIVE_PRUNE}
    assert run(STS.replace("WHEN", "Retain"), "").decision.verdict is Verdict.ALLOW


# CRD_HOLDS_RESOURCES ----------------------------------------------------------------------------

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: backups.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Backup, plural: backups}
  versions: [{name: v1, served: true, storage: true}]
"""
CR = "apiVersion: example.com/v1\nkind: Backup\nmetadata: {name: nightly, namespace: app}\n"


def test_removed_crd_with_resources() -> None:
    result = run(doc(CRD, CR), CR)
    (f,) = result.decision.findings
    assert f.code is Code.CRD_HOLDS_RESOURCES
    assert "Backup app/nightly exists" in f.evidence
    assert run(CRD, "").decision.verdict is Verdict.ALLOW


def test_a_crd_removed_with_its_only_resources_holds_nothing() -> None:
    """The count is of what remains after the change: resources removed with the CRD are
    judged by their own removal, and one that stays still blocks."""
    other = CR.replace("nightly", "weekly")
    assert run(doc(CRD, CR), "").decision.verdict is Verdict.ALLOW
    (f,) = run(doc(CRD, CR, other), other).decision.findings
    assert f.code is Code.CRD_HOLDS_RESOURCES
    assert f.evidence == ("Backup app/weekly exists",)


# PV_BOUND ---------------------------------------------------------------------------------------

PV = """\
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data
  annotations: {prune-gate.io/retire: "old"}
spec:
  capacity: {storage: 10Gi}
  claimRef: {namespace: app, name: data}
  nfs: {server: a, path: /x}
"""


def test_removed_volume_bound_to_claim_that_stays() -> None:
    result = run(doc(PV, claim()), claim())
    assert codes(result) == {Code.PV_BOUND}
    assert run(doc(PV, claim(retire="x")), "").decision.verdict is Verdict.ALLOW


# ORPHANED_BY_KEEP -------------------------------------------------------------------------------


def test_keep_annotations_orphan_instead_of_delete() -> None:
    for ann in (
        "kustomize.toolkit.fluxcd.io/prune: disabled",
        "argocd.argoproj.io/sync-options: Prune=false",
        "helm.sh/resource-policy: keep",
        "kapp.k14s.io/delete-strategy: orphan",
    ):
        result = run(claim(extra_ann=ann), "", context=Context.SPECULATIVE)
        assert codes(result) == {Code.ORPHANED_BY_KEEP}, ann
        assert result.decision.verdict is Verdict.WARN
        assert result.decision.verdict.exit_code == 0


# policy: severities and exemptions --------------------------------------------------------------


def test_severity_per_context_and_off() -> None:
    policy = policy_from_dict(
        {"severity": {"NOT_RETIRED": {"preview": "warn"}, "SPECULATIVE_PRUNE": "off"}}
    )
    assert run(claim(), "", policy=policy).decision.verdict is Verdict.WARN
    spec = run(claim(), "", policy=policy, context=Context.SPECULATIVE)
    assert codes(spec) == {Code.NOT_RETIRED}
    assert spec.decision.verdict is Verdict.BLOCK


def test_exemption_applies_until_it_expires() -> None:
    def policy(expires: dt.date) -> Policy:
        return policy_from_dict(
            {
                "exemptions": [
                    {
                        "kind": "PersistentVolumeClaim",
                        "namespace": "app",
                        "name": "da*",
                        "reason": "scratch data, INC-42",
                        "expires": expires.isoformat(),
                    }
                ]
            }
        )

    live_ex = run(claim(), "", policy=policy(dt.date(2027, 1, 1)))
    assert live_ex.decision.verdict is Verdict.ALLOW
    (ex,) = live_ex.decision.exempted
    assert ex.reason == "scratch data, INC-42"
    expired = run(claim(), "", policy=policy(dt.date(2026, 12, 1)))
    assert expired.decision.verdict is Verdict.BLOCK


def test_expired_exemption_is_named_in_the_evidence() -> None:
    policy = policy_from_dict(
        {
            "exemptions": [
                {"kind": "PersistentVolumeClaim", "reason": "INC-7", "expires": "2026-01-31"}
            ]
        }
    )
    result = run(claim(), "", policy=policy)
    (f,) = result.decision.findings
    assert "an exemption expired on 2026-01-31 (INC-7)" in f.evidence[-1]


def test_invalid_quantity_is_not_called_a_shrink() -> None:
    (f,) = run(claim("10Gi"), claim("lots")).decision.findings
    assert "not a quantity" in f.message and "shrink" not in f.message


def test_force_is_read_from_the_candidate_only() -> None:
    forced = claim(extra_ann="kustomize.toolkit.fluxcd.io/force: enabled")
    unforced_change = claim().replace("ReadWriteOnce", "ReadWriteMany")
    assert codes(run(forced, unforced_change)) == {Code.IMMUTABLE_FIELD_CHANGE}


def test_statefulset_immutable_change_offers_the_orphan_delete() -> None:
    sts = STS.replace("WHEN", "Retain")
    (f,) = run(sts, sts.replace("serviceName: db", "serviceName: db2")).decision.findings
    assert "kubectl delete -n app statefulset.apps/db --cascade=orphan" in f.remediation


# MASS_PRUNE -------------------------------------------------------------------------------------


def _configmaps(*names: str) -> str:
    return doc(*(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {n}}}\n" for n in names))


def test_a_root_that_renders_to_nothing_is_a_mass_prune() -> None:
    names = [f"c{i}" for i in range(5)]
    (f,) = run(_configmaps(*names), "").decision.findings
    assert f.code is Code.MASS_PRUNE and f.severity is Severity.BLOCK
    assert "the input loses every one of its objects at once" in f.message
    assert f.evidence[0] == "base: 5 object(s) in the input; candidate: 0 of them remain"
    # Below the floor, an emptied input is a few removals, judged one by one.
    assert run(_configmaps(*names[:4]), "").decision.verdict is Verdict.ALLOW


def test_more_than_the_share_of_a_big_root_is_a_mass_prune() -> None:
    names = [f"c{i}" for i in range(20)]
    (f,) = run(_configmaps(*names), _configmaps(*names[:9])).decision.findings
    assert f.code is Code.MASS_PRUNE and "11 of its 20 objects (55%)" in f.message
    assert run(_configmaps(*names), _configmaps(*names[:10])).decision.verdict is Verdict.ALLOW
    lenient = Policy(mass_prune_fraction=0.9)
    assert (
        run(_configmaps(*names), _configmaps(*names[:9]), policy=lenient).decision.verdict
        is Verdict.ALLOW
    )
