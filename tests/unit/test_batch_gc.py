"""`gate check` runs with the cyclic garbage collector paused, and gives it back when it returns."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import gate.app.sides
from gate.cli import main
from gate.cli.common import without_cyclic_gc

INCIDENT = Path(__file__).resolve().parents[2] / "examples" / "incident"


def test_a_check_reads_with_the_collector_paused_and_resumes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    read = gate.app.sides.read_path  # type: ignore[attr-defined]

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return read(*args, **kwargs)

    monkeypatch.setattr(gate.app.sides, "read_path", spy)
    assert gc.isenabled()
    result = CliRunner().invoke(
        main,
        [
            "check",
            "--context",
            "speculative",
            "--base-manifests",
            str(INCIDENT / "base"),
            "--head-manifests",
            str(INCIDENT / "candidate"),
        ],
    )
    assert result.exit_code == 1, result.output  # the incident is blocked
    assert seen == [False, False]
    assert gc.isenabled()


def test_the_collector_comes_back_after_an_error_and_stays_off_if_it_was() -> None:
    @without_cyclic_gc
    def boom() -> None:
        assert not gc.isenabled()
        raise ValueError("x")

    with pytest.raises(ValueError):
        boom()
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(ValueError):
            boom()
        assert not gc.isenabled()
    finally:
        gc.enable()
