"""Whose word heal takes (issue 32, item 3): the marks a claim carries and who wrote them.

`heal.disposableClaims` read labels, and labels come from the deployer's manifests: a candidate
that labels a stuck database claim `tier: cache` had unattended heal delete the pod that pins it.
Here: managedFields read as evidence (`gate.engine.marks`), heal's plans unattended and attended,
`gate check`'s finding on a candidate that adds a mark (the webhook's, through the same
`change_findings`), the webhook's decision, and doctor naming the writer. The same attacks run
against the real API server, Flux and the webhook in tests/e2e/test_heal_marks.py.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from gate.engine.doctor import Doctor
from gate.engine.fence import fence_status
from gate.engine.heal import ActionKind, Healer, HealOptions, HealPlan
from gate.engine.ledger import Writer, build_ledger, field_writers
from gate.engine.livestate import LiveState
from gate.engine.marks import MarkReader, by_hand
from gate.engine.policy import DEFAULT_TRUSTED_MANAGERS, Policy
from gate.engine.verdict import Verdict
from gate.model.findings import Code, Severity
from gate.report.doctor import doctor_json, doctor_text, heal_text
from gate.sources.policyfile import policy_from_dict
from tests.unit.helpers import GitRepo, claim, run
from tests.unit.stuckworld import T0, node, owner, pod, volume
from tests.unit.stuckworld import claim as live_claim
from tests.unit.test_cli import gate
from webhook.decide import decide_admission
from webhook.outcome import Outcome
from webhook.review import parse_review

DATA = "prune-gate.io/data"
WHEN = "2026-12-04T11:00:00Z"
FLUX_APPLY = ("kustomize-controller", "Apply")
PERSON_LABEL = ("kubectl-label", "Update")
PERSON_ANNOTATE = ("kubectl-annotate", "Update")


def entry(
    manager: str,
    operation: str,
    labels: tuple[str, ...] = (),
    annotations: tuple[str, ...] = (),
    subresource: str = "",
) -> dict[str, Any]:
    """One managedFields entry owning these labels and annotations (as the API server writes
    it: a `.` for the map itself, then `f:KEY` for each key)."""
    meta: dict[str, Any] = {}
    if labels:
        meta["f:labels"] = {".": {}, **{f"f:{k}": {} for k in labels}}
    if annotations:
        meta["f:annotations"] = {".": {}, **{f"f:{k}": {} for k in annotations}}
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": meta} if meta else {},
        "manager": manager,
        "operation": operation,
        "time": WHEN,
    }
    if subresource:
        out["subresource"] = subresource
    return out


def w(manager: str, operation: str, subresource: str = "") -> Writer:
    return Writer(manager, operation, None, subresource)


# --- managedFields as evidence -----------------------------------------------------------------


def test_field_writers_reads_who_owns_each_label_and_annotation() -> None:
    obj = {
        "metadata": {
            "managedFields": [
                entry(*FLUX_APPLY, labels=("tier",), annotations=(DATA,)),
                entry(*PERSON_LABEL, labels=("tier", "team")),
                entry("kubectl-edit", "Update"),  # an entry without fields owns nothing
                entry("kube-controller-manager", "Update", subresource="status"),
                "not an entry",
            ]
        }
    }
    found = field_writers(obj)
    assert [(x.manager, x.operation) for x in found[("labels", "tier")]] == [
        FLUX_APPLY,
        PERSON_LABEL,
    ]
    assert [x.manager for x in found[("labels", "team")]] == ["kubectl-label"]
    assert [x.manager for x in found[("annotations", DATA)]] == ["kustomize-controller"]
    assert set(found) == {("labels", "tier"), ("labels", "team"), ("annotations", DATA)}
    assert found[("labels", "team")][0].written == dt.datetime(2026, 12, 4, 11, tzinfo=dt.UTC)
    assert field_writers({"metadata": {}}) == {} == field_writers({})


@pytest.mark.parametrize(
    ("writers", "counts", "said"),
    [
        ((w("kubectl-label", "Update"),), True, "a person's hand"),
        ((w("kubectl-annotate", "Update"), w("kubectl-edit", "Update")), True, "a person's"),
        # Server-side apply under a person's manager name: an Apply is a manifest.
        ((w("kubectl-label", "Apply"),), False, "kubectl-label (Apply"),
        ((w(*FLUX_APPLY),), False, "kustomize-controller (Apply"),
        ((w("kubectl-client-side-apply", "Update"),), False, "kubectl-client-side-apply"),
        ((w("argocd-controller", "Update"),), False, "argocd-controller"),
        # Co-owned with a deployer: the deployer's word too.
        ((w("kubectl-label", "Update"), w(*FLUX_APPLY)), False, "kustomize-controller"),
        # No entry owns it (stripped, or never recorded): no writer can be told.
        ((), False, "cannot be told"),
        ((w("kubectl-label", "Update", "status"),), False, "of status"),
        ((w("", "Update"),), False, "(no manager)"),
    ],
)
def test_a_mark_is_a_persons_hand_only_when_every_owner_is_a_trusted_update(
    writers: tuple[Writer, ...], counts: bool, said: str
) -> None:
    ok, why = by_hand(writers, DEFAULT_TRUSTED_MANAGERS)
    assert (ok, said in why) == (counts, True), why


def test_trusted_managers_are_the_policys() -> None:
    assert by_hand((w("k9s", "Update"),), ("k9s",))[0]
    assert not by_hand((w("kubectl-label", "Update"),), ())[0]
    policy = policy_from_dict({"heal": {"trustedManagers": ["k9s"]}})
    assert policy.heal_trusted_managers == ("k9s",)
    assert Policy().heal_trusted_managers == DEFAULT_TRUSTED_MANAGERS
    assert policy_from_dict({"heal": {"trustedManagers": []}}).heal_trusted_managers == ()


# --- heal's plans ------------------------------------------------------------------------------

CACHE_POLICY = policy_from_dict(
    {
        "heal": {
            "disposableClaims": [
                {"namespace": "shop", "labels": {"tier": "cache"}, "reason": "rebuilt on start"},
                {"namespace": "shop", "name": "named", "reason": "scratch"},
                {"labels": {"tier": "tmp", "team": "ci"}, "reason": "ci scratch"},
            ]
        }
    }
)
OLD = T0 - dt.timedelta(hours=2)


def stuck_claim(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    managed: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    body = live_claim(
        name, volume=f"pv-{name}", deletion=OLD, labels=labels, annotations=annotations
    )
    if managed:
        body["metadata"]["managedFields"] = list(managed)
    return body


def plan(*claims: dict[str, Any], unattended: bool, policy: Policy = CACHE_POLICY) -> HealPlan:
    names = [c["metadata"]["name"] for c in claims]
    ledger = build_ledger(
        claims=claims,
        volumes=[volume(f"pv-{n}", n) for n in names],
        pods=[pod(f"{n}-0", claims=(n,), owners=(owner("StatefulSet", n),)) for n in names],
        nodes=[node("n1")],
    )
    doctor = Doctor(ledger, T0, marks=MarkReader.of(policy))
    options = HealOptions(unattended=unattended, marks=MarkReader.of(policy))
    return Healer(doctor, options).plan(doctor.stuck())


def released(p: HealPlan) -> set[str]:
    return {a.heals.name for a in p.actions if a.kind is ActionKind.DELETE_POD}


def skipped(p: HealPlan) -> dict[str, str]:
    return {s.ref.name: s.why for s in p.skipped}


def test_unattended_heal_does_not_take_a_label_the_deployer_wrote() -> None:
    """The attack: a deploy labels the stuck database claim `tier: cache`."""
    db = stuck_claim("db", {"tier": "cache"}, managed=(entry(*FLUX_APPLY, labels=("tier",)),))
    p = plan(db, unattended=True)
    assert released(p) == set()
    why = skipped(p)["db"]
    assert "label tier=cache, written by kustomize-controller (Apply, 2026-12-04T11:00:00Z)" in why
    assert "not a person's hand" in why and "heal.trustedManagers" in why
    assert "by namespace and name" in why and "kubectl label" in why


def test_unattended_heal_takes_a_persons_label_and_a_name_in_the_policy() -> None:
    person = stuck_claim(
        "person", {"tier": "cache"}, managed=(entry(*PERSON_LABEL, labels=("tier",)),)
    )
    named = stuck_claim("named", {"tier": "db"}, managed=(entry(*FLUX_APPLY, labels=("tier",)),))
    p = plan(person, named, unattended=True)
    assert released(p) == {"person", "named"}
    events = {a.heals.name: a.event.message for a in p.actions}
    assert "label tier=cache written by kubectl-label (Update" in events["person"]
    assert "names it by namespace and name (scratch)" in events["named"]


def test_every_label_an_entry_reads_must_be_a_persons_hand() -> None:
    """An entry reading two labels, one written by a person and one by the deployer."""
    half = stuck_claim(
        "half",
        {"tier": "tmp", "team": "ci"},
        managed=(entry(*PERSON_LABEL, labels=("tier",)), entry(*FLUX_APPLY, labels=("team",))),
    )
    p = plan(half, unattended=True)
    assert released(p) == set()
    assert "label team=ci, written by kustomize-controller" in skipped(p)["half"]
    assert "label tier=tmp" not in skipped(p)["half"]


def test_a_label_co_owned_by_the_deployer_or_owned_by_nobody_does_not_count() -> None:
    shared = stuck_claim(
        "shared",
        {"tier": "cache"},
        managed=(entry(*PERSON_LABEL, labels=("tier",)), entry(*FLUX_APPLY, labels=("tier",))),
    )
    stripped = stuck_claim("stripped", {"tier": "cache"})
    fieldless = stuck_claim("fieldless", {"tier": "cache"}, managed=(entry(*PERSON_LABEL),))
    p = plan(shared, stripped, fieldless, unattended=True)
    assert released(p) == set()
    assert "kustomize-controller" in skipped(p)["shared"]
    assert "cannot be told" in skipped(p)["stripped"]
    assert "cannot be told" in skipped(p)["fieldless"]


def test_unattended_heal_takes_the_disposable_annotation_only_from_a_persons_hand() -> None:
    marked = {DATA: "disposable"}
    person = stuck_claim(
        "person", annotations=marked, managed=(entry(*PERSON_ANNOTATE, annotations=(DATA,)),)
    )
    deployer = stuck_claim(
        "deployer", annotations=marked, managed=(entry(*FLUX_APPLY, annotations=(DATA,)),)
    )
    p = plan(person, deployer, unattended=True, policy=Policy())
    assert released(p) == {"person"}
    why = skipped(p)["deployer"]
    assert f"it is marked {DATA}=disposable, written by kustomize-controller (Apply" in why
    assert "speculative" in why


def test_a_person_confirming_the_plan_is_shown_whose_mark_it_acts_on() -> None:
    """Attended (`gate heal --apply`, which asks), every mark counts and the plan says who
    wrote it, so the person who confirms knows it was a deployer."""
    db = stuck_claim("db", {"tier": "cache"}, managed=(entry(*FLUX_APPLY, labels=("tier",)),))
    p = plan(db, unattended=False)
    [action] = p.actions
    assert "label tier=cache written by kustomize-controller (Apply" in action.event.message
    assert "not a person's hand" in action.event.message


def test_an_unmarked_claim_is_left_as_before() -> None:
    p = plan(stuck_claim("plain", {"tier": "db"}), unattended=True)
    assert released(p) == set() and "--rescue" in skipped(p)["plain"]


# --- doctor names the writer -------------------------------------------------------------------


def test_doctor_names_who_wrote_each_mark() -> None:
    db = stuck_claim(
        "db",
        {"tier": "cache", "app": "db"},
        annotations={DATA: "disposable", "prune-gate.io/retire": "moved to db2"},
        managed=(
            entry(*FLUX_APPLY, labels=("tier", "app"), annotations=("prune-gate.io/retire",)),
            entry(*PERSON_ANNOTATE, annotations=(DATA,)),
        ),
    )
    ledger = build_ledger(
        claims=[db],
        volumes=[volume("pv-db", "db")],
        pods=[pod("db-0", claims=("db",))],
        nodes=[node("n1")],
    )
    [diag] = Doctor(ledger, T0, marks=MarkReader.of(CACHE_POLICY)).stuck()
    lines = [m.describe() for m in diag.marks]
    assert lines == [
        f'annotation {DATA}="disposable": written by kubectl-annotate (Update, '
        "2026-12-04T11:00:00Z); a person's hand: unattended heal takes it",
        'label tier="cache": written by kustomize-controller (Apply, 2026-12-04T11:00:00Z); not '
        "a person's hand (trusted: an Update by kubectl-label, kubectl-annotate, kubectl-edit): "
        "unattended heal does not take it",
        'annotation prune-gate.io/retire="moved to db2": written by kustomize-controller '
        "(Apply, 2026-12-04T11:00:00Z)",
    ]
    text = doctor_text([diag], T0, 0)
    assert "marks (who wrote each, by managedFields):" in text
    assert 'label tier="cache": written by kustomize-controller (Apply' in text
    [reported] = json.loads(doctor_json([diag], T0))["stuck"]
    assert reported["marks"][1] == {
        "field": "label",
        "key": "tier",
        "value": "cache",
        "writers": [
            {
                "manager": "kustomize-controller",
                "operation": "Apply",
                "subresource": None,
                "time": WHEN,
            }
        ],
        "heal": reported["marks"][1]["heal"],
    }
    # A label no entry reads at that value is no mark; without writers, that is said too.
    plain = stuck_claim("plain", {"tier": "db"}, annotations={DATA: "disposable"})
    ledger = build_ledger(claims=[plain], pods=[pod("p-0", claims=("plain",))], nodes=[node("n1")])
    [diag] = Doctor(ledger, T0, marks=MarkReader.of(CACHE_POLICY)).stuck()
    [mark] = diag.marks
    assert mark.key == DATA and "no managedFields entry (writer unknown)" in mark.describe()


# --- gate check: a candidate that adds a mark (the webhook's finding, same function) -----------

CHECK_POLICY = policy_from_dict(
    {
        "heal": {
            "disposableClaims": [
                {"namespace": "app", "labels": {"tier": "cache"}, "reason": "rebuilt"},
                {"namespace": "ci-*", "labels": {"tier": "scratch"}, "reason": "ci"},
            ]
        }
    }
)


def labelled(value: str | None = None, extra: str = "", ann: str = "") -> str:
    """The helpers' claim app/data with label tier=`value` and more metadata lines."""
    text = claim(extra_ann=ann) if ann else claim()
    lines = ""
    if value is not None:
        lines += f"  labels: {{tier: {value}}}\n"
    return text.replace("  namespace: app\n", f"  namespace: app\n{lines}{extra}", 1)


