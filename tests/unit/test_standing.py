"""Standing findings (issue 33): a warning present identically on base, on an object the
candidate leaves unchanged, is reported apart and does not make the verdict; a block that stands
still blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.cli import main
from gate.engine.check import check_objects
from gate.engine.context import Context
from gate.engine.verdict import Verdict
from gate.model.findings import Code
from gate.model.objects import RawObject
from gate.sources.policyfile import policy_from_text
from tests.unit.helpers import TODAY, cli_runner
from tests.unit.test_flux_force import check, claim, kustomization, side

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "check" / "standing-warning"
SETTINGS = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: db}}\n"
    "data: {{L: {v}}}\n"
)


def sides(head_claim: str) -> tuple[list[RawObject], list[RawObject]]:
    ks = {"clusters/k.yaml": kustomization("apps", "./", force=True)}
    base = side(
        {**ks, "apps/claim.yaml": claim("fast", "disabled"), "apps/s.yaml": SETTINGS.format(v=1)}
    )
    head = side({**ks, "apps/claim.yaml": head_claim, "apps/s.yaml": SETTINGS.format(v=2)})
    return base, head


def test_a_warning_on_an_unchanged_object_present_on_base_stands() -> None:
    """Failed before: FORCE_DISABLED_VOID on a claim nobody changes made the verdict warn."""
    result = check(*sides(claim("fast", "disabled")))
    decision = result.decision
    assert decision.verdict is Verdict.ALLOW
    assert not decision.findings
    (f,) = decision.standing
    assert f.code is Code.FORCE_DISABLED_VOID and f.ref.name == "data"


def test_a_warning_the_candidate_introduces_is_the_changes() -> None:
    """Base has no `force: disabled`; the candidate adds it: the warning is this change's."""
    ks = {"clusters/k.yaml": kustomization("apps", "./", force=True)}
    base = side({**ks, "apps/claim.yaml": claim("fast")})
    head = side({**ks, "apps/claim.yaml": claim("fast", "disabled")})
    decision = check(base, head).decision
    assert decision.verdict is Verdict.WARN and not decision.standing
    assert [f.code for f in decision.findings] == [Code.FORCE_DISABLED_VOID]


def test_a_warning_on_an_object_the_candidate_edits_is_weighed() -> None:
    """The claim changes (an immutable field, under force): its void mark is part of the story."""
    decision = check(*sides(claim("slow", "disabled"))).decision
    assert not decision.standing
    assert Code.FORCE_DISABLED_VOID in {f.code for f in decision.findings}
    assert decision.verdict is Verdict.BLOCK


def test_a_block_that_stands_still_blocks() -> None:
    """The same standing finding, made a block by the policy: it stays in the verdict (a
    deploy would still do what it names; only warnings stand apart)."""
    policy = policy_from_text("severity:\n  FORCE_DISABLED_VOID: {merged: block}\n", "test")
    base, head = sides(claim("fast", "disabled"))
    result = check_objects(base, head, context=Context.MERGED, policy=policy, today=TODAY)
    assert result.decision.verdict is Verdict.BLOCK
    assert not result.decision.standing
    assert [f.code for f in result.decision.findings] == [Code.FORCE_DISABLED_VOID]


def run_golden(monkeypatch: pytest.MonkeyPatch, *extra: str) -> str:
    monkeypatch.chdir(GOLDEN)
    argv = ["check", "--base-manifests", "base", "--head-manifests", "head", *extra]
    result = cli_runner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_text_counts_standing_and_lists_them_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = run_golden(monkeypatch)
    assert plain.startswith("ALLOW")
    assert "standing (1): warning(s) present on base too" in plain
    assert "--show-standing lists them" in plain
    assert "FORCE_DISABLED_VOID PersistentVolumeClaim db/data" not in plain
    shown = run_golden(monkeypatch, "--show-standing")
    assert "FORCE_DISABLED_VOID PersistentVolumeClaim db/data: " in shown


def test_json_counts_standing(monkeypatch: pytest.MonkeyPatch) -> None:
    report = json.loads(run_golden(monkeypatch, "--format", "json"))
    assert report["verdict"] == "allow" and report["standingCount"] == 1
    assert report["standing"][0]["code"] == "FORCE_DISABLED_VOID"
    markdown = run_golden(monkeypatch, "--format", "markdown")
    assert "1 standing warning(s): present on base too" in markdown
