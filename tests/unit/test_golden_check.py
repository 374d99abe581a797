"""Golden cases for `gate check`: one directory per case, found automatically (as Black's
`tests/data/cases` are), run through the real CLI.

Each case in tests/golden/check/NAME/ is:
- `base/` and `head/`: the rendered manifests compared (`--base-manifests base
  --head-manifests head`, rendered mode, run from the case's directory so that the labels and
  the findings' sources are the relative paths);
- `prune-gate.yaml` (optional): the policy, read from the working directory as outside CI;
- `args` (optional): more command-line arguments, one per line (`--context`, `--force`...);
- `README`: what the case shows, one line;
- `expected.json`: the JSON report (`--format json`); the exit code must be its verdict's.

Adding a rule is one record, its function and a case here. `UPDATE_GOLDEN=1 pytest
tests/unit/test_golden_check.py` writes the expected files (as for tests/golden/admission and
tests/golden/report); review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from gate.engine.verdict import Verdict
from tests.unit.helpers import cli_runner

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "check"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "base").is_dir())

#: The CI environment `gate check` reads (`gate.sources.github`): a case runs outside CI.
CI_VARIABLES = ("GITHUB_ACTIONS", "GITHUB_EVENT_NAME", "GITHUB_EVENT_PATH", "GITHUB_OUTPUT")


def run_case(case: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any]]:
    """`gate check` on the case, from its directory: (exit code, JSON report)."""
    for name in (*CI_VARIABLES, "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(case)
    args_file = case / "args"
    extra = args_file.read_text(encoding="utf-8").split("\n") if args_file.is_file() else []
    argv = ["check", "--base-manifests", "base", "--head-manifests", "head", "--format", "json"]
    result = cli_runner().invoke(main, [*argv, *(a for a in extra if a)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def test_every_case_has_its_parts() -> None:
    assert len(CASES) >= 20, CASES
    for name in CASES:
        parts = {p.name for p in (GOLDEN / name).iterdir()}
        assert {"base", "head", "README", "expected.json"} <= parts, name
        assert parts <= {"base", "head", "README", "expected.json", "args", "prune-gate.yaml"}


@pytest.mark.parametrize("case", CASES)
def test_golden_check(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    code, report = run_case(GOLDEN / case, monkeypatch)
    path = GOLDEN / case / "expected.json"
    if UPDATE:
        text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing {path}: run with UPDATE_GOLDEN=1 to create it"
    assert report == json.loads(path.read_text(encoding="utf-8"))
    assert code == Verdict(report["verdict"]).exit_code, (code, report["verdict"])
