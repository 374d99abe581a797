"""`--format sarif` and `--sarif FILE`: a log GitHub code scanning takes, valid against the OASIS
SARIF 2.1.0 schema, with one rule per code and results where the reader looks.

The schema comes from `scripts/sarif-schema` (a pinned Go module, checked by its SHA-256, cached
under ~/.cache/prune-gate/sarif); without Go it is a skip, except in CI.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.placement import FILE_LEVEL
from gate.engine.policy import Policy
from gate.engine.verdict import Decision, Exempted, Verdict
from gate.model.codepages import PAGES, Harm, docs_url, security_severity
from gate.model.findings import CODES, Code, Finding, Severity
from gate.model.objects import Source
from gate.report.codepage import page_markdown, page_text
from gate.report.sarif import LEVEL, sarif_data
from tests.ci import ci
from tests.unit.test_cli import EXAMPLE, gate
from tests.unit.test_packaging import CHECK_EXAMPLE
from tests.unit.test_report import CASES, GOLDEN
from tests.unit.test_report import _finding as report_finding

ROOT = Path(__file__).resolve().parents[2]

#: the schema is fetched with Go (the unwritable-file test does not need it).
pytestmark = pytest.mark.binaries


@cache
def sarif_schema() -> dict[str, Any]:
    if shutil.which("go") is None and not ci():
        pytest.skip("the SARIF schema is fetched with Go (scripts/sarif-schema); install Go")
    out = subprocess.run(
        [str(ROOT / "scripts" / "sarif-schema")], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    schema: dict[str, Any] = json.loads(Path(out.stdout.strip()).read_text("utf-8"))
    return schema


def validate(log: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(sarif_schema()).validate(log)


def test_the_schema_is_the_oasis_one_and_refuses_a_broken_log() -> None:
    schema = sarif_schema()
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    jsonschema.Draft4Validator.check_schema(schema)
    with pytest.raises(jsonschema.ValidationError):
        validate({"version": "2.1.0", "runs": [{"results": []}]})  # a run needs its tool


@pytest.mark.parametrize("case", CASES)
def test_golden_sarif_validates_against_the_schema(case: str) -> None:
    validate(json.loads((GOLDEN / f"{case}.sarif").read_text("utf-8")))


def _finding(name: str, *, source: Source | None, head: Source | None = None) -> Finding:
    """test_report's claim finding, declared at `source` and shown at `head`."""
    return replace(report_finding(name), source=source, head_source=head)


def _log(*findings: Finding, exempted: tuple[Exempted, ...] = ()) -> dict[str, Any]:
    decision = Decision(Verdict.BLOCK, findings, exempted)
    log = sarif_data(decision, context=Context.SPECULATIVE, base="main", head="abc")
    validate(log)
    return log


