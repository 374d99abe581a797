"""The README's example output is what `make example` really prints: docs that cannot drift."""

from __future__ import annotations

from pathlib import Path

from gate.engine.check import check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.report import render_report
from gate.sources.clock import utc_today
from gate.sources.manifests import read_path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_shows_the_real_example_output() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("`make example` prints:\n\n```text\n")
    block = readme[start : readme.index("\n```\n", start)].splitlines()[4:]
    shown = "\n".join(block).split("\n\ngate exited")[0]
    base, head = "examples/incident/base", "examples/incident/candidate"
    result = check_objects(
        read_path(ROOT / base),
        read_path(ROOT / head),
        context=Context.SPECULATIVE,
        policy=Policy(),
        today=utc_today(),
    )
    real = render_report(result, "text", context=Context.SPECULATIVE, base=base, head=head)
    assert shown == real.replace(str(ROOT) + "/", "")
