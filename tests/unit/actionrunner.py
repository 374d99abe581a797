"""Run the composite Action (`action.yml`) the way a GitHub runner runs it, for the tests.

Each step's `if` is evaluated, `${{ ... }}` in its `env` is expanded from the inputs (their
defaults where not given), `runner.temp`, `github.action_path` and earlier steps' outputs, and its
`run` goes to `bash --noprofile --norc -eo pipefail` (GitHub's `shell: bash`) in the workspace,
with the GITHUB_* environment of a workflow run: the event name and payload file, GITHUB_SHA,
GITHUB_OUTPUT and GITHUB_STEP_SUMMARY (fresh files per step, as the runner gives them). An
expression this runner does not know is an error, never a guess.

The install step is replaced by a virtualenv whose `gate` is this checkout's (its real
`pip install` is tested in test_packaging, against the package index).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_COMPARE = re.compile(r"^inputs\.([\w-]+)\s*(==|!=)\s*'([^']*)'$")
_OUTCOME = re.compile(r"^steps\.([\w-]+)\.outcome\s*(==|!=)\s*'([^']*)'$")


@dataclass
class StepRun:
    name: str
    code: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    summary: str


@dataclass
class ActionRun:
    steps: list[StepRun] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def code(self) -> int:
        """The action's result: the first failing step's exit code, else 0."""
        return next((s.code for s in self.steps if s.code != 0), 0)

    @property
    def stdout(self) -> str:
        return "".join(s.stdout for s in self.steps)

    @property
    def stderr(self) -> str:
        return "".join(s.stderr for s in self.steps)

    @property
    def summary(self) -> str:
        return "".join(s.summary for s in self.steps)


def run_action(
    workspace: Path,
    runner_temp: Path,
    *,
    event: str,
    payload: dict[str, Any],
    sha: str,
    inputs: dict[str, str] | None = None,
) -> ActionRun:
    """Run every step of action.yml as a runner would, until one fails (as `runs` steps do)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text("utf-8"))
    given = inputs or {}
    unknown = set(given) - set(action["inputs"])
    assert not unknown, f"not inputs of action.yml: {sorted(unknown)}"
    values = {k: given.get(k, str(v.get("default", ""))) for k, v in action["inputs"].items()}
    event_path = runner_temp / "event.json"
    event_path.write_text(json.dumps(payload), encoding="utf-8")
    _fake_install(runner_temp / "prune-gate-venv")
    steps: dict[str, dict[str, str]] = {}
    result = ActionRun()
    for i, step in enumerate(action["runs"]["steps"]):
        if step["name"] == "Install prune-gate" or "uses" in step:
            continue  # the install is faked; another action (the cache) is GitHub's to run
        if not _condition(step.get("if", ""), values, steps):
            continue
        context = {"runner.temp": str(runner_temp), "github.action_path": str(ROOT)}
        env_spec: dict[str, str] = step.get("env", {})
        env = {k: _expand(str(v), values, context, steps) for k, v in env_spec.items()}
        output, summary = runner_temp / f"output-{i}", runner_temp / f"summary-{i}"
        output.write_text("")
        summary.write_text("")
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))},
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": event,
            "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_SHA": sha,
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(runner_temp),
            **env,
        }
        full_env.pop("PYTHONPATH", None)
        script = runner_temp / f"step-{i}.sh"
        script.write_text(step["run"], encoding="utf-8")
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        outs = _outputs(output.read_text("utf-8"))
        if "id" in step:
            steps[step["id"]] = outs
        result.steps.append(
            StepRun(
                step["name"], done.returncode, done.stdout, done.stderr, outs, summary.read_text()
            )
        )
        if done.returncode != 0:
            break
    result.outputs = {
        k: _expand(str(v["value"]), values, {}, steps) for k, v in action["outputs"].items()
    }
    return result


def _fake_install(venv: Path) -> None:
    """A venv folder whose bin/gate runs this checkout's gate."""
    gate = shutil.which("gate") or ""
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    target = venv / "bin" / "gate"
    if gate:
        target.unlink(missing_ok=True)
        target.symlink_to(gate)
    else:
        target.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gate "$@"\n')
        target.chmod(0o755)


def _condition(expr: str, inputs: dict[str, str], ran: dict[str, dict[str, str]]) -> bool:
    """An `if` of `&&`-joined clauses: `inputs.NAME ==/!= 'v'`, `steps.ID.outcome ==/!= 'v'`
    (success when ID ran, else skipped: this runner stops at the first failing step) and
    `!cancelled()` (true: nothing is cancelled here)."""
    return all(_clause(c.strip(), inputs, ran) for c in expr.split("&&") if expr.strip())


def _clause(expr: str, inputs: dict[str, str], ran: dict[str, dict[str, str]]) -> bool:
    if expr == "!cancelled()":
        return True
    if m := _OUTCOME.match(expr):
        step, op, literal = m.groups()
        return (("success" if step in ran else "skipped") == literal) == (op == "==")
    m = _COMPARE.match(expr)
    assert m, f"the test runner does not know this `if`: {expr!r}"
    name, op, literal = m.groups()
    return (inputs[name] == literal) == (op == "==")


def _expand(
    text: str, inputs: dict[str, str], context: dict[str, str], steps: dict[str, dict[str, str]]
) -> str:
    def one(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr.startswith("steps."):
            step, _, rest = expr.removeprefix("steps.").partition(".outputs.")
            return steps.get(step, {}).get(rest, "")
        assert expr in context, f"the test runner does not know ${{{{ {expr} }}}}"
        return context[expr]

    return _EXPR.sub(one, text)


def _outputs(text: str) -> dict[str, str]:
    """`name=value` lines (the only form gate and the steps write)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        assert sep, f"not a name=value output line: {line!r}"
        out[name] = value
    return out
