"""The Action run by a real runner: act (nektos/act, built from tools/act by scripts/build-binaries)
runs `action.yml` and `examples/github/merge-queue.yml` self-hosted, without a container engine,
on local git repositories, with `merge_group`, `pull_request` and `push` payloads.

What a run needs from GitHub comes from local stand-ins, each named where it is made:

- `uses: prune-gate/prune-gate@main` (the example's, and the workflows written here) is a copy of
  this checkout's files, tracked and untracked but not ignored (`action_copy`), and the third-party
  actions, at the exact refs the workflows pin, are the folders under tests/e2e/actions (its
  README says what each does and leaves out): `act --local-repository OWNER/REPO@REF=DIR`. A
  `uses:` with no stand-in fails the test before act runs (act would try GitHub).
- The repository a workflow runs on is a `GitRepo` in the test's folder: act reads `github.sha`
  from its HEAD (merge_group, pull_request) or the push payload's `after`; the checkout stand-in
  clones it (`PRUNE_GATE_TEST_ORIGIN`, GitHub's copy of it) into the job's workspace.
- pip installs from a wheelhouse of the files action/requirements.txt pins (tests/wheelhouse.py,
  downloaded once per lock), through `act --env` (PIP_FIND_LINKS, PIP_NO_INDEX, no pip.conf): the
  same files, checked against the same hashes, as from PyPI, without asking it on every run.
- The job's PATH is the test's without this project's virtualenv and without the confined
  renderer (a runner has neither): the Action must install both itself. kubectl (the pinned one,
  as on GitHub's images) and go stay.
- The deploy target is the dev cluster (conftest's `kube`), its kubeconfig the example's secret
  DEPLOY_KUBECONFIG (`act -s`); Flux's objects there (`flux_system`) are the CRDs of the pinned
  kustomize-controller and what it would have written (inventory, as in test_cascades_live), with
  no controller running: the example's steps are what is tested, not Flux.

What is asserted is what act reports (`act --json`, one record a line): each step's result and
exit status, its outputs (`set-output` records), the annotations (act parses `::error file=...`
workflow commands into records), the step summary (act logs GITHUB_STEP_SUMMARY's content after
each step), the job's result; and what the run did to the cluster (the deferred artifact
applied, the fence Lease's history, the reconcile request) and to the files the tests gave it.

What act does not do as GitHub does, and what stands instead:
- no code scanning or cache service, no github.com: the stand-ins above. The cache always misses
  (every run installs, from the wheelhouse); the example's `helper: auto` cannot download the
  release's renderer and builds it from tools/kustomize (go is on PATH), while the `render:
  kustomize` test serves the reproducible build on loopback (`release-url`) so that the download
  and its check against action/helper.sha256 run;
- it empties GITHUB_STEP_SUMMARY before each step and removes RUNNER_TEMP when the job ends: the
  summary is read from its log, the deferred artifact from the cluster it was applied to, the
  SARIF file from where the upload stand-in copied it;
- `github.sha` of a `merge_group` or `pull_request` run is the repository's HEAD (act reads the
  payload's sha only for push): the tests check out the merge group's head, or the pull
  request's (GitHub's is refs/pull/N/merge; with the pull request on top of base, the same tree).
The emulator (tests/unit/actionrunner.py) keeps the check step's edge cases that need no runner
(tests/unit/test_action.py says which).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from tests.unit.helpers import GitRepo, claim, deployment, doc
from tests.unit.test_sarif import validate
from tests.wheelhouse import wheelhouse

from . import charts
from . import kube as k
from .flux import KUSTOMIZATIONS, KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, install_crds, uninstall_crds
from .kube import Cluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "github" / "merge-queue.yml"
STAND_INS = Path(__file__).resolve().parent / "actions"
#: The third-party repositories the workflows use, and the stand-in folder of each.
STAND_IN_FOR = {
    "actions/checkout": "checkout",
    "actions/setup-python": "setup-python",
    "actions/cache": "cache",
    "github/codeql-action": "codeql-action",
}
SELF = "prune-gate/prune-gate"
#: A hang guard for one act run (a cold install, a Go build of the renderer), not a speed target.
RUN_TIMEOUT = 600
SOURCE_GROUP, SOURCE_VERSION = "source.toolkit.fluxcd.io", "v1"
REASON = "moved to data-v2"
_Watch: Any = watch.Watch  # the client's watch is untyped


# --- running act ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Annotation:
    """A workflow command act parsed from a step's output (`::error file=F,line=L::message`)."""

    level: str
    file: str
    title: str
    message: str
    step: tuple[str, ...]