FORGED = (
    "  managedFields:\n"
    "    - manager: kubectl-label\n"
    "      operation: Update\n"
    "      fieldsType: FieldsV1\n"
    '      fieldsV1: {"f:metadata": {"f:labels": {"f:tier": {}}}}\n'
)


@pytest.mark.parametrize(
    ("base", "head", "said"),
    [
        (labelled(), labelled("cache"), 'label tier added ("cache")'),
        (labelled("db"), labelled("cache"), 'label tier changed from "db" to "cache"'),
        (
            labelled(),
            labelled(ann=f"{DATA}: disposable"),
            f'annotation {DATA} added ("disposable")',
        ),
        (labelled(ann=f"{DATA}: keep"), labelled(ann=f"{DATA}: disposable"), 'changed from "keep"'),
        # The label was there already; the candidate's manifest names a person its writer.
        (labelled("cache"), labelled("cache", FORGED), "now owned by kubectl-label"),
    ],
)
def test_a_candidate_that_marks_a_claim_disposable_blocks(base: str, head: str, said: str) -> None:
    result = run(base, head, policy=CHECK_POLICY)
    (f,) = result.decision.findings
    assert (f.code, f.severity) == (Code.GUARD_TAMPERED, Severity.BLOCK), f
    assert said in f.message and "heal" in f.message
    assert result.decision.verdict is Verdict.BLOCK
    assert "heal.disposableClaims by namespace and name" in f.remediation


