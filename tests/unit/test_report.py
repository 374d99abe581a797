"""Reports: golden files per scenario and format, plus the properties every format keeps.

Each scenario is one `tests/golden/report/<case>.case.yaml` (context, revision labels, policy,
base and candidate manifests), with its expected output beside it in `<case>.<format>`, as in
Black's `tests/data/cases`. `UPDATE_GOLDEN=1 pytest tests/unit/test_report.py` rewrites the
expected files; review the diff before committing it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.engine.verdict import Decision, Verdict
from gate.model.findings import MEANING, Code, Finding, Severity
from gate.model.objects import Source
from gate.model.refs import ObjectRef
from gate.report import FORMATS, render_report
from gate.report.github import (
    ANNOTATIONS_PER_LEVEL,
    SUMMARY_BUDGET,
    annotation,
    escape_data,
    escape_property,
    step_summary,
)
from gate.report.json import report_data
from gate.sources.manifests import parse_stream
from gate.sources.policyfile import policy_from_dict

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "report"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
TODAY = dt.date(2026, 12, 2)
CASE_KEYS = {"context", "base", "head", "path", "policy", "base_manifests", "candidate_manifests"}
CASES = sorted(p.name.removesuffix(".case.yaml") for p in GOLDEN.glob("*.case.yaml"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@cache
def load_case(name: str) -> tuple[CheckResult, Context, str, str]:
    """Run `gate check` on a case file: the result, its context and revision labels."""
    spec: dict[str, Any] = yaml.safe_load((GOLDEN / f"{name}.case.yaml").read_text("utf-8"))
    unknown = set(spec) - CASE_KEYS
    assert not unknown, f"{name}.case.yaml: unknown keys {sorted(unknown)}"
    path = spec.get("path", "deploy/app.yaml")
    context = Context(spec["context"])
    policy = policy_from_dict(spec["policy"], name) if "policy" in spec else Policy()
    result = check_objects(
        parse_stream(spec["base_manifests"], path),
        parse_stream(spec["candidate_manifests"], path),
        context=context,
        policy=policy,
        today=TODAY,
    )
    return result, context, str(spec["base"]), str(spec["head"])


def render_case(name: str, fmt: str, color: bool = False) -> str:
    result, context, base, head = load_case(name)
    return render_report(result, fmt, context=context, base=base, head=head, color=color)


@cache
def report_schema() -> dict[str, Any]:
    text = resources.files("gate").joinpath("schemas/report.schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def test_cases_exist() -> None:
    assert {"incident", "speculative-defer", "allow", "warn", "exemption", "escaping"} <= set(CASES)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, fmt: str) -> None:
    rendered = render_case(case, fmt) + "\n"
    path = GOLDEN / f"{case}.{fmt}"
    if UPDATE:
        path.write_text(rendered, encoding="utf-8", newline="\n")
    assert path.is_file(), f"missing {path}: run with UPDATE_GOLDEN=1 to create it"
    assert rendered == path.read_text(encoding="utf-8")


def test_no_stray_golden_files() -> None:
    expected = {f"{c}.case.yaml" for c in CASES} | {f"{c}.{f}" for c in CASES for f in FORMATS}
    assert {p.name for p in GOLDEN.iterdir()} == expected


def test_cases_reach_every_verdict() -> None:
    verdicts = {load_case(c)[0].decision.verdict for c in CASES}
    assert verdicts == set(Verdict)
    incident = load_case("incident")[0].decision
    assert {f.code for f in incident.findings} >= {Code.NOT_RETIRED, Code.CONSUMER_REMAINS}
    assert load_case("exemption")[0].decision.exempted


# --- json -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_golden_json_validates_against_the_schema(case: str) -> None:
    data = json.loads((GOLDEN / f"{case}.json").read_text("utf-8"))
    jsonschema.Draft202012Validator(report_schema()).validate(data)


def test_schema_is_valid_and_lists_every_code_with_its_meaning() -> None:
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    codes = {c["const"]: c["description"] for c in schema["$defs"]["code"]["oneOf"]}
    assert codes == {c.value: MEANING[c] for c in Code}
    assert set(schema["properties"]["verdict"]["enum"]) == {v.value for v in Verdict}
    assert set(schema["properties"]["context"]["enum"]) == {c.value for c in Context}


def test_json_keys_in_documented_order() -> None:
    result, context, base, head = load_case("incident")
    data = report_data(result.decision, context=context, base=base, head=head)
    assert list(data) == list(report_schema()["required"])
    finding = data["findings"][0]
    assert list(finding) == report_schema()["$defs"]["finding"]["required"]
    assert list(finding["object"]) == ["apiVersion", "kind", "namespace", "name"]


def test_json_cluster_scoped_namespace_is_null() -> None:
    data = json.loads(render_case("exemption", "json"))
    assert data["exempted"][0]["object"]["namespace"] is None


# --- text -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_colour_only_when_asked(case: str) -> None:
    plain = render_case(case, "text")
    coloured = render_case(case, "text", color=True)
    assert "\x1b" not in plain
    assert "\x1b[" in coloured
    assert ANSI.sub("", coloured) == plain


@pytest.mark.parametrize("case", CASES)
def test_text_starts_with_the_verdict_and_ends_with_the_exit_code(case: str) -> None:
    result = load_case(case)[0]
    lines = render_case(case, "text").splitlines()
    verdict = result.decision.verdict
    assert lines[0].startswith(f"{verdict.value.upper()}: ")
    assert lines[-1].startswith(f"exit {verdict.exit_code} ({verdict.value}): ")


@pytest.mark.parametrize("fmt", ["text", "markdown", "github"])
def test_control_characters_never_reach_the_output(fmt: str) -> None:
    out = render_case("escaping", fmt)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", out)
    assert "\\x1b[31m" in out


# --- github -----------------------------------------------------------------------------------


def test_escaping_follows_actions_core() -> None:
    assert escape_data("50%\r\nnext: a, b") == "50%25%0D%0Anext: a, b"
    assert escape_property("a: b, 100%\n") == "a%3A b%2C 100%25%0A"


@pytest.mark.parametrize("case", CASES)
def test_one_annotation_per_finding_and_nothing_else_is_a_command(case: str) -> None:
    result = load_case(case)[0]
    lines = render_case(case, "github").splitlines()
    commands = [line for line in lines if line.startswith("::")]
    assert len(commands) == len(result.decision.findings)
    levels = [line[2:].split(" ", 1)[0] for line in commands]
    expected = {Severity.BLOCK: "error", Severity.DEFER: "warning", Severity.WARN: "warning"}
    assert levels == [expected[f.severity] for f in result.decision.findings]


def _finding(name: str, source: bool = True) -> Finding:
    return Finding(
        code=Code.NOT_RETIRED,
        ref=ObjectRef("", "PersistentVolumeClaim", "app", name),
        message=f"claim app/{name} would be deleted but was never retired",
        evidence=("cause: removed from the manifests",),
        remediation="retire it in two stages",
        api_version="v1",
        source=Source("deploy/app.yaml", 3) if source else None,
    )


def test_annotation_without_source_has_no_file() -> None:
    line = annotation(_finding("data", source=False))
    assert line.startswith("::error title=NOT_RETIRED PersistentVolumeClaim app/data::")


def test_github_says_when_annotations_will_be_hidden() -> None:
    result = _with(*(_finding(f"d{i:02}") for i in range(ANNOTATIONS_PER_LEVEL + 1)))
    out = render_report(result, "github", context=Context.MERGED, base="a", head="b")
    assert f"GitHub shows at most {ANNOTATIONS_PER_LEVEL} annotations" in out
    assert "11 error here" in out


def _with(*findings: Finding) -> CheckResult:
    """A real (empty) result carrying these findings."""
    empty = check_objects([], [], context=Context.MERGED, policy=Policy(), today=TODAY)
    return replace(empty, decision=Decision(Verdict.BLOCK, tuple(findings)))


# --- markdown and the step summary ------------------------------------------------------------


def test_step_summary_is_markdown_with_a_final_newline() -> None:
    result, context, base, head = load_case("incident")
    summary = step_summary(result, context=context, base=base, head=head)
    assert summary == render_case("incident", "markdown") + "\n"


def test_step_summary_fits_githubs_cap() -> None:
    big = replace(_finding("x"), message="m" * 2000, evidence=("e" * 2000,) * 3)
    result = _with(*(replace(big, ref=replace(big.ref, name=f"c{i}")) for i in range(1000)))
    summary = step_summary(result, context=Context.MERGED, base="a", head="b")
    assert len(summary.encode()) <= SUMMARY_BUDGET
    assert "see the job log" in summary
    assert summary.count("· **block** `NOT_RETIRED`") > 100  # the plan's rows, cut to fit


def test_commands_become_code_blocks_and_edits_say_who_makes_them() -> None:
    """Commands come from the finding's actions, never from its prose: each is a shell block
    under the step that names who runs it."""
    out = render_case("warn", "markdown")
    assert (
        "at kubectl, run:\n   ```sh\n   kubectl delete -n app secret/db-credentials\n   ```" in out
    )
    result = load_case("warn")[0]
    kept = next(f for f in result.decision.findings if f.code is Code.ORPHANED_BY_KEEP)
    assert kept.commands() == [
        "kubectl get -n app secret/db-credentials -o yaml",
        "kubectl delete -n app secret/db-credentials",
    ]


def test_unknown_format_is_an_error() -> None:
    result = load_case("allow")[0]
    with pytest.raises(ValueError, match="unknown report format 'yaml'"):
        render_report(result, "yaml", context=Context.PREVIEW, base="a", head="b")