@dataclass(frozen=True)
class ActRun:
    """One `act` run: its exit code and its JSON log records."""

    code: int
    records: tuple[dict[str, Any], ...]
    stderr: str

    def of(self, step: tuple[str, ...]) -> list[dict[str, Any]]:
        return [r for r in self.records if tuple(r.get("stepID") or ()) == step]

    def step_id(self, name: str) -> tuple[str, ...]:
        """The stepID act gives the top-level step called `name` (or running `name`)."""
        ids = {tuple(r["stepID"]) for r in self.records if r.get("step") == name and "stepID" in r}
        (found,) = {i for i in ids if len(i) == 1} or ids
        return found

    def result(self, step: tuple[str, ...]) -> str | None:
        """success, failure or skipped (None: the step never ran); the Main stage's."""
        results = [
            r["stepResult"] for r in self.of(step) if r.get("stage") == "Main" and "stepResult" in r
        ]
        return results[-1] if results else None

    def outputs(self, step: tuple[str, ...]) -> dict[str, str]:
        """What the step set (`set-output` records), the last value of each name."""
        return {r["name"]: r["arg"] for r in self.of(step) if r.get("command") == "set-output"}

    def summary(self, step: tuple[str, ...]) -> str:
        """What the step wrote to GITHUB_STEP_SUMMARY (act prints it after the step)."""
        return "".join(r["content"] for r in self.of(step) if r.get("command") == "summary")

    def log(self, step: tuple[str, ...]) -> str:
        """The step's output as the job log shows it (workflow commands aside)."""
        return "".join(r["msg"] for r in self.of(step) if r.get("raw_output"))

    def annotations(self, level: str) -> list[Annotation]:
        return [
            Annotation(
                level,
                (r.get("kvPairs") or {}).get("file", ""),
                (r.get("kvPairs") or {}).get("title", ""),
                r.get("arg", ""),
                tuple(r.get("stepID") or ()),
            )
            for r in self.records
            if r.get("command") == level
        ]

    def exit_status(self, step: tuple[str, ...]) -> int | None:
        """The exit code act reports for a failed step (None: it did not fail)."""
        for r in self.of(step):
            found = re.fullmatch(r"exit status (\d+)", str(r.get("msg", "")))
            if found and r.get("level") == "error":
                return int(found.group(1))
        return None

    @property
    def job_result(self) -> str | None:
        found = [r["jobResult"] for r in self.records if "jobResult" in r]
        return found[-1] if found else None

    def describe(self) -> str:
        """The run as a person would read it in the job log, for assertion messages."""
        lines = [f"act exited {self.code}"]
        for r in self.records:
            step = "/".join(r.get("stepID") or ())
            text = str(r.get("msg", "")).rstrip("\n")
            lines.append(f"[{step}] {text}" if step else text)
        return "\n".join(lines) + ("\n--- stderr ---\n" + self.stderr if self.stderr else "")


def uses_of(workflow: Mapping[str, Any]) -> set[str]:
    """Every `uses:` of a workflow's jobs or an action's composite steps."""
    steps: list[Any] = list((workflow.get("runs") or {}).get("steps") or [])
    for job in (workflow.get("jobs") or {}).values():
        steps.extend(job.get("steps") or [])
    return {str(s["uses"]) for s in steps if isinstance(s, dict) and "uses" in s}


