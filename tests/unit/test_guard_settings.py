"""The guard settings of the policy are base's word, never the candidate's (issue 32, item 1).

The attack: in a merge-group job the working tree is the candidate, and `gate fence hold` read
`./prune-gate.yaml` from it. A candidate that changes `webhook.fence` passed `gate check` and had
the Action hold a Lease the webhook does not watch, so the deployer's prunes were not fenced.
Now `gate fence` reads the policy at the base revision (as `gate check` does), and `gate check`
blocks a candidate that changes any guard setting (GUARD_TAMPERED), with the setting, old -> new,
its line, and how a person changes one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.helpers import GitRepo
from tests.unit.test_cli import gate, write

SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: app}}
data: {{level: {level}}}
"""

BASE_POLICY = """\
# who the guards bind
webhook:
  deployers: [system:serviceaccount:flux-system:kustomize-controller, deployer-b]
  breakGlassGroups: [sre-oncall]
  fence: {namespace: ci, name: speculation-fence}
"""
REDIRECTED = BASE_POLICY.replace("name: speculation-fence", "name: elsewhere")

#: An API server nobody serves: `gate fence` names the Lease it would read in its error.
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def _repo(tmp_path: Path, base_policy: str | None, head_policy: str | None) -> GitRepo:
    """Base with `base_policy` (None: no file), then a candidate with `head_policy` (None: the
    file removed) and an unguarded change beside it."""
    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {"deploy/app.yaml": SETTINGS.format(level=1)}
    if base_policy is not None:
        files["prune-gate.yaml"] = base_policy
    repo.commit(files, "base")
    head: dict[str, str | None] = {"deploy/app.yaml": SETTINGS.format(level=2)}
    if head_policy != base_policy:
        head["prune-gate.yaml"] = head_policy
    repo.commit(head, "candidate")
    return repo


def _merge_group(tmp_path: Path, repo: GitRepo) -> dict[str, str]:
    """The environment of a merge-group job whose checkout is the candidate."""
    payload = tmp_path / "event.json"
    base, head = repo.git("rev-parse", "HEAD~1"), repo.git("rev-parse", "HEAD")
    payload.write_text(json.dumps({"merge_group": {"base_sha": base, "head_sha": head}}))
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": "merge_group",
        "GITHUB_EVENT_PATH": str(payload),
        "GITHUB_SHA": head,
    }