def test_a_new_claim_carrying_a_mark_blocks_as_its_create_would() -> None:
    (f,) = run("", labelled("cache"), policy=CHECK_POLICY).decision.findings
    assert f.code is Code.GUARD_TAMPERED and "created by the candidate" in " ".join(f.evidence)


@pytest.mark.parametrize(
    ("base", "head"),
    [
        (labelled("cache"), labelled("cache")),  # unchanged
        (labelled("cache"), labelled()),  # removed: towards keeping the data
        (labelled("db"), labelled("hot")),  # a value no entry reads
        (labelled(), labelled("scratch")),  # read only in ci-* namespaces
        (labelled(ann=f"{DATA}: disposable"), labelled(ann=f"{DATA}: disposable")),
    ],
)
def test_changes_that_mark_nothing_pass(base: str, head: str) -> None:
    assert run(base, head, policy=CHECK_POLICY).decision.findings == ()


def test_without_disposable_claims_a_label_is_no_mark() -> None:
    assert run(labelled(), labelled("cache")).decision.findings == ()
    (f,) = run(labelled(), labelled(ann=f"{DATA}: disposable")).decision.findings
    assert f.code is Code.GUARD_TAMPERED


def test_cli_blocks_a_candidate_that_labels_a_claim_disposable(tmp_path: Path) -> None:
    """The real `gate check` on two commits; the policy is the same in both."""
    repo = GitRepo(tmp_path / "repo")
    policy = json.dumps(
        {"heal": {"disposableClaims": [{"labels": {"tier": "cache"}, "reason": "x"}]}}
    )
    repo.commit({"prune-gate.yaml": policy, "deploy/db.yaml": labelled("db")}, "base")
    repo.commit({"deploy/db.yaml": labelled("cache")}, "candidate")
    args = ("check", "--base", "HEAD~1", "--head", "HEAD", "--context", "speculative")
    done = gate(*args, "--format", "json", cwd=repo.root)
    assert done.returncode == 1, done.stdout + done.stderr
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "GUARD_TAMPERED" and "label tier" in finding["message"]


