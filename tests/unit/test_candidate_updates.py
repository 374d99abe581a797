"""`gate check` finds the UPDATEs that delete by proxy, as the webhook refuses them (attack 2, 6).

An object in base and candidate is no deletion, so the deletion rules never saw it: a candidate
could add an ownerReference to a claim (the garbage collector deletes it), switch a StatefulSet's
claim retention to Delete (its controller has the claims deleted), or put the allow-delete
override in a manifest, and `gate check` passed. Unit tests on the rule, then the real CLI on a
git repository with a base and a candidate commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.engine.context import Context
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.engine.verdict import Verdict
from gate.model.findings import Code, Severity
from gate.sources.policyfile import policy_from_dict
from tests.unit.helpers import GitRepo, claim, doc, run
from tests.unit.test_cli import gate

OWNER = "  ownerReferences:\n    - {apiVersion: v1, kind: ConfigMap, name: doomed, uid: u-1}\n"
ALLOW_DELETE = 'prune-gate.io/allow-delete: "cleanup"'


def owned(manifest: str) -> str:
    """The manifest with an ownerReference to ConfigMap app/doomed in its metadata."""
    return manifest.replace("  namespace: app\n", "  namespace: app\n" + OWNER, 1)


def statefulset(when_scaled: str = "", when_deleted: str = "", replicas: int = 3) -> str:
    """A StatefulSet app/db with one claim template, optionally with a retention policy."""
    retention = {k: v for k, v in (("whenScaled", when_scaled), ("whenDeleted", when_deleted)) if v}
    policy = f"  persistentVolumeClaimRetentionPolicy: {json.dumps(retention)}\n"
    return f"""\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: app
spec:
  replicas: {replicas}
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
{policy if retention else ""}  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      containers: [{{name: db, image: postgres}}]
  volumeClaimTemplates:
    - metadata: {{name: data}}
      spec:
        accessModes: [ReadWriteOnce]
        resources: {{requests: {{storage: 1Gi}}}}
"""


# --- the rule ---------------------------------------------------------------------------------


def test_owner_reference_added_to_a_claim_blocks() -> None:
    result = run(claim(), owned(claim()), context=Context.MERGED)
    assert result.decision.verdict is Verdict.BLOCK
    (f,) = result.decision.findings
    assert f.code is Code.OWNER_REFERENCE_ADDED
    assert "ConfigMap doomed" in f.message
    assert "no `prune-gate.io/retire` annotation on the base revision" in f.evidence
    assert f.source is not None and f.source.path == "head.yaml"


def test_owner_reference_kept_or_on_a_retired_claim_passes() -> None:
    assert run(owned(claim()), owned(claim("20Gi")), context=Context.MERGED).decision.findings == ()
    retired = run(claim(retire="moved"), owned(claim(retire="moved")), context=Context.MERGED)
    assert retired.decision.verdict is Verdict.ALLOW


def test_owner_reference_on_a_claim_marked_live_only_blocks() -> None:
    """Stage 1 that only a speculative deploy applied does not let an owner be added."""
    live = LiveState(Policy().guarded_kinds)
    marked = {"name": "data", "namespace": "app", "annotations": {"prune-gate.io/retire": "x"}}
    live.upsert({"metadata": marked, "spec": {}}, "v1", "PersistentVolumeClaim")
    (f,) = run(claim(), owned(claim()), context=Context.MERGED, live=live).decision.findings
    assert f.code is Code.OWNER_REFERENCE_ADDED
    assert any("marked live but not on the base branch" in e for e in f.evidence)


@pytest.mark.parametrize("field", ["whenScaled", "whenDeleted"])
def test_retention_switched_to_delete_blocks_even_when_claims_are_retired(field: str) -> None:
    """Refused outright, as the webhook does: no retirement makes a controller's delete safe."""
    after = (
        statefulset(when_scaled="Delete")
        if field == "whenScaled"
        else statefulset(when_deleted="Delete")
    )
    for before in (statefulset(), statefulset(when_scaled="Retain", when_deleted="Retain")):
        result = run(doc(before, claim(retire="x")), doc(after, claim(retire="x")))
        (f,) = result.decision.findings
        assert (f.code, f.severity) == (Code.RETENTION_DELETES_CLAIMS, Severity.BLOCK)
        assert f"persistentVolumeClaimRetentionPolicy.{field} from Retain to Delete" in f.message


def test_retention_already_delete_or_other_changes_pass() -> None:
    already = statefulset(when_scaled="Delete")
    assert run(already, already.replace("replicas: 3", "replicas: 1")).decision.findings == ()
    assert run(statefulset(), statefulset(replicas=1)).decision.verdict is Verdict.ALLOW


def test_allow_delete_added_in_a_manifest_blocks() -> None:
    (f,) = run(claim(), claim(extra_ann=ALLOW_DELETE)).decision.findings
    assert f.code is Code.OVERRIDE_IN_MANIFEST
    assert 'prune-gate.io/allow-delete: "cleanup"' in f.evidence
    kept = run(claim(extra_ann=ALLOW_DELETE), claim("20Gi", extra_ann=ALLOW_DELETE))
    assert kept.decision.findings == ()  # in base already: not this candidate's doing


