"""actionlint (built from its Go module by scripts/build-binaries) on the project's own workflow,
the merge-queue example, and the example run against this checkout's action.yml, so every input
the example passes is one the Action declares."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.ci import ci

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "github" / "merge-queue.yml"
#: The same story with Argo CD as the deployer: the artifact synced by `gate argocd sync`.
ARGO_EXAMPLE = ROOT / "examples" / "github" / "merge-queue-argocd.yml"
EXAMPLES = (EXAMPLE, ARGO_EXAMPLE)
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


def test_the_projects_workflows_and_the_example_pass_actionlint() -> None:
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {w.name for w in workflows} >= {"ci.yml", "release.yml"}
    done = lint(*workflows, *EXAMPLES)
    assert done.returncode == 0, done.stdout + done.stderr


RELEASE = ROOT / ".github" / "workflows" / "release.yml"


def test_the_release_pins_its_actions_and_gives_each_job_least_permissions() -> None:
    """Every action by a full commit SHA with its version in a comment; no permission at the
    top; writes only where a job publishes (id-token: PyPI's trusted publishing and cosign)."""
    text = RELEASE.read_text("utf-8")
    uses = re.findall(r"uses: (\S+)(.*)", text)
    assert uses
    for action, comment in uses:
        ref = action.rpartition("@")[2]
        assert re.fullmatch(r"[0-9a-f]{40}", ref), action
        assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), f"{action}: no version comment"
    flow = yaml.safe_load(text)
    assert flow[True] == {"push": {"tags": ["v*"]}}
    assert flow["permissions"] == {}
    perms = {name: job["permissions"] for name, job in flow["jobs"].items()}
    assert perms == {
        "version": {"contents": "read"},
        "dist": {"contents": "read"},
        "pypi": {"id-token": "write"},
        "image": {"contents": "read", "packages": "write", "id-token": "write"},
        "chart": {"contents": "read", "packages": "write"},
        "github-release": {"contents": "write"},
    }


def test_the_release_builds_with_make_dist_and_checks_the_helper_pins() -> None:
    flow = yaml.safe_load(RELEASE.read_text("utf-8"))
    jobs = flow["jobs"]
    runs = [step.get("run", "") for step in jobs["dist"]["steps"]]
    assert "make dist" in runs
    assert "sha256sum --strict -c ../action/helper.sha256" in runs
    for name, job in jobs.items():  # nothing is built or published before the version check
        needs = job.get("needs", [])
        assert name == "version" or "version" in ([needs] if isinstance(needs, str) else needs)
    check = jobs["version"]["steps"][1]["run"]
    assert '[[ "$TAG" == "v$version" ]]' in check and "CHANGELOG.md" in check
    # The Go the runner gets is the one scripts/dist pins (it would fetch that one otherwise).
    pinned = re.search(r"^GO_TOOLCHAIN=go(\S+)$", (ROOT / "scripts" / "dist").read_text(), re.M)
    assert pinned
    for job in ("dist", "chart"):
        go = next(s for s in jobs[job]["steps"] if "setup-go" in s.get("uses", ""))
        assert go["with"]["go-version"] == pinned[1]
    build = next(s for s in jobs["image"]["steps"] if s.get("id") == "build")["with"]
    assert build["sbom"] is True and build["provenance"] == "mode=max"
    assert "PYTHON_IMAGE=${{ steps.base.outputs.image }}" in build["build-args"]
    assert build["platforms"] == "linux/amd64,linux/arm64"


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


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_example_uses_only_inputs_the_action_declares(tmp_path: Path, example: Path) -> None:
    text = example.read_text("utf-8")
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


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_example_follows_the_merge_queue_rules(example: Path) -> None:
    """merge_group only for checks_requested; least permissions; actions pinned to a SHA; the
    fence released in an always() step; the speculative deploy applies the artifact, unpruned."""
    flow = yaml.safe_load(example.read_text("utf-8"))
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
    if example == ARGO_EXAMPLE:  # Argo CD syncs the artifact, with the gate the step installed
        assert gate["with"]["argocd-root"] == "auto"
        assert '"$GATE" argocd sync "$ARTIFACT"' in deploy["run"]
        assert deploy["env"]["GATE"] == "${{ steps.gate.outputs.gate }}"
        action = yaml.safe_load((ROOT / "action.yml").read_text("utf-8"))
        assert "gate" in action["outputs"]