def local_repositories(workflow: Path, action: Path) -> list[str]:
    """`--local-repository` values for every action the workflow and the Action use: this
    checkout's copy for prune-gate/prune-gate, a stand-in for each third-party one."""
    mapped: dict[str, str] = {}
    uses = uses_of(yaml.safe_load(workflow.read_text("utf-8")))
    uses |= uses_of(yaml.safe_load((action / "action.yml").read_text("utf-8")))
    for use in sorted(uses):
        if use.startswith(("./", "docker://")):
            continue
        path, _, ref = use.partition("@")
        repo = "/".join(path.split("/")[:2])
        if repo == SELF:
            mapped[f"{repo}@{ref}"] = str(action)
            continue
        assert repo in STAND_IN_FOR, (
            f"{workflow.name} or action.yml uses {use}, which has no stand-in in {STAND_INS} "
            "(act would fetch it from GitHub): write one, and add it to STAND_IN_FOR"
        )
        mapped[f"{repo}@{ref}"] = str(STAND_INS / STAND_IN_FOR[repo])
    return [f"{key}={value}" for key, value in sorted(mapped.items())]


def job_path(kubectl: str) -> str:
    """The test's PATH as a runner has it: without this project's virtualenv and the confined
    renderer (the Action installs its own), with the pinned kubectl."""
    venv = Path(sys.prefix) / "bin" if sys.prefix != sys.base_prefix else None
    kept = [str(Path(kubectl).parent)]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or entry in kept or (venv and Path(entry) == venv):
            continue
        if (Path(entry) / "prune-gate-kustomize").exists():
            continue
        kept.append(entry)
    return os.pathsep.join(kept)


@dataclass(frozen=True)
class Act:
    """act, and what every run of it here is given."""

    binary: str
    action: Path
    env: Mapping[str, str]
    job_env: Mapping[str, str]

    def run(
        self,
        tmp: Path,
        workflow: Path,
        repo: GitRepo,
        event: str,
        payload: Mapping[str, Any],
        secrets: Mapping[str, str] | None = None,
        sarif_dir: Path | None = None,
    ) -> ActRun:
        """Run `workflow` on `repo` (its HEAD is github.sha, unless the push payload says);
        the upload-sarif stand-in copies to `sarif_dir`."""
        tmp.mkdir(parents=True, exist_ok=True)
        event_file = tmp / "event.json"
        event_file.write_text(json.dumps(payload), encoding="utf-8")
        argv = [
            self.binary, event, "--json", "-W", str(workflow), "-C", str(repo.root),
            "-e", str(event_file),
            "-P", "ubuntu-24.04=-self-hosted", "-P", "ubuntu-latest=-self-hosted",
            "--no-skip-checkout", "--action-cache-path", str(tmp / "act-cache"),
            "--secret-file", os.devnull, "--env-file", os.devnull, "--var-file", os.devnull,
            "-s", "GITHUB_TOKEN=no-token-here",
        ]  # fmt: skip
        for mapping in local_repositories(workflow, self.action):
            argv += ["--local-repository", mapping]
        given = {"PRUNE_GATE_TEST_ORIGIN": str(repo.root)}
        if sarif_dir:
            given["PRUNE_GATE_TEST_SARIF_DIR"] = str(sarif_dir)
        for name, value in {**self.job_env, **given}.items():
            argv += ["--env", f"{name}={value}"]
        for name, value in (secrets or {}).items():
            argv += ["-s", f"{name}={value}"]
        done = subprocess.run(
            argv, cwd=tmp, env=dict(self.env), capture_output=True, text=True, timeout=RUN_TIMEOUT,
            check=False,
        )  # fmt: skip
        (tmp / "act.jsonl").write_text(done.stdout, encoding="utf-8")  # to read after a failure
        records = []
        for line in done.stdout.splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(line))
        return ActRun(done.returncode, tuple(records), done.stderr)


