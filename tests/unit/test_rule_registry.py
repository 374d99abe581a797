"""The rule registry is the one list of rules: every code has its record, every door asks it, and
the schemas and the docs (docs/cli.md) say what it says (generated, or checked here against it)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gate.engine.rules import registry
from gate.engine.rules.registry import RULES, ChangeRule, Door, WorldRule, change_rules
from gate.model.findings import CODES, MEANING, Code, Severity

REPO = Path(__file__).resolve().parents[2]
GEN = REPO / "scripts" / "gen-schemas"
GENERATED = (
    Path("gate/schemas/policy.schema.json"),
    Path("gate/schemas/report.schema.json"),
    Path("charts/prune-gate/values.schema.json"),
)


def test_every_code_has_its_meaning_and_default_severity() -> None:
    assert list(CODES) == list(Code)
    for code, info in CODES.items():
        assert isinstance(info.severity, Severity) and info.severity is not Severity.OFF, code
        assert info.meaning and "\n" not in info.meaning, code
    assert {c: CODES[c].meaning for c in Code} == MEANING


def test_every_code_is_made_by_a_rule_or_a_door_and_every_record_code_is_known() -> None:
    for rule in RULES:
        assert rule.codes, rule.name
        assert all(isinstance(c, Code) and c in CODES for c in rule.codes), rule.name
        assert rule.doors and rule.doors <= set(Door), rule.name
    assert set(Code) - registry.codes_made() == set()
    assert not set(registry.DOOR_CODES) & {c for r in RULES for c in r.codes}


def test_a_code_without_a_record_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: take the one rule that makes PV_BOUND out and it says so."""
    rest = tuple(r for r in RULES if Code.PV_BOUND not in r.codes)
    monkeypatch.setattr(registry, "RULES", rest)
    assert set(Code) - registry.codes_made() == {Code.PV_BOUND}


def test_one_record_per_function_each_named_for_its_scope() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    assert all(name.startswith("check_") for name in names)
    for rule in RULES:
        assert isinstance(rule, ChangeRule | WorldRule)
        assert rule.scope.value == ("change" if isinstance(rule, ChangeRule) else "world")


def test_gate_check_runs_every_rule_in_report_order() -> None:
    """The order `run_rules` had when it listed its rules by hand: findings keep their order."""
    per_change = [r.name for r in change_rules(Door.CHECK)]
    assert per_change == [
        "check_orphaned_by_keep",
        "check_uninstalled_member",
        "check_not_retired",
        "check_speculative_prune",
        "check_consumer_remains",
        "check_immutable_change",
        "check_namespace_holds_claims",
        "check_statefulset_deletes_claims",
        "check_crd_holds_resources",
        "check_pv_bound",
        "check_claim_mounted",
        "check_reclaim_delete",
    ]
    assert [r.name for r in registry.world_rules(Door.CHECK)] == [
        "check_cascades",
        "check_flux_moves",
        "check_retiring_consumers",
        "check_candidate_updates",
        "check_already_terminating",
        "check_guard_tampered",
        "check_deployer_identities",
        "check_mass_prune",
        "check_void_force_disabled",
    ]
    assert [r.name for r in RULES if isinstance(r, ChangeRule) and r.settles] == [
        "check_orphaned_by_keep",
        "check_uninstalled_member",
    ]


def test_the_webhook_takes_its_rules_from_the_registry_by_door() -> None:
    from webhook import decide

    assert change_rules(Door.ADMISSION) == decide.ADMISSION_RULES
    assert change_rules(Door.DEPLOYER) == decide.DEPLOYER_RULES
    assert {r.name for r in decide.ADMISSION_RULES} == {
        "check_claim_mounted",
        "check_pv_bound",
        "check_namespace_holds_claims",
        "check_statefulset_deletes_claims",
        "check_crd_holds_resources",
    }
    assert {r.name for r in decide.DEPLOYER_RULES} == {
        "check_not_retired",
        "check_speculation_fence",
    }
    assert not registry.world_rules(Door.ADMISSION) and not registry.world_rules(Door.DEPLOYER)


def _severity_set_by(path: Path) -> list[str]:
    """Each place in `path` that builds a Finding with `severity=`, or replaces a severity."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("Finding", "replace")
            and any(k.arg == "severity" for k in node.keywords)
        ):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_rule_sets_a_severity_policy_applies_it_afterwards() -> None:
    """A rule may suggest a severity (`suggested=`); the policy decides (`gate.engine.verdict`)."""
    rules = sorted((REPO / "gate" / "engine" / "rules").glob("*.py"))
    assert len(rules) >= 9
    assert [hit for path in rules for hit in _severity_set_by(path)] == []
    sample = REPO / "gate" / "engine" / "verdict.py"  # which does set it: the scan finds it
    assert _severity_set_by(sample)


# --- generated, not copied ---------------------------------------------------------------------


def gen_schemas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GEN), *args], capture_output=True, text=True, check=False
    )


def test_the_schemas_list_the_codes_of_the_code_table() -> None:
    result = gen_schemas("--check")
    assert result.returncode == 0, result.stderr


def test_a_schema_that_drifted_is_named_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    for rel in GENERATED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    chart = tmp_path / GENERATED[2]
    chart.write_text(chart.read_text(encoding="utf-8").replace('"PV_BOUND",\n', ""), "utf-8")
    result = gen_schemas("--check", "--root", str(tmp_path))
    assert result.returncode == 1
    assert str(GENERATED[2]) in result.stderr and "make schemas" in result.stderr
    assert str(GENERATED[0]) not in result.stderr
    assert gen_schemas("--root", str(tmp_path)).returncode == 0
    assert chart.read_text(encoding="utf-8") == (REPO / GENERATED[2]).read_text(encoding="utf-8")
    assert gen_schemas("--check", "--root", str(tmp_path)).returncode == 0


def test_the_docs_table_has_every_code_with_its_default_severity() -> None:
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    start = page.index("| code | default | fires when |\n")
    table = page[start : page.index("\n\n", start)].splitlines()[2:]
    rows = {}
    for line in table:
        match = re.match(r"\| `([A-Z_]+)` \| ([a-z]+)\b", line)
        assert match, line
        rows[match.group(1)] = match.group(2)
    assert rows == {c.value: CODES[c].severity.value for c in Code}
