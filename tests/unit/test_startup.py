"""What `gate` imports: start-up is paid on every CI step, so each run loads only what it uses.

Each case runs the CLI in a fresh interpreter and reads `sys.modules` after it: which libraries
ended up imported, never how long that took (a loaded CI machine must not fail a correct test).
How long it takes is `python -m bench.bench_startup`'s business.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from gate.cli import common, root
from tests.unit.test_packaging import CHECK_EXAMPLE as CHECK
from tests.unit.test_packaging import ROOT, python

# Runs `gate ARGS` through the command group (the console script's `gate.cli.run` adds only its
# quick exit), then prints the names in sys.modules (a JSON list, last line of stdout) and exits
# with gate's exit code.
_MODULES_AFTER = """
import json, sys
from gate.cli import main
code = 0
try:
    main(sys.argv[1:], prog_name="gate")
except SystemExit as exc:
    code = exc.code
print(json.dumps(sorted(sys.modules)))
sys.exit(code)
"""

#: Libraries a rendered `gate check` never needs: the policy's validator (only with a policy
#: file), the webhook and its server stack, the Kubernetes client (only --live), GitPython (only
#: git mode).
NOT_FOR_A_RENDERED_CHECK = {
    "jsonschema",
    "webhook",
    "kubernetes",
    "urllib3",
    "git",
    "h11",
    "prometheus_client",
    "cryptography",
}


def modules_after(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `gate ARGS` in `cwd`, away from any GitHub Actions environment: the process and the
    modules it had imported when it ended."""
    done = python(_MODULES_AFTER, *args, cwd=cwd)
    assert done.stdout, done.stderr
    return done, set(json.loads(done.stdout.splitlines()[-1]))