def action_copy(dest: Path) -> Path:
    """This checkout's files as GitHub would serve prune-gate/prune-gate at a commit: tracked and
    untracked-but-not-ignored (a change not yet committed is tested too), without .git, the
    virtualenv or build output."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if not source.is_file():
            continue  # deleted in the work tree, not yet in the index
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dest


@pytest.fixture(scope="module")
def act(
    kube: Cluster, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Act:
    """act (built when missing), the Action's copy, and the environment of a runner: the test's
    own, without what belongs to the test (CI, GitHub's and pip's variables, prune-gate's own
    settings such as `make test`'s PRUNE_GATE_REQUIRE_NATIVE, KUBECONFIG, this virtualenv),
    and a config folder of its own (act's, pip's)."""
    binary = charts.built_binary("act", pytestconfig)
    action = action_copy(tmp_path_factory.mktemp("prune-gate-action"))
    house = wheelhouse()  # the lock's files, for this interpreter and platform
    config = tmp_path_factory.mktemp("act-config")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(
            ("GITHUB_", "RUNNER_", "ACT_", "PIP_", "VIRTUAL_ENV", "PYTHON", "PRUNE_GATE_")
        )
        and name not in ("KUBECONFIG", "CI")
    }
    env.update(PATH=job_path(kube.binary("kubectl")), XDG_CONFIG_HOME=str(config))
    env["ACT_DISABLE_VERSION_CHECK"] = "1"  # act asks api.nektosact.com for notices otherwise
    job_env = {
        "PIP_CONFIG_FILE": os.devnull,  # this machine's pip.conf is not the runner's
        "PIP_FIND_LINKS": str(house),
        "PIP_NO_INDEX": "1",
        "PIP_NO_COMPILE": "1",
    }
    return Act(binary, action, env, job_env)


# --- Flux, as the example's cluster has it -----------------------------------------------------


def sync_yaml() -> str:
    """clusters/production/flux-system: the source and the root Kustomization, as `flux
    bootstrap` writes them."""
    return f"""\
apiVersion: {SOURCE_GROUP}/{SOURCE_VERSION}
kind: GitRepository
metadata: {{name: flux-system, namespace: flux-system}}
spec:
  interval: 1m
  url: https://example.invalid/fleet.git
  ref: {{branch: main}}
---
apiVersion: {KUSTOMIZE_GROUP}/{KUSTOMIZE_VERSION}
kind: Kustomization
metadata: {{name: flux-system, namespace: flux-system}}
spec:
  interval: 10m
  path: ./clusters/production
  prune: true
  sourceRef: {{kind: GitRepository, name: flux-system}}
"""


def apps_yaml() -> str:
    """The Kustomization the example's prune-scope names: flux:flux-system/apps."""
    return f"""\
apiVersion: {KUSTOMIZE_GROUP}/{KUSTOMIZE_VERSION}
kind: Kustomization
metadata: {{name: apps, namespace: flux-system}}
spec:
  interval: 10m
  path: ./apps
  prune: true
  sourceRef: {{kind: GitRepository, name: flux-system}}
"""


def settings_yaml(ns: str, storage: str) -> str:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\n"
        f"data: {{storage: {storage}}}\n"
    )


def claim_in(ns: str, retire: str | None = None) -> str:
    return claim(retire=retire).replace("namespace: app", f"namespace: {ns}")


def fleet(tmp: Path, ns: str) -> tuple[GitRepo, dict[str, str]]:
    """A Flux repository behind a merge queue (the example's `flux-root: clusters/production`),
    its fence named by the policy: v0 declares claim `data`, stage 1 (merged) retires it, stage 2
    (the candidate) removes it and points the settings at its successor."""
    repo = GitRepo(tmp / "fleet")
    policy = f"webhook:\n  fence: {{namespace: {ns}, name: speculation-fence}}\n"
    common = {
        "prune-gate.yaml": policy,
        "clusters/production/flux-system/gotk-sync.yaml": sync_yaml(),
        "clusters/production/apps.yaml": apps_yaml(),
    }
    settings = settings_yaml(ns, "data")
    shas = {
        "v0": repo.commit({**common, "apps/app.yaml": doc(settings, claim_in(ns))}),
        "stage1": repo.commit({"apps/app.yaml": doc(settings, claim_in(ns, REASON))}),
        "stage2": repo.commit({"apps/app.yaml": settings_yaml(ns, "data-v2")}),
    }
    return repo, shas


def custom(kube: Cluster) -> Any:
    return client.CustomObjectsApi(kube.client)