def _results(log: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = log["runs"][0]["results"]
    return results


def test_one_rule_per_code_and_each_result_points_at_its_rule() -> None:
    log = _log(_finding("data", source=Source("deploy/app.yaml", 3)))
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [c.value for c in Code]
    for result in _results(log):
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == "NOT_RETIRED"
        assert result["level"] == "error"


def test_every_rule_carries_its_page_and_how_github_ranks_it() -> None:
    """helpUri, help (text and markdown: the code's page), and the properties code scanning
    reads: `security-severity` a number as a string, with the `security` tag it needs."""
    rules = _log()["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [c.value for c in Code]
    for rule, code in zip(rules, Code, strict=True):
        assert rule["helpUri"] == docs_url(code)
        assert rule["help"] == {
            "text": page_text(code),
            "markdown": page_markdown(code, links=False),
        }
        assert rule["help"]["markdown"].startswith(f"# {code.value}\n")
        assert docs_url(code) in rule["help"]["text"]
        assert rule["fullDescription"]["markdown"] == PAGES[code].what
        assert "`" not in rule["fullDescription"]["text"]
        assert rule["defaultConfiguration"] == {"level": LEVEL[CODES[code].severity]}
        props = rule["properties"]
        assert props["security-severity"] == security_severity(code)
        assert 0.0 < float(props["security-severity"]) <= 10.0
        assert {"security", PAGES[code].harm.value} <= set(props["tags"])
        expected = "medium" if PAGES[code].harm is Harm.BLIND else "high"
        assert props["precision"] == expected


def test_a_rules_help_links_to_the_docs_site_not_to_sibling_files() -> None:
    rules = _log()["runs"][0]["tool"]["driver"]["rules"]
    for rule in rules:
        for target in re.findall(r"\]\(([^)]+)\)", rule["help"]["markdown"]):
            assert target.startswith("https://"), (rule["id"], target)


def test_github_reads_block_data_loss_as_critical_and_warnings_as_medium() -> None:
    rules = {r["id"]: r for r in _log()["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["NOT_RETIRED"]["properties"]["security-severity"] == "9.0"
    assert rules["SPECULATIVE_PRUNE"]["properties"]["security-severity"] == "7.0"
    assert rules["ORPHANED_BY_KEEP"]["properties"]["security-severity"] == "4.0"


def test_a_removal_from_a_file_that_stays_stands_on_the_candidates_line() -> None:
    base, head = Source("deploy/app.yaml", 12), Source("deploy/app.yaml", 9)
    (result,) = _results(_log(_finding("data", source=base, head=head)))
    region = result["locations"][0]["physicalLocation"]
    assert region["artifactLocation"]["uri"] == "deploy/app.yaml"
    assert region["region"] == {"startLine": 9}
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["region"] == {"startLine": 12}
    assert related["message"]["text"] == "declared here in base"


def test_a_removed_file_stands_on_the_base_file_and_line() -> None:
    base = Source("./deploy/gone.yaml", 4)
    head = Source("deploy/gone.yaml", FILE_LEVEL)
    (result,) = _results(_log(_finding("data", source=base, head=head)))
    location = result["locations"][0]["physicalLocation"]
    assert location == {
        "artifactLocation": {"uri": "deploy/gone.yaml", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 4},
    }


def test_an_object_only_live_or_from_stdin_has_no_location() -> None:
    results = _results(_log(_finding("a", source=None), _finding("b", source=Source("<stdin>", 2))))
    assert [r["locations"] for r in results] == [[], []]


def test_the_fingerprint_follows_the_object_not_the_line() -> None:
    moved = _results(
        _log(
            _finding("data", source=Source("a.yaml", 3)),
            _finding("data", source=Source("b.yaml", 40)),
            _finding("other", source=Source("a.yaml", 3)),
        )
    )
    prints = [r["partialFingerprints"]["pruneGateObject/v1"] for r in moved]
    assert prints[0] == prints[1] != prints[2]


def test_an_exemption_is_a_suppressed_result_with_its_reason() -> None:
    quiet = Exempted(
        _finding("old", source=Source("a.yaml", 1)), "migrated to new-db", dt.date(2027, 1, 31)
    )
    results = _results(_log(exempted=(quiet,)))
    (suppression,) = results[0]["suppressions"]
    assert suppression["kind"] == "external"
    assert "migrated to new-db" in suppression["justification"]
    assert "2027-01-31" in suppression["justification"]


def test_the_message_says_what_why_and_the_fix() -> None:
    (result,) = _results(_log(_finding("data", source=Source("a.yaml", 1))))
    text = result["message"]["text"]
    assert text.startswith("PersistentVolumeClaim app/data: claim app/data would be deleted")
    assert "- cause: removed from the manifests" in text
    assert text.endswith("fix: retire it in two stages")


def test_severities_map_to_sarif_levels() -> None:
    base = _finding("data", source=Source("a.yaml", 1))
    results = _results(
        _log(*(replace(base, severity=s) for s in (Severity.BLOCK, Severity.DEFER, Severity.WARN)))
    )
    assert [r["level"] for r in results] == ["error", "warning", "note"]


def _empty() -> CheckResult:
    today = dt.date(2026, 12, 2)
    return check_objects([], [], context=Context.MERGED, policy=Policy(), today=today)


def test_an_allowed_run_is_a_valid_log_with_no_results() -> None:
    log = sarif_data(_empty().decision, context=Context.MERGED, base="a", head="b")
    validate(log)
    assert _results(log) == []
    assert log["runs"][0]["invocations"][0]["properties"]["verdict"] == "allow"


# --- the CLI ----------------------------------------------------------------------------------


def test_gate_check_writes_sarif_beside_its_report(tmp_path: Path) -> None:
    out = tmp_path / "gate.sarif"
    result = gate(*CHECK_EXAMPLE, "--sarif", str(out))
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("BLOCK")  # the report on stdout is still the text one
    log = json.loads(out.read_text("utf-8"))
    validate(log)
    codes = {r["ruleId"] for r in _results(log)}
    assert "NOT_RETIRED" in codes
    for r in _results(log):
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri.startswith("examples/incident/")  # relative to the repository, as it wants


def test_format_sarif_on_stdout(tmp_path: Path) -> None:
    result = gate(*CHECK_EXAMPLE, "-o", "sarif")
    assert result.returncode == 1, result.stderr
    validate(json.loads(result.stdout))


def test_an_unwritable_sarif_file_is_exit_2(tmp_path: Path) -> None:
    result = gate(
        "check",
        "--base-manifests",
        str(EXAMPLE / "base"),
        "--head-manifests",
        str(EXAMPLE / "base"),
        "--sarif",
        str(tmp_path / "missing-dir" / "gate.sarif"),
    )
    assert result.returncode == 2
    assert "--sarif" in result.stderr and "cannot write it" in result.stderr