def _fence(repo: GitRepo, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    kubeconfig = write(tmp_path / "kubeconfig", KUBECONFIG)
    return gate("fence", *args, f"--kubeconfig={kubeconfig}", cwd=repo.root, env_extra=env)


def _check(repo: GitRepo, *extra: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """`gate check` of HEAD~1 -> HEAD as JSON: the exit code and the report."""
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--path", "deploy", "--render", "none",
        "-o", "json", *extra,
        cwd=repo.root, env_extra=env,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def _tampered(report: Any) -> dict[str, Any]:
    """The GUARD_TAMPERED findings by the setting (or file) they name."""
    return {
        f["object"]["name"]: f
        for f in report["findings"]
        if f["code"] == "GUARD_TAMPERED" and f["object"]["kind"] == "Policy"
    }


def test_fence_in_a_merge_group_names_the_base_lease_not_the_candidates(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BASE_POLICY, REDIRECTED)
    env = _merge_group(tmp_path, repo)
    for args in (("hold", "--holder", "abc"), ("release", "--holder", "abc"), ("status",)):
        result = _fence(repo, tmp_path, *args, env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Lease ci/speculation-fence:" in result.stderr, (args, result.stderr)
        assert "elsewhere" not in result.stderr
    explicit = _fence(repo, tmp_path, "status", "--base", "HEAD~1")
    assert "Lease ci/speculation-fence:" in explicit.stderr, explicit.stderr
    wins = _fence(repo, tmp_path, "status", "--lease", "ops/other", env=env)
    assert "Lease ops/other:" in wins.stderr, wins.stderr  # --lease still names it


def test_fence_never_reads_the_working_tree(tmp_path: Path) -> None:
    """Without a base revision (no --base, no event) the working tree's file is not read, even
    outside CI: the fence must come from --base, --lease or a --config outside the repository."""
    repo = _repo(tmp_path, BASE_POLICY, REDIRECTED)
    result = _fence(repo, tmp_path, "status")
    assert result.returncode == 2
    assert result.stderr.startswith("error: no fence: pass --lease NAMESPACE/NAME, or --base REV")
    assert "elsewhere" not in result.stderr


def test_fence_config_inside_the_repository_is_read_at_base(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"ci/policy.yaml": BASE_POLICY}, "base")
    repo.commit({"ci/policy.yaml": REDIRECTED}, "candidate")
    env = _merge_group(tmp_path, repo)
    for config in ("ci/policy.yaml", str(repo.root / "ci" / "policy.yaml"), "ci/../ci/policy.yaml"):
        result = _fence(repo, tmp_path, "status", "--config", config, env=env)
        assert "Lease ci/speculation-fence:" in result.stderr, (config, result.stderr)
    outside = write(tmp_path / "ops.yaml", "webhook:\n  fence: {namespace: ops, name: f}\n")
    result = _fence(repo, tmp_path, "status", "--config", str(outside), env=env)
    assert "Lease ops/f:" in result.stderr, result.stderr  # outside the repository: from disk
    # A symlink inside the repository pointing outside is refused, not followed.
    (repo.root / "ci" / "link.yaml").symlink_to(outside)
    linked = _fence(repo, tmp_path, "status", "--config", "ci/link.yaml", env=env)
    assert linked.returncode == 2 and "symlink" in linked.stderr, linked.stderr


def test_fence_when_the_base_has_no_policy_is_not_the_candidates(tmp_path: Path) -> None:
    repo = _repo(tmp_path, None, REDIRECTED)
    result = _fence(repo, tmp_path, "hold", "--holder", "abc", env=_merge_group(tmp_path, repo))
    assert result.returncode == 2
    assert "no fence: pass --lease NAMESPACE/NAME, or set webhook.fence in prune-gate.yaml at" in (
        result.stderr
    )
    code, report = _check(repo)  # and the candidate's new fence is a guard setting it changes
    assert code == 1
    fence = _tampered(report)["webhook.fence"]
    assert fence["evidence"][0] == "webhook.fence: none -> ci/elsewhere"


def test_check_blocks_a_candidate_that_redirects_the_fence(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BASE_POLICY, REDIRECTED)
    code, report = _check(repo, env=_merge_group(tmp_path, repo))
    assert code == 1 and report["verdict"] == "block"
    found = _tampered(report)
    assert list(found) == ["webhook.fence"]
    f = found["webhook.fence"]
    assert f["severity"] == "block"
    assert f["evidence"][0] == "webhook.fence: ci/speculation-fence -> ci/elsewhere"
    assert f["source"] == {"path": "prune-gate.yaml", "line": 5}
    assert f["headSource"] == {"path": "prune-gate.yaml", "line": 5}
    assert "Policy.prune-gate.io" in f["remediation"] and "helm upgrade" in f["remediation"]
    assert [a["runner"] for a in f["actions"]] == ["ci", "ci"]
    text = gate("check", "--base", "HEAD~1", "--head", "HEAD", "--render", "none", cwd=repo.root)
    assert "\nblock Policy webhook.fence (prune-gate.yaml:5)\n  GUARD_TAMPERED: " in text.stdout


def test_every_guard_setting_is_reported_and_no_other_setting(tmp_path: Path) -> None:
    head = """\
guardedKinds: [PersistentVolumeClaim, ConfigMap]
severity: {NOT_RETIRED: warn}
annotations: {retire: kubectl.kubernetes.io/last-applied-configuration}
webhook:
  deployers: [system:serviceaccount:flux-system:kustomize-controller]
  breakGlassGroups: [sre-oncall, everyone]
  fence: {namespace: ci, name: speculation-fence}
  protectedLabels: [team]
  resync: 10m
  maxCacheAge: 30m
heal:
  disposableClaims:
    - {namespace: app, name: "*", reason: caches}
  trustedManagers: [kubectl-label, kubectl-annotate, kubectl-edit, kubectl-client-side-apply]
  watch: {releaseDisposableClaims: true}
"""
    repo = _repo(tmp_path, BASE_POLICY, head)
    code, report = _check(repo)
    assert code == 1
    found = _tampered(report)
    assert sorted(found) == [
        "annotations.retire",
        "heal.disposableClaims",
        "heal.trustedManagers",
        "heal.watch",
        "webhook.breakGlassGroups",
        "webhook.deployers",
        "webhook.protectedLabels",
    ]
    assert "removed: deployer-b" in found["webhook.deployers"]["evidence"]
    assert "added: everyone" in found["webhook.breakGlassGroups"]["evidence"]
    assert "releaseDisposableClaims: false -> true" in found["heal.watch"]["evidence"]
    assert found["heal.watch"]["headSource"]["line"] == 15
    retire = found["annotations.retire"]["evidence"][0]
    last_applied = "kubectl.kubernetes.io/last-applied-configuration"
    assert retire == f"annotations.retire: prune-gate.io/retire -> {last_applied}"
    assert "added: kubectl-client-side-apply" in found["heal.trustedManagers"]["evidence"]
    labels = found["webhook.protectedLabels"]["evidence"][0]
    assert labels == "webhook.protectedLabels: none -> [team]"


def test_a_guard_setting_said_another_way_is_no_change(tmp_path: Path) -> None:
    same = """\
webhook:
  fence:
    name: speculation-fence  # the same Lease, written out
    namespace: ci
  breakGlassGroups: [sre-oncall]
  deployers: [deployer-b, system:serviceaccount:flux-system:kustomize-controller]
  resync: 10m
"""
    repo = _repo(tmp_path, BASE_POLICY, same)
    code, report = _check(repo)
    assert code == 0, report
    assert not _tampered(report)


def test_a_candidate_that_removes_the_policy_file_is_reported_at_its_removal(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, BASE_POLICY, None)
    code, report = _check(repo)
    assert code == 1
    found = _tampered(report)
    assert sorted(found) == ["webhook.breakGlassGroups", "webhook.deployers", "webhook.fence"]
    assert found["webhook.fence"]["headSource"] == {"path": "prune-gate.yaml", "line": None}
    assert found["webhook.fence"]["source"] == {"path": "prune-gate.yaml", "line": 5}


def test_a_candidate_policy_that_cannot_be_read_blocks(tmp_path: Path) -> None:
    for name, text in (
        ("unknown key", BASE_POLICY + "  fense: {namespace: ci, name: x}\n"),
        ("invalid yaml", "webhook: [\n"),
    ):
        repo = _repo(tmp_path / name.replace(" ", "-"), BASE_POLICY, text)
        code, report = _check(repo)
        assert code == 1, name
        found = _tampered(report)["prune-gate.yaml"]
        assert "cannot be read as a policy" in found["message"]
        assert "prune-gate.yaml at" in found["evidence"][0]
    repo = _repo(tmp_path / "link", BASE_POLICY, BASE_POLICY)
    outside = write(tmp_path / "lax.yaml", "webhook:\n  fence: {namespace: ci, name: elsewhere}\n")
    (repo.root / "prune-gate.yaml").unlink()
    (repo.root / "prune-gate.yaml").symlink_to(outside)
    repo.commit({}, "candidate links its policy outside the tree")
    code, report = _check(repo)
    assert code == 1
    assert "120000" in _tampered(report)["prune-gate.yaml"]["evidence"][0]
    fence = _fence(repo, tmp_path, "status", env=_merge_group(tmp_path, repo))
    assert "Lease ci/speculation-fence:" in fence.stderr, fence.stderr


def test_an_exemption_in_base_lets_a_person_change_a_setting(tmp_path: Path) -> None:
    exempt = (
        "exemptions:\n  - {kind: Policy.prune-gate.io, name: webhook.fence, codes: "
        "[GUARD_TAMPERED], reason: moving the fence, expires: '2099-01-01'}\n"
    )
    repo = _repo(tmp_path / "in-base", BASE_POLICY + exempt, REDIRECTED + exempt)
    code, report = _check(repo)
    assert code == 0, report
    assert [e["object"]["name"] for e in report["exempted"]] == ["webhook.fence"]
    # The candidate's own exemption does not count: it is not base's word.
    repo = _repo(tmp_path / "in-candidate", BASE_POLICY, REDIRECTED + exempt)
    code, report = _check(repo)
    assert code == 1 and list(_tampered(report)) == ["webhook.fence"]
    # An exemption of a manifest's kind and name never covers a setting.
    broad = "exemptions:\n  - {kind: ConfigMap, reason: any, expires: '2099-01-01'}\n"
    repo = _repo(tmp_path / "broad", BASE_POLICY + broad, REDIRECTED + broad)
    assert _check(repo)[0] == 1


def test_a_pull_request_is_judged_on_its_own_policy_change(tmp_path: Path) -> None:
    """The base branch moved the fence after the pull request forked, and the pull request did
    not touch the policy: nothing is reported (the comparison starts at the merge base)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/app.yaml": SETTINGS.format(level=1), "prune-gate.yaml": BASE_POLICY})
    repo.git("checkout", "-q", "-b", "feature")
    head = repo.commit({"deploy/app.yaml": SETTINGS.format(level=2)}, "the pull request")
    repo.git("checkout", "-q", "main")
    main = repo.commit({"prune-gate.yaml": REDIRECTED}, "a person moves the fence")
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps({"pull_request": {"base": {"sha": main}, "head": {"sha": head}}}))
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(payload),
    }
    result = gate("check", "--render", "none", "-o", "json", cwd=repo.root, env_extra=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not _tampered(json.loads(result.stdout))


def test_a_config_outside_the_repository_is_no_candidates(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BASE_POLICY, REDIRECTED)
    outside = write(tmp_path / "ops.yaml", BASE_POLICY)
    code, report = _check(repo, "--config", str(outside))
    assert code == 0, report  # the repository's file is not the policy here
    code, report = _check(repo, "--config", "prune-gate.yaml")
    assert code == 1 and list(_tampered(report)) == ["webhook.fence"]


def test_the_actions_release_step_names_the_base_lease(tmp_path: Path) -> None:
    """The Action's `fence: release` step in a merge-group job (the candidate checked out):
    the Lease it would release is base's (its hold step runs the same command after a check
    that passes; tests/e2e/test_fence.py runs it against a real API server)."""
    from tests.unit.actionrunner import run_action

    repo = _repo(tmp_path, BASE_POLICY, REDIRECTED)
    base, head = repo.git("rev-parse", "HEAD~1"), repo.git("rev-parse", "HEAD")
    for name, inputs in (("event", {}), ("input", {"base": base})):
        temp = tmp_path / f"runner-{name}"
        temp.mkdir()
        run = run_action(
            repo.root, temp, event="merge_group", sha=head,
            payload={"merge_group": {"base_sha": base, "head_sha": head}},
            inputs={"fence": "release", "kubeconfig": KUBECONFIG, **inputs},
        )  # fmt: skip
        assert run.code == 2, run.stdout + run.stderr
        assert "Lease ci/speculation-fence:" in run.stderr, (name, run.stderr)
        assert "elsewhere" not in run.stderr


def test_a_config_through_a_directory_the_candidate_made_a_symlink_is_read_at_its_path(
    tmp_path: Path,
) -> None:
    """`--config ci/policy.yaml` where the candidate replaced the directory `ci` with a symlink to
    a directory base does not have: the policy is base's `ci/policy.yaml`, not the defaults read
    at the link's target (which would drop the fence and every guard setting)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/app.yaml": SETTINGS.format(level=1), "ci/policy.yaml": BASE_POLICY})
    (repo.root / "ci" / "policy.yaml").unlink()
    (repo.root / "ci").rmdir()
    repo.write({"lax/policy.yaml": "{}\n", "deploy/app.yaml": SETTINGS.format(level=2)})
    (repo.root / "ci").symlink_to("lax")
    repo.commit({}, "candidate: ci is now a link to lax/")
    env = _merge_group(tmp_path, repo)
    fence = _fence(repo, tmp_path, "status", "--config", "ci/policy.yaml", env=env)
    assert "Lease ci/speculation-fence:" in fence.stderr, fence.stderr
    code, report = _check(repo, "--config", "ci/policy.yaml")
    assert code == 1, report
    # At the candidate, git has no ci/policy.yaml (ci is a link): every guard setting is dropped.
    assert "webhook.fence" in _tampered(report)
    assert _tampered(report)["webhook.fence"]["headSource"] == {
        "path": "ci/policy.yaml",
        "line": None,
    }


CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: app}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""