@pytest.fixture(scope="module")
def flux_installed(kube: Cluster) -> Iterator[None]:
    """The pinned Flux CRDs (tests/e2e/flux.py) and the flux-system namespace, for this module;
    no controller runs. What was not there before is removed after, and waited out."""
    made = install_crds(kube)
    core = k.core(kube.client)
    made_ns = k.gone(core.read_namespace, "flux-system")
    if made_ns:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="flux-system")))
    try:
        yield
    finally:
        if made_ns:
            k.delete_if_present(core.delete_namespace, "flux-system")
            k.wait_for(
                lambda: k.gone(core.read_namespace, "flux-system"),
                timeout=180,
                what="namespace flux-system gone",
            )
        uninstall_crds(kube, made)


@pytest.fixture
def flux_system(
    kube: Cluster, flux_installed: None, namespace: str, tmp_path: Path
) -> Iterator[str]:
    """Stage 1 deployed by Flux: in the test's namespace the claim (retired) and the settings;
    in flux-system the source, the root Kustomization and `apps`, whose inventory lists both
    (written through the status subresource, as kustomize-controller writes it). Yields the
    test's namespace; flux-system's objects are deleted after (no controller: no finalizers)."""
    ns = namespace
    manifest = tmp_path / "stage1-live.yaml"
    manifest.write_text(
        doc(settings_yaml(ns, "data"), claim_in(ns, REASON), sync_yaml(), apps_yaml()),
        encoding="utf-8",
    )
    try:
        kube.kubectl(
            "apply", "--server-side", "--field-manager=kustomize-controller", "-f", str(manifest)
        )
        entries = [
            {"id": f"{ns}_data__PersistentVolumeClaim", "v": "v1"},
            {"id": f"{ns}_settings__ConfigMap", "v": "v1"},
        ]
        custom(kube).patch_namespaced_custom_object_status(
            KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, "flux-system", KUSTOMIZATIONS, "apps",
            {"status": {"inventory": {"entries": entries}}},
        )  # fmt: skip
        yield ns
    finally:
        for name in ("apps", "flux-system"):
            k.delete_if_present(
                custom(kube).delete_namespaced_custom_object,
                KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, "flux-system", KUSTOMIZATIONS, name,
            )  # fmt: skip
        k.delete_if_present(
            custom(kube).delete_namespaced_custom_object,
            SOURCE_GROUP, SOURCE_VERSION, "flux-system", "gitrepositories", "flux-system",
        )  # fmt: skip


def lease_history(kube: Cluster, ns: str, since: str, until: str) -> list[str | None]:
    """The holders the fence Lease had, event by event, from list resourceVersion `since` to the
    Lease's resourceVersion `until`: what a watch saw, whenever it connected."""
    api = k.coordination(kube.client)
    holders: list[str | None] = []
    stream = _Watch().stream(
        api.list_namespaced_lease, ns, resource_version=since, timeout_seconds=120
    )
    for event in stream:
        lease = event["object"]
        if lease.metadata.name != "speculation-fence":
            continue
        holders.append(lease.spec.holder_identity)
        if lease.metadata.resource_version == until:
            break
    return holders


def managers(obj: Any) -> set[str]:
    return {m.manager for m in obj.metadata.managed_fields or []}


# --- the example, as written ------------------------------------------------------------------