# --- the webhook: a deployer's UPDATE or CREATE ------------------------------------------------

FLUX = "system:serviceaccount:flux-system:kustomize-controller"
WEBHOOK_POLICY = policy_from_dict(
    {
        "webhook": {"deployers": [FLUX]},
        "heal": {"disposableClaims": [{"labels": {"tier": "cache"}, "reason": "rebuilt"}]},
    }
)


def review_claim(tier: str | None, *managed: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "db", "namespace": "app", "uid": "uid-db"}
    if tier is not None:
        meta["labels"] = {"tier": tier}
    if managed:
        meta["managedFields"] = list(managed)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": {}}


def admit(
    operation: str,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    user: str = FLUX,
    sub_resource: str = "",
) -> Outcome:
    req: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
        "operation": operation,
        "name": "db",
        "namespace": "app",
        "userInfo": {"username": user, "groups": []},
        "object": new,
    }
    if old is not None:
        req["oldObject"] = old
    if sub_resource:
        req["subResource"] = sub_resource
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
    review = parse_review(json.dumps(doc).encode())
    state = LiveState(WEBHOOK_POLICY.guarded_kinds)
    return decide_admission(review, WEBHOOK_POLICY, state, fence_status(None, T0), T0.date())


def refusal(outcome: Outcome) -> str:
    """`REASON: message` of a refused review; fails the test when it was allowed."""
    status = outcome.response.status
    assert not outcome.response.allowed and status is not None, outcome
    return f"{status.reason}: {status.message}"