#: A candidate's policy that would let its own prune through, and name another fence.
LENIENT = REDIRECTED + "severity: {NOT_RETIRED: warn, SPECULATIVE_PRUNE: warn}\n"


def _rendered(tmp_path: Path, repo: GitRepo, env: dict[str, str] | None) -> tuple[int, Any]:
    """Rendered mode from the candidate's checkout: base renders the claim, the candidate not."""
    base = write(tmp_path / "render" / "base" / "claim.yaml", CLAIM)
    head = write(tmp_path / "render" / "head" / "settings.yaml", SETTINGS.format(level=2))
    result = gate(
        "check", "--base-manifests", str(base.parent), "--head-manifests", str(head.parent),
        "-o", "json", cwd=repo.root, env_extra=env,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_rendered_mode_in_a_merge_group_reads_the_policy_at_base(tmp_path: Path) -> None:
    """Rendered mode read `./prune-gate.yaml` from the working tree, the candidate's in a
    merge-group job: a candidate that softened NOT_RETIRED passed its own claim's removal. The
    event names the base, so the policy is read there, and the guard setting it changes is
    reported as in git mode."""
    repo = _repo(tmp_path, BASE_POLICY, LENIENT)
    code, report = _rendered(tmp_path, repo, _merge_group(tmp_path, repo))
    assert code == 1 and report["verdict"] == "block"
    codes = {f["code"]: f["severity"] for f in report["findings"]}
    assert codes["NOT_RETIRED"] == "block"
    assert list(_tampered(report)) == ["webhook.fence"]
    # On a person's own machine (no event) the working tree is theirs: read from disk.
    code, report = _rendered(tmp_path, repo, None)
    assert {f["code"]: f["severity"] for f in report["findings"]}["NOT_RETIRED"] == "warn"
    assert _tampered(report) == {}


def test_rendered_mode_with_an_event_base_it_cannot_read_refuses_the_working_tree_policy(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, BASE_POLICY, LENIENT)
    env = _merge_group(tmp_path, repo)
    payload = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
    payload["merge_group"]["base_sha"] = "0" * 40  # not in this clone (a shallow checkout)
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(payload))
    base = write(tmp_path / "render" / "base" / "claim.yaml", CLAIM)
    result = gate(
        "check", "--base-manifests", str(base.parent), "--head-manifests", str(base.parent),
        cwd=repo.root, env_extra=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout
    assert "may be the candidate's" in result.stderr and "fetch-depth: 0" in result.stderr


def test_a_config_outside_any_repository_is_refused_when_there_is_a_base(tmp_path: Path) -> None:
    """A workspace that is no repository, with the candidate checked out below it: `--config
    src/prune-gate.yaml` was read from disk (the candidate's policy, its fence) because no
    repository said it was inside one. With a base revision to read at, it is refused."""
    repo = _repo(tmp_path, BASE_POLICY, LENIENT)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "src").symlink_to(repo.root)
    env = _merge_group(tmp_path, repo)
    base = write(tmp_path / "render" / "base" / "claim.yaml", CLAIM)
    head = write(tmp_path / "render" / "head" / "settings.yaml", SETTINGS.format(level=2))
    check = gate(
        "check", "--config", "src/prune-gate.yaml", "--base-manifests", str(base.parent),
        "--head-manifests", str(head.parent), cwd=workspace, env_extra=env,
    )  # fmt: skip
    assert check.returncode == 2, check.stdout
    assert "may be the candidate's" in check.stderr and "not a git repository" in check.stderr
    kubeconfig = write(tmp_path / "kubeconfig", KUBECONFIG)
    fence = gate(
        "fence", "status", "--config", "src/prune-gate.yaml", f"--kubeconfig={kubeconfig}",
        cwd=workspace, env_extra=env,
    )  # fmt: skip
    assert fence.returncode == 2
    assert "may be the candidate's" in fence.stderr and "elsewhere" not in fence.stderr
    # With --repo naming the clone, the same --config is base's (and its fence).
    fence = gate(
        "fence", "status", "--repo", "src", "--config", "src/prune-gate.yaml",
        f"--kubeconfig={kubeconfig}", cwd=workspace, env_extra=env,
    )  # fmt: skip
    assert "Lease ci/speculation-fence:" in fence.stderr, fence.stderr