def test_the_example_defers_holds_the_fence_deploys_the_artifact_and_releases(
    act: Act, kube: Cluster, flux_system: str, tmp_path: Path
) -> None:
    """merge_group: examples/github/merge-queue.yml's `speculative` job on a candidate that
    removes a retired claim. The check defers the deletion into the artifact (exit 0, verdict
    defer, a warning annotation on the candidate's file, the summary, SARIF uploaded), holds the
    fence for the candidate, the deploy step applies the artifact (the claim in it, as base
    declares it; the candidate's settings), and the `always()` step releases the fence."""
    ns = flux_system
    repo, shas = fleet(tmp_path, ns)
    base, head = shas["stage1"], shas["stage2"]
    queue = f"gh-readonly-queue/main/pr-7-{base}"
    repo.git("branch", queue, head)
    repo.git("checkout", "-q", "--detach", head)  # github.sha: the merge group's head
    claim_uid = k.core(kube.client).read_namespaced_persistent_volume_claim("data", ns).metadata.uid
    since = k.coordination(kube.client).list_namespaced_lease(ns).metadata.resource_version
    payload = {
        "action": "checks_requested",
        "merge_group": {
            "base_sha": base, "base_ref": "refs/heads/main",
            "head_sha": head, "head_ref": f"refs/heads/{queue}",
        },
    }  # fmt: skip
    sarif_dir = tmp_path / "code-scanning"
    run = act.run(
        tmp_path / "run", EXAMPLE, repo, "merge_group", payload,
        secrets={"DEPLOY_KUBECONFIG": Path(kube.kubeconfig).read_text("utf-8")},
        sarif_dir=sarif_dir,
    )  # fmt: skip
    assert run.code == 0 and run.job_result == "success", run.describe()

    described = run.describe()
    assert f"checked out {head} from {repo.root}" in described  # github.sha: the candidate
    # The Action's cache step ran its stand-in (act goes on with a composite's later steps when
    # one cannot be loaded, and fails the composite only at its end).
    assert "(test stand-in for actions/cache: nothing is restored or saved)" in described

    gate = run.step_id("prune-gate (check, defer, hold the fence)")
    outputs = run.outputs(gate)
    assert (outputs["verdict"], outputs["blocks"], outputs["defers"]) == ("defer", "0", "1")
    assert outputs["deferred-dir"].endswith("/speculative"), outputs
    assert outputs["deferred-record"] == outputs["deferred-dir"] + ".deferred.json"
    check = (*gate, "check")
    assert "SPECULATIVE_PRUNE" in run.summary(check), run.describe()
    (deferral,) = run.annotations("warning")
    assert (deferral.file, deferral.title.split()[0]) == ("apps/app.yaml", "SPECULATIVE_PRUNE")
    assert run.annotations("error") == []
    assert f"held by {head}" in run.log(check), run.describe()

    log = json.loads((sarif_dir / "prune-gate.sarif").read_text("utf-8"))
    validate(log)
    (result,) = log["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("SPECULATIVE_PRUNE", "warning")

    assert run.result(run.step_id("deploy the deferred artifact (no prune)")) == "success"
    settings = k.core(kube.client).read_namespaced_config_map("settings", ns)
    assert settings.data == {"storage": "data-v2"}  # the candidate's change is deployed
    kept = k.core(kube.client).read_namespaced_persistent_volume_claim("data", ns)
    assert (kept.metadata.uid, kept.metadata.deletion_timestamp) == (claim_uid, None)
    assert "merge-queue" in managers(kept)  # the artifact declares it: applied by the deploy
    assert kept.metadata.annotations["prune-gate.io/retire"] == REASON

    release = run.step_id("release the speculation fence")
    assert run.result(release) == "success", run.describe()
    lease = k.coordination(kube.client).read_namespaced_lease("speculation-fence", ns)
    assert lease.spec.holder_identity is None
    history = lease_history(kube, ns, since, lease.metadata.resource_version)
    assert history[0] == head and history[-1] is None, history  # held, then released


def test_the_example_checks_the_merge_live_and_asks_flux_to_deploy(
    act: Act, kube: Cluster, flux_system: str, tmp_path: Path
) -> None:
    """push: the example's `merged` job after stage two merged: the check, live and in context
    merged, allows the removal of the retired claim nothing mounts (exit 0, verdict allow), and
    the last step asks Flux to reconcile the source."""
    ns = flux_system
    repo, shas = fleet(tmp_path, ns)
    payload = {
        "ref": "refs/heads/main", "before": shas["stage1"], "after": shas["stage2"],
        "deleted": False, "forced": False,
    }  # fmt: skip
    run = act.run(
        tmp_path / "run", EXAMPLE, repo, "push", payload,
        secrets={"DEPLOY_KUBECONFIG": Path(kube.kubeconfig).read_text("utf-8")},
    )  # fmt: skip
    assert run.code == 0 and run.job_result == "success", run.describe()
    gate = run.step_id("prune-gate (merged, live)")
    outputs = run.outputs(gate)
    counts = (outputs["blocks"], outputs["defers"], outputs["warnings"])
    assert (outputs["verdict"], counts) == ("allow", ("0", "0", "0")), outputs
    assert "context `merged`" in run.summary((*gate, "check")), run.describe()
    assert run.annotations("error") == run.annotations("warning") == []
    source = custom(kube).get_namespaced_custom_object(
        SOURCE_GROUP, SOURCE_VERSION, "flux-system", "gitrepositories", "flux-system"
    )
    assert "reconcile.fluxcd.io/requestedAt" in source["metadata"].get("annotations", {})


# --- action.yml in workflows of the tests' own ------------------------------------------------


def workflow(tmp: Path, event: str, *steps: Mapping[str, Any]) -> Path:
    """A workflow of one job: checkout, setup-python (this interpreter's version), the given
    steps, then one that prints every step's outputs as JSON (the test reads them from the log)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    uses = uses_of(yaml.safe_load(EXAMPLE.read_text("utf-8")))
    pinned = {u.partition("@")[0]: u for u in uses}
    body = {
        "name": "prune-gate",
        "on": event,
        "jobs": {
            "gate": {
                "runs-on": "ubuntu-latest",
                "steps": [
                    {"uses": pinned["actions/checkout"], "with": {"fetch-depth": 0}},
                    {"uses": pinned["actions/setup-python"], "with": {"python-version": version}},
                    *steps,
                ],
            }
        },
    }
    path = tmp / "workflow.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return path


def gate_step(step_id: str, **inputs: str) -> dict[str, Any]:
    return {"id": step_id, "uses": f"{SELF}@main", "with": inputs}


def test_a_pull_request_dropping_an_unretired_claim_is_blocked_everywhere_github_shows_it(
    act: Act, tmp_path: Path
) -> None:
    """pull_request: the candidate drops a claim that was never retired, and adds a Deployment
    that mounts it. The step fails with gate's exit 1; the annotation is on the candidate's file,
    the summary says why, the outputs count the blocks, the SARIF file has the errors."""
    repo = GitRepo(tmp_path / "repo")
    settings = settings_yaml("app", "data")
    base = repo.commit({"deploy/app.yaml": doc(settings, claim())})
    repo.git("checkout", "-q", "-b", "drop")
    head = repo.commit({"deploy/app.yaml": settings, "deploy/web.yaml": deployment()})
    sarif = tmp_path / "gate.sarif"
    # render: none reads files as they are: no renderer to fetch or build (`helper: none`).
    inputs = {"render": "none", "helper": "none", "sarif": str(sarif)}
    flow = workflow(tmp_path, "pull_request", gate_step("gate", **inputs))
    payload = {
        "action": "opened", "number": 7,
        "pull_request": {
            "number": 7, "base": {"sha": base, "ref": "main"}, "head": {"sha": head, "ref": "drop"},
        },
    }  # fmt: skip
    run = act.run(tmp_path / "run", flow, repo, "pull_request", payload)
    assert run.code != 0 and run.job_result == "failure", run.describe()
    gate = ("gate",)
    check = (*gate, "check")
    assert (run.result(check), run.exit_status(check)) == ("failure", 1), run.describe()
    outputs = run.outputs(gate)
    assert outputs["verdict"] == "block" and int(outputs["blocks"]) >= 1, outputs
    errors = run.annotations("error")
    assert errors and {e.file for e in errors} == {"deploy/app.yaml"}, errors
    assert {e.title.split()[0] for e in errors} == {"NOT_RETIRED", "CONSUMER_REMAINS"}, errors
    assert "NOT_RETIRED" in run.summary(check) and "BLOCK" in run.summary(check)
    log = json.loads(sarif.read_text("utf-8"))
    validate(log)
    assert {r["level"] for r in log["runs"][0]["results"]} == {"error"}


# --- render: kustomize, the load restriction ----------------------------------------------------


def overlay_repo(tmp: Path) -> tuple[GitRepo, str, str]:
    """Stage 2 of a claim whose retirement (stage 1) is a patch outside the kustomization's own
    directory: at base, overlays/prod patches the claim with ../../patches/retire.yaml, which
    Flux loads (kustomize-controller builds with LoadRestrictionsNone) and `kubectl kustomize`
    refuses; the candidate removes the claim, and the patch with it. The removal passes only
    when base is rendered with the patch, as Flux renders it: without it the claim was never
    retired."""
    repo = GitRepo(tmp / "overlays")
    settings = settings_yaml("app", "data-v2")
    retire = f"""\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: app
  annotations: {{prune-gate.io/retire: "{REASON}"}}
"""
    base = repo.commit({
        "base/kustomization.yaml": "resources: [app.yaml]\n",
        "base/app.yaml": doc(settings, claim()),
        "overlays/prod/kustomization.yaml": (
            "resources: [../../base]\npatches:\n  - path: ../../patches/retire.yaml\n"
        ),
        "patches/retire.yaml": retire,
    })  # fmt: skip
    head = repo.commit({
        "base/app.yaml": settings,
        "overlays/prod/kustomization.yaml": "resources: [../../base]\n",
        "patches/retire.yaml": None,
    })  # fmt: skip
    return repo, base, head


def go_platform() -> tuple[str, str]:
    """This machine's OS and architecture as Go (and the helper's release assets) name them."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return sys.platform, arch