def test_the_webhook_refuses_a_deployer_that_marks_a_claim_and_lets_a_person() -> None:
    outcome = admit("UPDATE", review_claim(None), review_claim("cache"))
    assert refusal(outcome).startswith("GUARD_TAMPERED: ") and "label tier" in refusal(outcome)
    created = admit("CREATE", None, review_claim("cache"))
    assert not created.response.allowed
    person = admit("UPDATE", review_claim(None), review_claim("cache"), user="alice")
    assert person.response.allowed and [f.code for f in person.findings] == [Code.GUARD_TAMPERED]
    assert admit("UPDATE", review_claim(None), review_claim("db")).response.allowed


def test_the_webhook_refuses_a_deployer_that_makes_managedfields_name_a_person() -> None:
    """The value stays; the deployer's request moves its ownership to kubectl-label (a
    client-side apply of a manifest carrying managedFields, or a deployer writing under a
    person's manager name). Dropping its own share of a person's label is not that."""
    flux = entry(*FLUX_APPLY, labels=("tier",))
    person = entry(*PERSON_LABEL, labels=("tier",))
    forged = admit("UPDATE", review_claim("cache", flux), review_claim("cache", person))
    assert "now owned by kubectl-label" in refusal(forged)
    dropped = admit("UPDATE", review_claim("cache", flux, person), review_claim("cache", person))
    assert dropped.response.allowed and dropped.findings == ()


