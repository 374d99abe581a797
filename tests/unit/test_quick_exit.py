"""`gate` ends with a quick exit that keeps everything a normal one gives: the output, the exit
code, and what the exit handlers do (the parse cache is written in one)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

INCIDENT = Path(__file__).resolve().parents[2] / "examples" / "incident"


def gate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate", *args], capture_output=True, text=True, env=env, check=False
    )


def test_a_check_writes_its_report_its_code_and_its_parse_cache(tmp_path: Path) -> None:
    env = {**os.environ, "PRUNE_GATE_PARSE_CACHE": str(tmp_path / "parsed")}
    env.pop("GITHUB_ACTIONS", None)
    done = gate(
        "check",
        "--context",
        "speculative",
        "-o",
        "json",
        "--base-manifests",
        str(INCIDENT / "base"),
        "--head-manifests",
        str(INCIDENT / "candidate"),
        env=env,
    )
    assert done.returncode == 1, done.stderr  # blocked
    report = json.loads(done.stdout)  # whole: nothing was lost unflushed
    assert report["findings"]
    (cache,) = (tmp_path / "parsed").glob("*.sqlite")
    with closing(sqlite3.connect(cache)) as db:
        (kept,) = db.execute("SELECT count(*) FROM entries").fetchone()
    assert kept == len(list(INCIDENT.rglob("*.yaml")))  # the exit handler wrote them


def test_usage_errors_and_plain_exits_keep_their_codes() -> None:
    env = dict(os.environ)
    assert gate("--version", env=env).returncode == 0
    wrong = gate("check", "--no-such-option", env=env)
    assert wrong.returncode == 2
    assert "No such option" in wrong.stderr


def test_a_profiled_run_still_gets_its_profile() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-m", "gate", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "function calls" in done.stdout  # cProfile's report, printed after the program