@contextlib.contextmanager
def release_server(root: Path) -> Iterator[tuple[str, list[str]]]:
    """`root` over HTTP on loopback (a release's download URL); yields the URL and the paths
    asked for."""
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            asked.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_render_kustomize_builds_a_patch_outside_the_kustomization_as_flux_does(
    act: Act, kube: Cluster, tmp_path: Path
) -> None:
    """Issue 36's load-restriction case (`overlay_repo`): `kubectl kustomize` refuses base's
    overlays/prod (its patch is outside its directory), so an Action that falls back to the
    runner's kubectl stops the candidate with exit 2. The Action's own renderer, downloaded from
    the release (here a loopback server holding the reproducible build) and checked against
    action/helper.sha256, builds it as Flux does: base's claim is retired by the patch, and its
    removal passes. The same job with `helper: none` shows the refusal."""
    repo, base, head = overlay_repo(tmp_path)
    tree = tmp_path / "base-tree"
    repo.git("worktree", "add", "-q", "--detach", str(tree), base)
    refused = subprocess.run(
        [kube.binary("kubectl"), "kustomize", str(tree / "overlays" / "prod")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "is not in or below" in refused.stderr, refused.stderr

    version = re.search(
        r'^__version__ = "(.+)"$', (act.action / "gate" / "__init__.py").read_text(), re.M
    )
    assert version
    goos, goarch = go_platform()
    asset = f"prune-gate-kustomize-{goos}-{goarch}"
    built = subprocess.run(
        [str(act.action / "scripts" / "dist"), "helper", f"{goos}/{goarch}"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    assert built.returncode == 0, f"scripts/dist helper {goos}/{goarch}:\n{built.stderr}"
    release = tmp_path / "release" / f"v{version.group(1)}"
    release.mkdir(parents=True)
    shutil.copy2(built.stdout.strip(), release / asset)

    with release_server(tmp_path / "release") as (url, asked):
        common = {"render": "kustomize", "paths": "overlays/prod", "cache": "false"}
        flow = workflow(
            tmp_path, "push",
            gate_step("helper", **common, helper="download", **{"release-url": url}),
            {**gate_step("kubectl", **common, helper="none"), "continue-on-error": True},
        )  # fmt: skip
        payload = {"ref": "refs/heads/main", "before": base, "after": head, "deleted": False}
        run = act.run(tmp_path / "run", flow, repo, "push", payload)
    assert asked == [f"/v{version.group(1)}/{asset}"]
    assert run.code == 0 and run.job_result == "success", run.describe()

    outputs = run.outputs(("helper",))
    assert (outputs["verdict"], outputs["blocks"]) == ("allow", "0"), run.describe()
    assert outputs["renderer"].startswith(f"prune-gate-kustomize {version.group(1)}"), outputs
    assert f"downloaded from {url}/" in outputs["renderer"] and "as pinned" in outputs["renderer"]
    assert run.result(("helper", "check")) == "success"

    assert run.result(("kubectl", "check")) == "failure", run.describe()
    assert run.exit_status(("kubectl", "check")) == 2
    assert "is not in or below" in run.log(("kubectl", "check")), run.describe()
