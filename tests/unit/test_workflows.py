"""actionlint (built from its Go module by scripts/build-binaries) on the project's own workflow,
the merge-queue example, and the example run against this checkout's action.yml, so every input
the example passes is one the Action declares."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.ci import ci

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "github" / "merge-queue.yml"
REMOTE = "uses: prune-gate/prune-gate@main"

#: actionlint is built from its Go module (the merge-queue rules test reads only the YAML).
pytestmark = pytest.mark.binaries


@cache
def actionlint() -> str:
    if shutil.which("go") is None and not ci():
        pytest.skip("actionlint is built with Go (scripts/build-binaries path actionlint)")
    built = subprocess.run(
        [str(ROOT / "scripts" / "build-binaries"), "path", "actionlint"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return built.stdout.strip().splitlines()[-1]


def lint(*files: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # No shellcheck or pyflakes: whether a machine has them must not change the verdict.
    return subprocess.run(
        [actionlint(), "-no-color", "-shellcheck=", "-pyflakes=", *map(str, files)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_projects_workflow_and_the_example_pass_actionlint() -> None:
    done = lint(ROOT / ".github" / "workflows" / "ci.yml", EXAMPLE)
    assert done.returncode == 0, done.stdout + done.stderr


def _with_local_action(tmp_path: Path, text: str) -> Path:
    """A repository holding this action.yml at its root and `text` as a workflow that uses it
    as `./`: actionlint then checks each `with:` against the inputs action.yml declares."""
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    shutil.copy2(ROOT / "action.yml", repo / "action.yml")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    workflow = repo / ".github" / "workflows" / "deploy.yml"
    workflow.write_text(text.replace(REMOTE, "uses: ./"), encoding="utf-8")
    return workflow


def test_the_example_uses_only_inputs_the_action_declares(tmp_path: Path) -> None:
    text = EXAMPLE.read_text("utf-8")
    assert text.count(REMOTE) == 3
    workflow = _with_local_action(tmp_path, text)
    done = lint(workflow, cwd=workflow.parents[2])
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_an_input_the_action_lacks(tmp_path: Path) -> None:
    """The check above can fail: a misspelt input is an error naming it."""
    text = EXAMPLE.read_text("utf-8").replace("defer-to:", "defer_to:", 1)
    workflow = _with_local_action(tmp_path, text)
    done = lint(workflow, cwd=workflow.parents[2])
    assert done.returncode == 1
    assert "defer_to" in done.stdout


def test_the_example_follows_the_merge_queue_rules() -> None:
    """merge_group only for checks_requested; least permissions; actions pinned to a SHA; the
    fence released in an always() step; the speculative deploy applies the artifact, unpruned."""
    flow = yaml.safe_load(EXAMPLE.read_text("utf-8"))
    on = flow[True]  # YAML 1.1 reads the key `on` as true
    assert on["merge_group"] == {"types": ["checks_requested"]}
    assert flow["permissions"] == {"contents": "read"}
    speculative = flow["jobs"]["speculative"]
    steps = speculative["steps"]
    for step in (s for job in flow["jobs"].values() for s in job["steps"]):
        uses = step.get("uses", "")
        if uses and not uses.startswith("prune-gate/"):
            ref = uses.rpartition("@")[2]
            assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), uses
    release = [s for s in steps if s.get("with", {}).get("fence") == "release"]
    assert [s.get("if") for s in release] == ["always()"]
    gate = next(s for s in steps if s.get("id") == "gate")
    assert gate["with"]["fence"] == "hold" and gate["with"]["defer-to"]
    deploy = next(s for s in steps if "deferred-dir" in str(s.get("if", "")))
    assert "--prune" not in deploy["run"] and "ARTIFACT" in deploy["run"]