def test_rendered_mode_with_a_base_the_clone_lacks_is_refused_without_a_policy_file(
    tmp_path: Path,
) -> None:
    """A shallow clone, and a candidate that deletes prune-gate.yaml: 'no policy file here'
    says nothing about base's, which names a fence and may guard more."""
    repo = _repo(tmp_path, BASE_POLICY, None)
    env = _merge_group(tmp_path, repo)
    payload = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
    payload["merge_group"]["base_sha"] = "0" * 40
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(payload))
    base = write(tmp_path / "render" / "base" / "claim.yaml", CLAIM)
    result = gate(
        "check", "--base-manifests", str(base.parent), "--head-manifests", str(base.parent),
        cwd=repo.root, env_extra=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout
    assert "fetch-depth: 0" in result.stderr


def test_a_config_outside_every_checkout_is_read_from_disk_in_a_job_without_a_clone(
    tmp_path: Path,
) -> None:
    """A job that gates renders it downloaded, with no clone, against a policy from a secret:
    no candidate wrote that file, so it is read from disk (the refusal is for files in a
    checkout)."""
    repo = _repo(tmp_path, BASE_POLICY, LENIENT)
    env = _merge_group(tmp_path, repo)
    workspace = tmp_path / "job"
    workspace.mkdir()
    trusted = write(tmp_path / "secrets" / "policy.yaml", BASE_POLICY)
    base = write(tmp_path / "render" / "base" / "claim.yaml", CLAIM)
    head = write(tmp_path / "render" / "head" / "settings.yaml", SETTINGS.format(level=2))
    check = gate(
        "check", "--config", str(trusted), "--base-manifests", str(base.parent),
        "--head-manifests", str(head.parent), "-o", "json", cwd=workspace, env_extra=env,
    )  # fmt: skip
    assert check.returncode == 1, check.stderr
    assert json.loads(check.stdout)["verdict"] == "block"
    kubeconfig = write(tmp_path / "kubeconfig", KUBECONFIG)
    fence = gate(
        "fence", "status", "--config", str(trusted), f"--kubeconfig={kubeconfig}",
        cwd=workspace, env_extra=env,
    )  # fmt: skip
    assert "Lease ci/speculation-fence:" in fence.stderr, fence.stderr
