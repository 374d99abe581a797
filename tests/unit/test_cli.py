"""The `gate` command as a user meets it: exit codes, errors on stderr, no tracebacks."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli import main
from tests.unit.helpers import GitRepo, claim, deployment, doc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "incident"


def gate(
    *args: str, cwd: Path = ROOT, stdin: str | None = None, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real console script (or the module when the script is not on PATH), outside any
    GitHub workflow unless `env_extra` sets its variables."""
    exe = shutil.which("gate")
    cmd = [exe] if exe else [sys.executable, "-m", "gate"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(ROOT)  # the checkout, when the package is not installed
    return subprocess.run(
        [*cmd, *args], cwd=cwd, input=stdin, capture_output=True, text=True, env=env, check=False
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_bundled_incident_is_blocked_with_names_and_fix() -> None:
    result = gate(
        "check",
        "--base-manifests",
        str(EXAMPLE / "base"),
        "--head-manifests",
        str(EXAMPLE / "candidate"),
        "--context",
        "speculative",
    )
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "PersistentVolumeClaim headlamp/headlamp" in out
    assert "Deployment headlamp/headlamp" in out  # the pod template that mounts it
    assert "prune-gate.io/retire" in out  # the fix
    assert "CONSUMER_REMAINS" in out and "NOT_RETIRED" in out


def test_malformed_yaml_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    base = write(tmp_path / "base" / "a.yaml", claim())
    bad = write(tmp_path / "head" / "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [\n")
    result = gate("check", "--base-manifests", str(base), "--head-manifests", str(bad.parent))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {bad.parent}/a.yaml:4: invalid YAML")
    assert len(result.stderr.strip().splitlines()) <= 3


def test_stdin_for_one_side(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", doc(claim(), deployment()))
    result = gate(
        "check",
        "--base-manifests",
        str(base),
        "--head-manifests",
        "-",
        "-o",
        "json",
        stdin=deployment(),
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "block"
    assert {f["code"] for f in report["findings"]} == {"NOT_RETIRED", "CONSUMER_REMAINS"}
    both = gate("check", "--base-manifests", "-", "--head-manifests", "-", stdin="")
    assert both.returncode == 2
    assert "only one side" in both.stderr


def test_allow_exits_zero_and_warn_too(tmp_path: Path) -> None:
    same = write(tmp_path / "same.yaml", claim())
    ok = gate("check", "--base-manifests", str(same), "--head-manifests", str(same))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    kept = write(tmp_path / "kept.yaml", claim(extra_ann="helm.sh/resource-policy: keep"))
    empty = write(tmp_path / "empty.yaml", "")
    warn = gate(
        "check", "--base-manifests", str(kept), "--head-manifests", str(empty), "-o", "json"
    )
    assert warn.returncode == 0
    assert json.loads(warn.stdout)["verdict"] == "warn"


def test_bad_policy_is_exit_2_naming_the_key(tmp_path: Path) -> None:
    same = write(tmp_path / "m.yaml", claim())
    policy = write(tmp_path / "p.yaml", "webhook:\n  resync: 300\n")
    result = gate(
        "check",
        "--base-manifests",
        str(same),
        "--head-manifests",
        str(same),
        "--config",
        str(policy),
    )
    assert result.returncode == 2
    assert "webhook.resync" in result.stderr
    assert "Traceback" not in result.stderr


def test_policy_from_working_directory_in_rendered_mode(tmp_path: Path) -> None:
    base = write(tmp_path / "b.yaml", claim())
    empty = write(tmp_path / "h.yaml", "")
    write(tmp_path / "prune-gate.yaml", "severity:\n  NOT_RETIRED: warn\n")
    result = gate(
        "check", "--base-manifests", str(base), "--head-manifests", str(empty), cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout


def test_mode_errors() -> None:
    runner = CliRunner()
    neither = runner.invoke(main, ["check"], env={"GITHUB_ACTIONS": ""})
    assert neither.exit_code == 2
    assert "nothing to compare" in neither.output
    half = runner.invoke(main, ["check", "--base-manifests", "x"])
    assert half.exit_code == 2
    mixed = runner.invoke(
        main, ["check", "--base-manifests", "x", "--head-manifests", "y", "--base", "HEAD"]
    )
    assert mixed.exit_code == 2
    assert "not both" in mixed.output


def test_missing_input_path(tmp_path: Path) -> None:
    result = gate(
        "check", "--base-manifests", str(tmp_path / "nope"), "--head-manifests", str(tmp_path)
    )
    assert result.returncode == 2
    assert "no such file or directory" in result.stderr


def test_github_format_writes_summary_and_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = write(tmp_path / "b.yaml", claim())
    empty = write(tmp_path / "h.yaml", "")
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    result = CliRunner().invoke(
        main,
        ["check", "--base-manifests", str(base), "--head-manifests", str(empty), "-o", "github"],
    )
    assert result.exit_code == 1
    assert "::error " in result.output
    assert "NOT_RETIRED" in summary.read_text()
    # The step's outputs: the verdict and the count per severity, for later steps' conditions.
    assert output.read_text() == "verdict=block\nblocks=1\ndefers=0\nwarnings=0\nexempted=0\n"


@pytest.mark.parametrize("event", ["merge_group", "pull_request"])
def test_context_auto_from_github_event(tmp_path: Path, event: str) -> None:
    base = write(tmp_path / "b.yaml", claim(retire="gone"))
    empty = write(tmp_path / "h.yaml", "")
    payload = write(tmp_path / "event.json", json.dumps({}))
    env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": event, "GITHUB_EVENT_PATH": str(payload)}
    result = CliRunner().invoke(
        main,
        ["check", "--base-manifests", str(base), "--head-manifests", str(empty), "-o", "json"],
        env=env,
    )
    report = json.loads(result.output)
    expected = {"merge_group": ("speculative", "defer"), "pull_request": ("preview", "allow")}[
        event
    ]
    assert (report["context"], report["verdict"]) == expected


def test_codes_lists_every_code() -> None:
    out = CliRunner().invoke(main, ["codes"]).output
    assert "CLAIM_MOUNTED" in out and "SPECULATION_FENCE" in out


def test_git_mode_reads_an_explicit_config_at_the_base_revision(tmp_path: Path) -> None:
    """A candidate that exempts everything in its own prune-gate.yaml is still blocked."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/app.yaml": doc(claim(), deployment())}, "base")
    exempt_all = (
        "exemptions:\n  - {kind: PersistentVolumeClaim, reason: sneaky, expires: '2099-01-01'}\n"
    )
    repo.commit({"deploy/app.yaml": deployment(), "prune-gate.yaml": exempt_all}, "candidate")
    for extra in ((), ("--config", "prune-gate.yaml")):
        result = gate("check", "--base", "HEAD~1", "--head", "HEAD", *extra, cwd=repo.root)
        assert result.returncode == 1, (extra, result.stdout, result.stderr)
    noted = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--config", "prune-gate.yaml", cwd=repo.root
    )
    assert "does not exist at the base revision" in noted.stderr
    outside = write(
        tmp_path / "outside.yaml", "severity:\n  NOT_RETIRED: warn\n  CONSUMER_REMAINS: warn\n"
    )
    trusted = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--config", str(outside), cwd=repo.root
    )
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr


def test_no_objects_on_either_side_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    write(tmp_path / "base" / "kustomization.yaml", "resources: [app.yaml]\n")
    result = gate(
        "check",
        "--base-manifests",
        str(tmp_path / "base"),
        "--head-manifests",
        str(tmp_path / "head"),
    )
    assert result.returncode == 2
    assert "no Kubernetes objects" in result.stderr and "--render kustomize" in result.stderr


def test_gate_help_lists_every_command_by_its_own_summary() -> None:
    """The summaries `gate --help` shows without loading a command are each command's own."""
    from gate.cli import root
    from gate.engine.verdict import EXIT_BUG

    assert root.EXIT_BUG == EXIT_BUG
    for name, (summary, module, attr) in root.COMMANDS.items():
        real = getattr(importlib.import_module(module), attr)
        assert real.name == name
        assert real.get_short_help_str(limit=200) == summary
    listed = CliRunner().invoke(main, ["--help"]).output
    assert all(name in listed for name in [*root.COMMANDS, "codes", "webhook"])


def test_gate_help_imports_no_engine_and_no_yaml() -> None:
    code = (
        "import sys\n"
        "from gate.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "engine = [m for m in sys.modules if m.startswith(('gate.engine', 'gate.report'))]\n"
        "extras = ('yaml', 'jsonschema', 'prometheus_client')\n"
        "loaded = engine + [m for m in extras if m in sys.modules]\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
