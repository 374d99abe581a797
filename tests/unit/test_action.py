"""The Action's check step run by the emulator (tests/unit/actionrunner.py), over real commits, for
what the real runner's tests (tests/e2e/test_action_runner.py: act runs action.yml and the example
workflow on merge_group, pull_request and push, against the dev cluster) do not reach, or reach
only at a minute a case: a deferral without `defer-to` (exit 1), more annotations than GitHub
shows (every finding still in the summary), an unreachable cluster (exit 2, the kubeconfig
removed and never printed), the kubeconfig file's mode, an unknown `fence` value; and, read from
action.yml itself, the docs' table of inputs (docs/configuration.md), their outputs
(docs/merge-queue.md) and the cache step's folders.

The deferral into the artifact with SARIF, the pull request blocked and the merged push passing
moved to the act tests, which run the install, the cache and the helper steps too."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from tests.unit.actionrunner import ActionRun, run_action
from tests.unit.helpers import GitRepo, claim, doc

CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: app}
data: {mode: archive}
"""


def numbered_claim(i: int) -> str:
    return claim().replace("name: data", f"name: data-{i:02}")


def history(tmp_path: Path) -> tuple[GitRepo, dict[str, str]]:
    """main: a claim; stage 1 retires it; stage 2 removes it; a bad change drops a mounted one."""
    repo = GitRepo(tmp_path / "repo")
    shas = {
        "start": repo.commit({"deploy/app.yaml": doc(CONFIG, claim()), "deploy/web.yaml": CONFIG}),
        "retired": repo.commit({"deploy/app.yaml": doc(CONFIG, claim(retire="moved, ticket 7"))}),
        "removed": repo.commit({"deploy/app.yaml": CONFIG}),
    }
    return repo, shas


def act(tmp_path: Path, repo: GitRepo, event: str, payload: dict[str, Any], sha: str,
        **inputs: str) -> ActionRun:  # fmt: skip
    temp = tmp_path / f"runner-{event}"
    temp.mkdir(exist_ok=True)
    return run_action(repo.root, temp, event=event, payload=payload, sha=sha, inputs=inputs)


def merge_group(base: str, head: str) -> dict[str, Any]:
    return {"action": "checks_requested", "merge_group": {"base_sha": base, "head_sha": head}}


def test_merge_group_without_an_artifact_fails_on_the_deferral(tmp_path: Path) -> None:
    repo, shas = history(tmp_path)
    run = act(
        tmp_path, repo, "merge_group", merge_group(shas["retired"], shas["removed"]),
        shas["removed"], render="none",
    )  # fmt: skip
    assert run.code == 1
    assert run.outputs["verdict"] == "defer"
    assert run.outputs["deferred-dir"] == run.outputs["deferred-record"] == ""


def test_more_annotations_than_github_shows_are_all_in_the_summary(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    claims = [numbered_claim(i) for i in range(12)]
    base = repo.commit({"deploy/app.yaml": doc(CONFIG, *claims)})
    head = repo.commit({"deploy/app.yaml": CONFIG})
    run = act(tmp_path, repo, "push", {"before": base, "after": head}, head, render="none")
    assert run.code == 1
    errors = [line for line in run.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == int(run.outputs["blocks"]) > 10
    assert "GitHub shows at most 10 annotations of each level per step" in run.stdout
    for i in range(12):  # never silently dropped: every claim is in the step summary
        assert f"app/data-{i:02}" in run.summary


def test_an_unreachable_cluster_fails_the_step_and_the_kubeconfig_does_not_stay(
    tmp_path: Path,
) -> None:
    repo, shas = history(tmp_path)
    kubeconfig = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "secret-token"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )
    payload = {"before": shas["retired"], "after": shas["removed"]}
    run = act(tmp_path, repo, "push", payload, shas["removed"], render="none",
              kubeconfig=kubeconfig)  # fmt: skip
    assert run.code == 2, run.stdout + run.stderr  # could not decide: never a pass
    assert "127.0.0.1:1" in run.stderr
    assert not (tmp_path / "runner-push" / "prune-gate-kubeconfig").exists()
    assert "secret-token" not in run.stdout + run.stderr


def test_the_kubeconfig_file_is_private_while_it_exists(tmp_path: Path) -> None:
    """Read by a step that lists it instead of running gate: the mode the check step writes."""
    action = yaml.safe_load((Path(__file__).resolve().parents[2] / "action.yml").read_text())
    (check,) = [s for s in action["runs"]["steps"] if s["name"] == "gate check"]
    assert "(umask 077 && printf" in check["run"]
    probe = tmp_path / "probe"
    import subprocess

    subprocess.run(
        ["bash", "-c", f"(umask 077 && printf '%s\\n' data > {probe})"], check=True, timeout=30
    )
    assert stat.S_IMODE(probe.stat().st_mode) == 0o600


def test_a_fence_value_it_does_not_know_is_exit_2(tmp_path: Path) -> None:
    repo, shas = history(tmp_path)
    payload = {"before": shas["retired"], "after": shas["removed"]}
    run = act(tmp_path, repo, "push", payload, shas["removed"], fence="hodl")
    assert run.code == 2
    assert "fence must be hold, release or empty" in run.stdout


def test_every_input_is_documented_with_its_default_in_the_docs() -> None:
    root = Path(__file__).resolve().parents[2]
    action = yaml.safe_load((root / "action.yml").read_text())
    inputs = (root / "docs" / "configuration.md").read_text()
    outputs = (root / "docs" / "merge-queue.md").read_text()
    for name, spec in action["inputs"].items():
        assert spec.get("description"), name
        assert f"| `{name}` |" in inputs, f"docs/configuration.md's Action table lacks input {name}"
    for name in action["outputs"]:
        assert f"`{name}`" in outputs, f"docs/merge-queue.md does not name output {name}"


def test_the_cache_step_keeps_the_folders_the_check_writes() -> None:
    """The check's caches live under PRUNE_GATE_CACHE, the folders actions/cache saves: each
    run saves a key of its own and restores the latest, so a candidate reuses its base's builds."""
    from gate.sources import buildcache

    root = Path(__file__).resolve().parents[2]
    steps = yaml.safe_load((root / "action.yml").read_text())["runs"]["steps"]
    cache = next(s for s in steps if str(s.get("uses", "")).startswith("actions/cache@"))
    check = next(s for s in steps if s.get("id") == "check")
    folder = check["env"]["PRUNE_GATE_CACHE"]
    kept = cache["with"]["path"].splitlines()
    names = (buildcache.STORE_NAME, "parsed", "pip")  # pip: action/install's downloads
    assert sorted(kept) == sorted(f"{folder}/{name}" for name in names)
    install = next(s for s in steps if s.get("id") == "install")
    assert steps.index(cache) < steps.index(install)  # restored before pip needs them
    assert install["env"]["CACHE"] == folder
    assert cache["with"]["key"].startswith(cache["with"]["restore-keys"])
    assert "inputs.cache == 'true'" in cache["if"]