def roots(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_a_rendered_check_without_a_policy_loads_no_optional_library(tmp_path: Path) -> None:
    done, loaded = modules_after([*CHECK, "-o", "json"], tmp_path)  # no prune-gate.yaml here
    assert done.returncode == 1, done.stderr  # the bundled incident is blocked
    assert '"CONSUMER_REMAINS"' in done.stdout
    assert roots(loaded) & NOT_FOR_A_RENDERED_CHECK == set()
    # What only other runs need: git mode, --live, --defer-to, --sarif and the other formats.
    assert {
        "gate.sources.gitsource",
        "gate.kube",
        "gate.engine.defer",
        "gate.sources.deferral",
        "gate.report.sarif",
        "gate.report.text",
        "gate.report.github",
        "concurrent.futures",  # thread pools are for renders and parallel parsing only
        "logging",
        "_hashlib",  # OpenSSL's hashes: 3 MiB and 8 ms for a check that uses only BLAKE2
    } & loaded == set()
    assert "gate.report.json" in loaded


def test_a_policy_file_loads_its_validator(tmp_path: Path) -> None:
    (tmp_path / "prune-gate.yaml").write_text(
        "severity:\n  SPECULATIVE_PRUNE: {speculative: defer}\n", encoding="utf-8"
    )
    done, loaded = modules_after(CHECK, tmp_path)  # read from the working directory
    assert done.returncode == 1, done.stderr
    assert "jsonschema" in loaded
    assert roots(loaded) & NOT_FOR_A_RENDERED_CHECK == {"jsonschema"}
    policy = tmp_path / "policy.yaml"
    (tmp_path / "prune-gate.yaml").rename(policy)
    done, loaded = modules_after([*CHECK, "--config", str(policy)], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "jsonschema" in loaded


def test_the_sarif_file_loads_its_renderer_only_when_asked(tmp_path: Path) -> None:
    sarif = tmp_path / "out.sarif"
    done, loaded = modules_after([*CHECK, "--sarif", str(sarif)], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "gate.report.sarif" in loaded
    assert json.loads(sarif.read_text(encoding="utf-8"))["version"] == "2.1.0"


#: What `gate --help` and `gate --version` load of gate: the group and the quick exit (stdlib
#: only), no command, no model.
GROUP = {"gate", "gate.cli", "gate.cli.root", "gate.speed"}

#: Libraries no `--help` needs: the YAML readers (PyYAML and the native one), the policy's
#: validator, the parse cache's database, thread pools, click's test runner, and everything a
#: rendered check does without.
HEAVY = {
    "yaml",
    "prune_gate_yaml",
    "sqlite3",
    "concurrent",
    "logging",
    "difflib",
    "decimal",
    *NOT_FOR_A_RENDERED_CHECK,
}


def gate_modules(modules: set[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] == "gate"}


def test_gate_help_and_version_load_the_group_and_no_command(tmp_path: Path) -> None:
    done, loaded = modules_after(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    for name, (summary, _, _) in root.COMMANDS.items():  # every command, with its summary
        words = " ".join(summary.split()[:4])  # click shortens a long one to the width
        assert f"  {name}  " in done.stdout and words in done.stdout, name
    assert "  codes  " in done.stdout and "  webhook  " in done.stdout
    assert gate_modules(loaded) == GROUP
    assert roots(loaded) & HEAVY == set()
    assert "click.testing" not in loaded
    done, loaded = modules_after(["--version"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gate "), done.stdout
    assert gate_modules(loaded) == GROUP | {"gate.cli.version"}  # which parts are active
    assert roots(loaded) & (HEAVY - {"prune_gate_yaml"}) == set()


def test_python_m_gate_help_imports_only_the_group() -> None:
    """The same through `python -m gate` and the console script's `run` (its quick exit ends
    the process before a driver could look): what `-X importtime` saw imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gate", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Commands:" in done.stdout
    imported = {
        line.split("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "imported package" not in line
    }
    assert gate_modules(imported) == GROUP  # gate.__main__ runs as __main__, not imported
    assert roots(imported) & HEAVY == set()


def _help_argvs() -> list[list[str]]:
    """`gate CMD --help` for every command behind a door, and `gate GROUP SUB --help` for
    every subcommand of a group (loading them here costs the test process little: that is the
    point)."""
    argvs = []
    for name, (_, module, attr) in root.COMMANDS.items():
        argvs.append([name, "--help"])
        command = getattr(importlib.import_module(module), attr)
        if isinstance(command, click.Group):
            argvs.extend([name, sub, "--help"] for sub in command.commands)
    return argvs


@pytest.mark.parametrize("argv", _help_argvs(), ids=" ".join)
def test_a_commands_help_loads_its_module_and_nothing_it_runs(
    argv: list[str], tmp_path: Path
) -> None:
    """Listing a command's options loads its CLI module, and of the rest of gate only the
    model's errors and the report formats' names: no engine, source, client or application."""
    done, loaded = modules_after(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"Usage: gate {' '.join(argv[:-1])} " in done.stdout
    below_the_cli = {m for m in gate_modules(loaded) if not m.startswith("gate.cli")}
    assert below_the_cli <= {"gate", "gate.speed", "gate.model", "gate.model.errors", "gate.report"}
    assert roots(loaded) & HEAVY == set()
    assert "click.testing" not in loaded


def test_every_door_shows_its_commands_own_summary() -> None:
    """`gate --help` lists each command by a summary kept beside its door (so that listing
    loads none); each is the command's own short help, the webhook's included."""
    assert root.main.commands.keys() >= {*root.COMMANDS, "codes", "webhook"}
    doors = {n: c for n, c in root.main.commands.items() if isinstance(c, root._Door)}
    assert doors.keys() == {*root.COMMANDS, "webhook"}
    for name, door in doors.items():
        if name == "webhook" and any(
            importlib.util.find_spec(m) is None for m in root.WEBHOOK_EXTRA
        ):
            continue  # without the extra, loading it says how to install it
        real = door.load()
        assert real.name == name
        assert real.get_short_help_str(limit=200) == door.help == door.get_short_help_str(200)


def test_the_clis_copies_of_lower_constants_agree() -> None:
    """`gate.cli.common` spells two constants of the layers below so that building the options
    loads neither: they must say the same."""
    from gate.engine.verdict import EXIT_UNDECIDED
    from gate.sources.policyfile import POLICY_FILE

    assert common.POLICY_FILE == POLICY_FILE
    assert common.EXIT_UNDECIDED == EXIT_UNDECIDED


def test_gate_codes_loads_the_findings_when_it_runs(tmp_path: Path) -> None:
    done, loaded = modules_after(["codes"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "CONSUMER_REMAINS" in done.stdout
    assert "gate.model.findings" in loaded
    assert {m for m in gate_modules(loaded) - GROUP if not m.startswith("gate.model.")} == {
        "gate.model",
        "gate.cli.codes",
        "gate.cli.common",
    }
    assert roots(loaded) & HEAVY == set()
