"""A page per finding code: `gate codes CODE`, docs/codes/, and the SARIF rules' help say the same,
from `gate.model.codepages`, with an example the real rule makes (tests/unit/code_examples.py).

`UPDATE_GOLDEN=1 pytest tests/unit/test_codes_pages.py` rewrites `gate/model/codeexamples.py`
from the scenarios; `scripts/gen-code-docs` rewrites docs/codes/. Review the diff of both.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gate.cli import main
from gate.cli.codes import near_codes
from gate.model import codeexamples
from gate.model.codepages import (
    DOCS_BASE,
    PAGES,
    SECURITY_SEVERITY,
    Harm,
    docs_url,
    security_severity,
)
from gate.model.findings import CODES, Code, Severity
from gate.report.codepage import index_markdown, page_markdown, page_text
from tests.unit import code_examples
from tests.unit.helpers import cli_runner

REPO = Path(__file__).resolve().parents[2]
EXAMPLES_MODULE = REPO / "gate" / "model" / "codeexamples.py"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
GEN = REPO / "scripts" / "gen-code-docs"
DOCS = REPO / "docs" / "codes"


# --- the pages ---------------------------------------------------------------------------------


def test_every_code_has_a_page_with_every_part() -> None:
    assert list(PAGES) == list(Code)
    for code, page in PAGES.items():
        assert page.what and page.why and page.where, code
        assert page.evidence and page.fixes, code
        assert code not in page.see_also, code
        for text in (page.what, page.why, page.where, *page.evidence, *page.fixes):
            assert "\n" not in text and text == text.strip(), (code, text)
            assert text.count("`") % 2 == 0, (code, text)  # inline code closed


def test_every_example_is_what_the_rule_makes_now() -> None:
    """The examples the pages show are made again here, by the real rules: a rule whose output
    changes fails this until the examples are written again (UPDATE_GOLDEN=1)."""
    made = {code: code_examples.example(code) for code in Code}
    text = code_examples.module_text(made)
    if UPDATE:
        EXAMPLES_MODULE.write_text(text, encoding="utf-8")
    assert EXAMPLES_MODULE.read_text(encoding="utf-8") == text, (
        "gate/model/codeexamples.py is stale: run UPDATE_GOLDEN=1 pytest "
        "tests/unit/test_codes_pages.py and review the diff"
    )
    if not UPDATE:  # the module imported above is the one just written only on the next run
        assert made == codeexamples.EXAMPLES


def test_each_example_shows_its_own_code_at_its_default_severity_or_the_webhooks_refusal() -> None:
    for code, (door, text) in codeexamples.EXAMPLES.items():
        if door == code_examples.CHECK:
            severity, shown, _ = text.split(" ", 2)
            assert shown == code.value, code
            assert severity in {s.value for s in Severity}, code
            assert "\n  fix: " in text, code  # every finding says its fix
        else:
            assert door == code_examples.WEBHOOK
            assert text.startswith("prune-gate ") and f" {code.value}: " in f" {text}", code


def test_the_module_writer_cuts_and_quotes_so_the_text_comes_back() -> None:
    """The generated module's literals give back the text, whatever its quotes and words."""
    tricky = 'a "quoted" word, it\'s \\ odd\n  - ' + "x" * 300 + ' end "' + "'" * 3
    source = code_examples.module_text({Code.PV_BOUND: ("check", tricky)})
    namespace: dict[str, object] = {}
    exec(compile(source, "codeexamples.py", "exec"), namespace)
    assert namespace["EXAMPLES"] == {Code.PV_BOUND: ("check", tricky)}
    assert max(len(line) for line in source.splitlines()) <= 100


def test_security_severity_follows_the_default_severity_and_the_harm() -> None:
    for code in Code:
        score = float(security_severity(code))
        severity = CODES[code].severity
        if severity is Severity.BLOCK and PAGES[code].harm is Harm.DATA:
            assert 8.0 <= score <= 9.0, code
        elif severity is Severity.BLOCK:
            assert 6.0 <= score < 9.0, code
        elif severity is Severity.DEFER:
            assert score == 7.0, code
        else:
            assert 4.0 <= score <= 5.0, code
    assert {s for s, _ in SECURITY_SEVERITY} == {Severity.BLOCK, Severity.DEFER, Severity.WARN}
    assert all(re.fullmatch(r"\d+\.\d", s) for s in SECURITY_SEVERITY.values())


def test_the_docs_url_is_the_one_constant_and_mkdocs_style() -> None:
    assert DOCS_BASE.endswith("/codes/") and DOCS_BASE.startswith("https://")
    assert docs_url(Code.NOT_RETIRED) == DOCS_BASE + "NOT_RETIRED/"


# --- gate codes --------------------------------------------------------------------------------


def test_gate_codes_lists_every_code_and_the_stateful_kinds() -> None:
    done = cli_runner().invoke(main, ["codes"])
    assert done.exit_code == 0, done.output
    listed = [line.split()[0] for line in done.stdout.splitlines()[: len(Code)]]
    assert listed == [c.value for c in Code]
    assert "Stateful custom kinds" in done.stdout
    assert "gate codes CODE" in done.stdout


