"""What `pip install prune-gate` brings and what `gate` does when it breaks.

`gate check` runs on every merge-queue candidate: it must install and import none of the webhook's
server stack, which is an extra (`pip install 'prune-gate[webhook]'`). An exception no command
expected is a bug and exits 3, never 0 (pass) or 1 (blocked by policy).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gate.cli import WEBHOOK_EXTRA
from gate.engine.verdict import EXIT_BUG

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "incident"
CHECK_EXAMPLE = [
    "check",
    "--base-manifests",
    str(EXAMPLE / "base"),
    "--head-manifests",
    str(EXAMPLE / "candidate"),
    "--context",
    "speculative",
]
#: The webhook extra as distributions (WEBHOOK_EXTRA names their top-level modules).
EXTRA_DISTRIBUTIONS = {"cryptography", "h11", "h2", "prometheus-client"}
NEEDS_EXTRA = "error: the webhook needs its extra: pip install 'prune-gate[webhook]'\n"


def python(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run `python -c CODE ARGS` on this checkout, in `cwd`, away from any GitHub Actions
    environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
        timeout=120,
    )


# Runs `gate ARGS` through the console script's entry point, then prints which of the webhook's
# modules got imported (a JSON list, last line of stdout) and exits with gate's exit code.
_LOADED_AFTER = """
import json, sys
from gate.cli import WEBHOOK_EXTRA, main
try:
    main(sys.argv[1:], prog_name="gate")
except SystemExit as exc:
    code = exc.code
roots = {name.split(".")[0] for name in sys.modules}
print(json.dumps(sorted(roots & {*WEBHOOK_EXTRA, "werkzeug", "webhook"})))
sys.exit(code)
"""


def test_gate_check_imports_none_of_the_webhooks_dependencies() -> None:
    helped = python(_LOADED_AFTER, "check", "--help")
    assert helped.returncode == 0, helped.stderr
    assert json.loads(helped.stdout.splitlines()[-1]) == []
    checked = python(_LOADED_AFTER, *CHECK_EXAMPLE)
    assert checked.returncode == 1, checked.stderr  # the bundled incident is blocked
    assert "CONSUMER_REMAINS" in checked.stdout
    assert json.loads(checked.stdout.splitlines()[-1]) == []


def test_gate_help_lists_webhook_without_loading_it() -> None:
    result = python(_LOADED_AFTER, "--help")
    assert result.returncode == 0, result.stderr
    # click pads the names to the longest command's
    assert re.search(r"\n  webhook +The admission webhook", result.stdout)
    assert json.loads(result.stdout.splitlines()[-1]) == []


# As _LOADED_AFTER, with the webhook extra not installed (a None in sys.modules makes an import
# fail as if the package were absent).
_WITHOUT_EXTRA = """
import sys
from gate.cli import WEBHOOK_EXTRA, main
for name in WEBHOOK_EXTRA:
    sys.modules[name] = None
main(sys.argv[1:], prog_name="gate")
"""


def test_webhook_serve_without_its_extra_says_how_to_install_it() -> None:
    result = python(_WITHOUT_EXTRA, "webhook", "serve", "--self-signed")
    assert result.returncode == 2
    assert result.stderr == NEEDS_EXTRA
    assert result.stdout == ""
    listed = python(_WITHOUT_EXTRA, "--help")
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"\n  webhook +The admission webhook", listed.stdout)


def test_webhook_commands_load_with_the_extra() -> None:
    result = python(_LOADED_AFTER, "webhook", "serve", "--help")
    assert result.returncode == 0, result.stderr
    assert "--self-signed" in result.stdout
    assert "webhook" in json.loads(result.stdout.splitlines()[-1])


# `gate ARGS` with the manifest reader broken: the crash a bug would cause.
_CRASHING = """
import sys
import gate.cli
import gate.app.sides

def broken(path):
    raise KeyError("spec")

gate.app.sides.read_path = broken
gate.cli.main(sys.argv[1:], prog_name="gate")
"""


def test_a_crash_exits_3_with_a_report_line_and_no_traceback() -> None:
    result = python(_CRASHING, *CHECK_EXAMPLE)
    assert result.returncode == EXIT_BUG == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "error: internal error: KeyError: 'spec' \u2014 this is a bug, please report it at "
    )
    assert "with the command and its output" in lines[0]
    assert "--debug" in lines[0]
    assert "Traceback" not in result.stderr


def test_a_crash_under_debug_shows_the_traceback_then_the_report_line() -> None:
    result = python(_CRASHING, "--debug", *CHECK_EXAMPLE)
    assert result.returncode == 3
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert ", in broken\n" in result.stderr  # the frame that raised
    assert "\nKeyError: 'spec'\n" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: internal error: KeyError: 'spec' \u2014 this is a bug")


# `gate codes` with a GateError no command caught: "could not decide", as everywhere else.
_UNMAPPED_GATE_ERROR = """
import sys
import gate.cli
import gate.model.findings
from gate.model.errors import InputError