def test_the_webhook_judges_a_claims_status_update_as_the_update_it_is() -> None:
    """A /status write may change a claim's labels and annotations (the API server keeps its
    spec only): a deployer's mark through it is refused, and so is a later rewrite that drops
    `subresource: status` from the entry it made (that makes it read as a person's hand)."""
    through_status = admit(
        "UPDATE", review_claim(None), review_claim("cache"), sub_resource="status"
    )
    assert refusal(through_status).startswith("GUARD_TAMPERED: ")
    assert "label tier" in refusal(through_status)
    person = admit(
        "UPDATE", review_claim(None), review_claim("cache"), user="alice", sub_resource="status"
    )
    assert person.response.allowed and [f.code for f in person.findings] == [Code.GUARD_TAMPERED]
    status = entry(*PERSON_ANNOTATE, labels=("tier",), subresource="status")
    hand = entry(*PERSON_ANNOTATE, labels=("tier",))
    dropped = admit("UPDATE", review_claim("cache", status), review_claim("cache", hand))
    assert "now owned by kubectl-annotate" in refusal(dropped)
    # Only `status`: other subresources (none is registered) are let through as before.
    scaled = admit("UPDATE", review_claim(None), review_claim("cache"), sub_resource="scale")
    assert scaled.response.allowed and scaled.findings == ()


def test_the_prompt_of_apply_shows_each_planned_action_and_whose_mark_it_takes() -> None:
    """`gate heal --apply` asks before acting; what it shows is what the person confirms."""
    db = stuck_claim("db", {"tier": "cache"}, managed=(entry(*FLUX_APPLY, labels=("tier",)),))
    text = heal_text(plan(db, unattended=False), [], apply=True)
    assert text.startswith(
        "planned   DeletePod Pod shop/db-0 (heals PersistentVolumeClaim shop/db)"
    )
    assert "written by kustomize-controller (Apply" in text and "nothing stuck" not in text