@pytest.mark.parametrize("code", list(Code), ids=str)
def test_gate_codes_code_prints_its_page(code: Code) -> None:
    done = cli_runner().invoke(main, ["codes", code.value])
    assert done.exit_code == 0, done.output
    assert done.stdout == page_text(code) + "\n"
    page = PAGES[code]
    assert done.stdout.startswith(f"{code.value}: {CODES[code].meaning}\n")
    for title in ("What it means:", "Why it matters:", "Evidence the finding carries:", "Fixes:"):
        assert f"\n{title}\n" in done.stdout, title
    assert " ".join(page.why.split()[:6]) in " ".join(done.stdout.split())
    assert codeexamples.EXAMPLES[code][1].split("\n")[0] in done.stdout
    assert docs_url(code) in done.stdout


@pytest.mark.parametrize("spelling", ["not_retired", "Not-Retired", " NOT_RETIRED "])
def test_gate_codes_takes_any_case(spelling: str) -> None:
    done = cli_runner().invoke(main, ["codes", spelling])
    assert done.exit_code == 0, done.output
    assert done.stdout == page_text(Code.NOT_RETIRED) + "\n"


def test_an_unknown_code_is_exit_2_with_the_near_ones() -> None:
    done = cli_runner().invoke(main, ["codes", "NOT_RETIRD"])
    assert done.exit_code == 2
    assert done.stdout == ""
    assert "no finding code 'NOT_RETIRD'" in done.stderr
    assert "did you mean NOT_RETIRED?" in done.stderr and "`gate codes` lists" in done.stderr
    nothing = cli_runner().invoke(main, ["codes", "QQQQ"])
    assert nothing.exit_code == 2 and "did you mean" not in nothing.stderr


def test_near_codes_finds_parts_and_misspellings() -> None:
    assert near_codes("FENCE") == ["SPECULATION_FENCE"]
    assert near_codes("CLAIM_MOUNTD") == ["CLAIM_MOUNTED"]
    assert "KUSTOMIZATION_REMOVED" in near_codes("KUSTOMIZATION")
    assert near_codes("ZZZ") == []


# --- the docs ----------------------------------------------------------------------------------


def test_page_markdown_has_every_section_and_relative_links() -> None:
    for code in Code:
        text = page_markdown(code)
        assert text.startswith(f"# {code.value}\n")
        for title in ("What it means", "Why it matters", "Evidence the finding carries"):
            assert f"\n## {title}\n" in text
        assert "\n## Fixes\n" in text and "\n## Example\n" in text
        assert text.count("```") % 2 == 0
        for target in re.findall(r"\]\(([^)]+)\)", text):
            assert re.fullmatch(r"[A-Z_]+\.md", target), target  # a sibling page
            assert Code(target.removesuffix(".md"))
        for target in re.findall(r"\]\(([^)]+)\)", page_markdown(code, links=False)):
            assert target.startswith(DOCS_BASE)


def test_index_lists_every_code_with_its_page() -> None:
    text = index_markdown()
    for code in Code:
        assert f"| [{code.value}]({code.value}.md) | {CODES[code].severity.value} | " in text


def test_the_docs_are_what_the_generator_writes() -> None:
    """docs/codes/ is generated from the pages: a page edited without `scripts/gen-code-docs`
    (or by hand in docs/) fails here with the command to run."""
    done = subprocess.run(
        [sys.executable, str(GEN), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    expected = {"index.md", *(f"{c.value}.md" for c in Code)}
    assert {p.name for p in DOCS.iterdir()} == expected
    assert (DOCS / "index.md").read_text(encoding="utf-8") == index_markdown()
    for code in Code:
        assert (DOCS / f"{code.value}.md").read_text(encoding="utf-8") == page_markdown(code)


def test_the_generator_check_catches_drift(tmp_path: Path) -> None:
    """--check can fail: a stale page in another root is named, and writing fixes it."""
    (tmp_path / "docs" / "codes").mkdir(parents=True)
    stale = tmp_path / "docs" / "codes" / "PV_BOUND.md"
    stale.write_text("old\n", encoding="utf-8")
    (tmp_path / "docs" / "codes" / "GONE.md").write_text("a code no more\n", encoding="utf-8")
    check = [sys.executable, str(GEN), "--check", "--root", str(tmp_path)]
    done = subprocess.run(check, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "docs/codes/PV_BOUND.md" in done.stderr and "docs/codes/GONE.md" in done.stderr
    assert "scripts/gen-code-docs" in done.stderr
    write = [sys.executable, str(GEN), "--root", str(tmp_path)]
    assert subprocess.run(write, capture_output=True, check=False).returncode == 0
    assert subprocess.run(check, capture_output=True, check=False).returncode == 0
    assert stale.read_text(encoding="utf-8") == page_markdown(Code.PV_BOUND)
