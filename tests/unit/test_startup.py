"""What `gate` imports: start-up is paid on every CI step, so each run loads only what it uses.

Each case runs the CLI in a fresh interpreter and reads `sys.modules` after it: which libraries
ended up imported, never how long that took (a loaded CI machine must not fail a correct test).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.unit.test_packaging import CHECK_EXAMPLE as CHECK
from tests.unit.test_packaging import python

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
    "flask",
    "werkzeug",
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


def test_gate_help_loads_click_and_no_model_beyond_its_errors(tmp_path: Path) -> None:
    done, loaded = modules_after(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  codes  " in done.stdout
    assert {m for m in loaded if m.split(".")[0] == "gate"} == {
        "gate",
        "gate.cli",
        "gate.cli.root",
        "gate.model",
        "gate.model.errors",
        "gate.speed",  # the quick exit; stdlib only
    }
    assert roots(loaded) & {"yaml", *NOT_FOR_A_RENDERED_CHECK} == set()


def test_gate_codes_loads_the_findings_when_it_runs(tmp_path: Path) -> None:
    done, loaded = modules_after(["codes"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "CONSUMER_REMAINS" in done.stdout
    assert "gate.model.findings" in loaded