class Unreadable(dict):
    def __getitem__(self, key):
        raise InputError("codes.txt:3: cannot read the meanings")

gate.model.findings.MEANING = Unreadable()
gate.cli.main(["codes"], prog_name="gate")
"""


def test_a_gate_error_no_command_caught_still_exits_2_on_one_line() -> None:
    result = python(_UNMAPPED_GATE_ERROR)
    assert result.returncode == 2
    assert result.stderr == "error: codes.txt:3: cannot read the meanings\n"


def test_usage_errors_and_verdicts_keep_their_codes() -> None:
    unknown = python(_CRASHING, "check", "--no-such-option")
    assert unknown.returncode == 2
    assert "No such option" in unknown.stderr
    assert "internal error" not in unknown.stderr
    blocked = python(_LOADED_AFTER, *CHECK_EXAMPLE)
    assert blocked.returncode == 1


def _action_step(name: str) -> tuple[dict[str, str], str]:
    """The `env` and `run` of the composite Action's step called `name`."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    (step,) = (s for s in action["runs"]["steps"] if s["name"] == name)
    return step["env"], step["run"]


def _source_copy(dest: Path) -> Path:
    """The files `pip install` builds from, copied so the build leaves the checkout alone."""
    for tree in ("gate", "webhook"):
        shutil.copytree(ROOT / tree, dest / tree, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "action", dest / "action")
    return dest


def _installed(venv: Path) -> set[str]:
    """Names of the distributions installed in `venv`, lower case."""
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, json; "
            "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return {name.lower().replace("_", "-") for name in json.loads(done.stdout)}


def test_the_actions_install_is_its_own_venv_without_the_webhook_then_the_extra_adds_it(
    tmp_path: Path,
) -> None:
    """The Action's real install (action/install): its dependencies from the package index, each
    file checked against action/requirements.txt's sha256, prune-gate built from the checkout."""
    env, run = _action_step("Install prune-gate")
    assert env["VENV"] == "${{ runner.temp }}/prune-gate-venv"
    check_env, check_run = _action_step("gate check")
    assert check_env["VENV"] == env["VENV"]
    assert check_env["PRUNE_GATE_KUSTOMIZE"] == "${{ steps.install.outputs.helper }}"
    assert '"$VENV/bin/gate" "${args[@]}"' in check_run
    source = _source_copy(tmp_path / "src")
    venv, outputs = tmp_path / "venv", tmp_path / "outputs"
    step_env = {
        **os.environ,
        "VERSION": "",
        "ACTION_PATH": str(source),
        "VENV": str(venv),
        "CACHE": str(tmp_path / "cache"),
        "BIN": str(tmp_path / "bin"),
        "HELPER": "none",
        "GITHUB_OUTPUT": str(outputs),
    }
    step_env.pop("PYTHONPATH", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", run],
        env=step_env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-4].startswith("gate 0."), done.stdout  # `gate version`
    assert "renderer=none asked (helper: none)" in outputs.read_text()

    plain = _installed(venv)
    assert {"prune-gate", "click", "kubernetes", "urllib3"} <= plain
    assert plain.isdisjoint(EXTRA_DISTRIBUTIONS), plain & EXTRA_DISTRIBUTIONS
    gate = str(venv / "bin" / "gate")
    checked = subprocess.run(
        [gate, *CHECK_EXAMPLE], capture_output=True, text=True, timeout=120, check=False
    )
    assert checked.returncode == 1, checked.stderr
    served = subprocess.run(
        [gate, "webhook", "serve", "--self-signed"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (served.returncode, served.stderr) == (2, NEEDS_EXTRA)

    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{source}[webhook]"],
        check=True,
        timeout=900,
    )
    assert _installed(venv) >= EXTRA_DISTRIBUTIONS
    helped = subprocess.run(
        [gate, "webhook", "serve", "--help"], capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0, helped.stderr


def test_the_extras_modules_are_the_extras_distributions() -> None:
    """WEBHOOK_EXTRA (what `gate webhook` checks for) names what the `webhook` extra installs."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        req.split(">")[0].split("=")[0].strip().lower()
        for req in project["optional-dependencies"]["webhook"]
    }
    assert declared == EXTRA_DISTRIBUTIONS
    assert {name.replace("_", "-") for name in WEBHOOK_EXTRA} <= declared
    runtime = " ".join(project["dependencies"]).lower()
    assert not any(name in runtime for name in EXTRA_DISTRIBUTIONS)


def test_the_report_line_names_the_packages_issue_tracker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once pyproject.toml has `[project.urls] Issues = ...`, the crash line names that URL."""
    from email.message import Message
    from importlib import metadata

    import gate.cli.root

    fields = Message()
    fields["Project-URL"] = "Homepage, https://example.invalid/prune-gate"
    fields["Project-URL"] = "Issues, https://example.invalid/prune-gate/issues"
    monkeypatch.setattr(metadata, "metadata", lambda name: fields)
    assert gate.cli.root._report_url() == "https://example.invalid/prune-gate/issues"
