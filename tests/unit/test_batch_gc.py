"""`gate check` pauses the cyclic garbage collector (`gate.speed.without_cyclic_gc`) and gives it
back as it found it, after an answer and after an error alike.

That the collector is off while a check reads, and what that saves, is a figure, not a unit
test: `python -m bench.bench_internals` prints it (collections during a check, with and without
the pause), and `python -m bench.bench_speedups` times it.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli import main
from gate.speed import without_cyclic_gc

INCIDENT = Path(__file__).resolve().parents[2] / "examples" / "incident"


def test_a_check_in_process_gives_its_verdict_and_the_collector_back() -> None:
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
    assert "CONSUMER_REMAINS" in result.output
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