def test_retire_mark_added_is_stage_1_not_an_override() -> None:
    assert run(claim(), claim(retire="moved")).decision.verdict is Verdict.ALLOW


# --- the real CLI on a git repository -----------------------------------------------------------

STS = "deploy/db.yaml"
APP = "deploy/app.yaml"


def check(repo: GitRepo) -> tuple[int, list[str], str]:
    """`gate check` of HEAD against HEAD~1, as the exit code, the codes in the JSON report, and
    the text output."""
    args = ("check", "--base", "HEAD~1", "--head", "HEAD", "--context", "merged")
    done = gate(*args, "--format", "json", cwd=repo.root)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    found = [f["code"] for f in json.loads(done.stdout)["findings"]]
    text = gate(*args, cwd=repo.root)
    assert text.returncode == done.returncode, text.stdout + text.stderr
    return done.returncode, found, text.stdout


@pytest.mark.parametrize(
    ("candidate", "code"),
    [
        ({APP: owned(claim())}, "OWNER_REFERENCE_ADDED"),
        ({STS: statefulset(when_scaled="Delete")}, "RETENTION_DELETES_CLAIMS"),
        ({STS: statefulset(when_deleted="Delete")}, "RETENTION_DELETES_CLAIMS"),
        ({APP: claim(extra_ann=ALLOW_DELETE)}, "OVERRIDE_IN_MANIFEST"),
    ],
)
def test_cli_blocks_an_update_that_deletes_by_proxy(
    tmp_path: Path, candidate: dict[str, str | None], code: str
) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({APP: claim(), STS: statefulset()}, "base")
    repo.commit(candidate, "candidate")
    rc, found, text = check(repo)
    assert (rc, found) == (1, [code]), text
    assert code in text


def test_cli_passes_a_benign_update(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({APP: claim(), STS: statefulset()}, "base")
    repo.commit({APP: claim("20Gi", retire="moved"), STS: statefulset(replicas=1)}, "candidate")
    rc, found, text = check(repo)
    assert (rc, found) == (0, []), text


def test_a_new_object_carrying_an_owner_or_the_override_blocks() -> None:
    """As the webhook refuses the deployer's CREATE: else create-with-override-and-owner, then
    delete the owner, and the garbage collector's DELETE honours the override."""
    other = claim().replace("name: data", "name: fresh")
    found = run(claim(), doc(claim(), owned(other))).decision.findings
    assert [(f.code, f.ref.name) for f in found] == [(Code.OWNER_REFERENCE_ADDED, "fresh")]
    assert "created by the candidate" in " ".join(found[0].evidence)
    marked = other.replace(
        "  namespace: app\n", f"  namespace: app\n  annotations: {{{ALLOW_DELETE}}}\n"
    )
    found = run(claim(), doc(claim(), marked)).decision.findings
    assert [f.code for f in found] == [Code.OVERRIDE_IN_MANIFEST]
    # A new StatefulSet may delete its own (new) claims; a new plain claim is nothing.
    assert run(claim(), doc(claim(), statefulset(when_deleted="Delete"))).decision.findings == ()
    assert run(claim(), doc(claim(), other)).decision.findings == ()


VOLUME = """\
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-data}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  hostPath: {{path: /data}}
{reclaim}"""


def test_a_volume_switched_to_reclaim_delete_blocks() -> None:
    retain = VOLUME.format(reclaim="")
    delete = VOLUME.format(reclaim="  persistentVolumeReclaimPolicy: Delete\n")
    (f,) = run(retain, delete).decision.findings
    assert (f.code, f.severity) == (Code.RECLAIM_SWITCHED_TO_DELETE, Severity.BLOCK)
    assert "from Retain to Delete" in f.message and "kubectl patch pv pv-data" in f.remediation
    assert run(delete, retain).decision.findings == ()  # towards keeping the data: fine
    assert run(retain, doc(retain, claim())).decision.findings == ()


def test_a_candidate_changing_a_protected_label_blocks_as_the_webhook_would() -> None:
    """The deploy of such a candidate would be refused by the webhook (GUARD_TAMPERED): the
    gate says so before the merge."""
    policy = policy_from_dict({"webhook": {"protectedLabels": ["prune-gate.io/guard"]}})
    labelled = claim().replace(
        "  namespace: app\n", "  namespace: app\n  labels: {prune-gate.io/guard: 'true'}\n"
    )
    (f,) = run(labelled, claim(), policy=policy).decision.findings
    assert f.code is Code.GUARD_TAMPERED and "prune-gate.io/guard removed" in f.message
    assert run(labelled, labelled, policy=policy).decision.findings == ()
    assert run(claim(), claim(), policy=policy).decision.findings == ()
