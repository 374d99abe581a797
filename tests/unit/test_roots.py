"""Several roots on one side, and roots that move: what the whole deploy holds decides.

Real git repositories, the real CLI, `--render kustomize` over two Flux roots (directories
without a kustomization, built as Flux generates one).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.helpers import GitRepo, claim
from tests.unit.test_cli import gate
from tests.unit.test_kustomize_trees import needs_renderer
from tests.unit.test_rules import CRD

NS = "apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n"
RELEASE = """\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: db, namespace: app}
spec:
  interval: 1h
  chart: {spec: {chart: postgresql, sourceRef: {kind: HelmRepository, name: bitnami}}}
"""
BACKUP = "apiVersion: example.com/v1\nkind: Backup\nmetadata: {{name: {name}, namespace: app}}\n"
ROOTS = ("--path", "apps", "--path", "infra")


def check(repo: GitRepo, *args: str, base: str = "HEAD~1") -> tuple[int, dict[str, object], str]:
    """`gate check --render kustomize -o json` from `base` to HEAD: exit code, report, stderr."""
    result = gate(
        "check",
        "--base",
        base,
        "--head",
        "HEAD",
        "--render",
        "kustomize",
        "-o",
        "json",
        *args,
        cwd=repo.root,
    )
    data = json.loads(result.stdout) if result.stdout else {}
    return result.returncode, data, result.stderr


def codes(data: dict[str, object]) -> set[str]:
    findings = data.get("findings")
    assert isinstance(findings, list)
    return {f["code"] for f in findings}


@needs_renderer
def test_two_roots_declaring_one_namespace_is_one_object_and_a_warning(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"apps/ns.yaml": NS, "apps/claim.yaml": claim(), "infra/README.md": "x"}, "base")
    repo.commit({"infra/ns.yaml": NS}, "infrastructure renders the namespace too")
    rc, data, stderr = check(repo, *ROOTS)
    assert rc == 0, (data, stderr)
    assert "Namespace app is declared 2 times (apps/ns.yaml:1, infra/ns.yaml:1)" in stderr
    # And when one root stops declaring it, the other still does: nothing is deleted.
    repo.commit({"apps/ns.yaml": None}, "apps hands the namespace over")
    rc, data, stderr = check(repo, *ROOTS)
    assert rc == 0 and not data["findings"], (data, stderr)


@needs_renderer
def test_copies_with_conflicting_specs_are_an_error_naming_both(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"apps/claim.yaml": claim(), "infra/README.md": "x"}, "base")
    repo.commit({"infra/claim.yaml": claim(size="20Gi")}, "a second, different copy")
    rc, _, stderr = check(repo, *ROOTS)
    assert rc == 2
    assert "PersistentVolumeClaim app/data is declared twice, and the copies differ in spec" in (
        stderr
    )
    assert "apps/claim.yaml:1" in stderr and "infra/claim.yaml:1" in stderr


@needs_renderer
def test_objects_moved_between_roots_are_not_removed(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "apps/db.yaml": RELEASE,
            "apps/claim.yaml": claim(),
            "apps/README.md": "x",
            "infra/README.md": "x",
        },
        "base",
    )
    repo.commit(
        {
            "apps/db.yaml": None,
            "apps/claim.yaml": None,
            "infra/db.yaml": RELEASE,
            "infra/claim.yaml": claim(),
        },
        "move the database to infrastructure",
    )
    rc, data, stderr = check(repo, *ROOTS)
    assert rc == 0 and not data["findings"], (data, stderr)
    # Root by root, the same move reads as a removal: the claim is blocked.
    rc, data, _ = check(repo, "--path", "apps")
    assert rc == 1 and "NOT_RETIRED" in codes(data)


@needs_renderer
def test_a_crd_removed_with_its_only_resources_is_not_blocked(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "infra/crd.yaml": CRD,
            "apps/nightly.yaml": BACKUP.format(name="nightly"),
            "apps/weekly.yaml": BACKUP.format(name="weekly"),
            "apps/README.md": "x",
            "infra/README.md": "x",
        },
        "base",
    )
    repo.commit({"infra/crd.yaml": None, "apps/nightly.yaml": None}, "one backup stays")
    rc, data, _ = check(repo, *ROOTS)
    assert rc == 1 and codes(data) == {"CRD_HOLDS_RESOURCES"}
    assert data["findings"][0]["evidence"] == ["Backup app/weekly exists"]  # type: ignore[index]
    repo.commit({"apps/weekly.yaml": None}, "the last one goes too")
    rc, data, _ = check(repo, *ROOTS, base="HEAD~2")
    assert rc == 0 and not data["findings"], data


@needs_renderer
def test_roots_that_move_between_revisions_are_compared_by_per_side_paths(
    tmp_path: Path,
) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"clusters/old/claim.yaml": claim()}, "base")
    repo.commit(
        {"clusters/old/claim.yaml": None, "kubernetes/apps/claim.yaml": claim()},
        "provider migration moves the root",
    )
    rc, data, stderr = check(repo, "--base-path", "clusters/old", "--head-path", "kubernetes/apps")
    assert rc == 0 and not data["findings"], (data, stderr)
    # One --path for both sides cannot even be built at the base.
    rc, _, stderr = check(repo, "--path", "kubernetes/apps")
    assert rc == 2 and "kubernetes/apps does not exist at revision" in stderr
    # And a real removal across the move is still found.
    repo.commit({"kubernetes/apps/claim.yaml": None, "kubernetes/apps/x.md": "x"}, "drop it")
    moved = ("--base-path", "clusters/old", "--head-path", "kubernetes/apps")
    rc, data, _ = check(repo, *moved, base="HEAD~2")
    assert rc == 1 and "NOT_RETIRED" in codes(data)


def _configmaps(root: str, n: int) -> dict[str, str | None]:
    return {
        f"{root}/cm-{i}.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\n"
        for i in range(n)
    }


@needs_renderer
def test_a_root_whose_build_loses_everything_is_one_mass_prune(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    files = _configmaps("apps/web", 6)
    files["apps/web/kustomization.yaml"] = "resources:\n" + "".join(
        f"  - cm-{i}.yaml\n" for i in range(6)
    )
    repo.commit({**files, "infra/README.md": "x"}, "base")
    # A wrong path in the kustomization: the files stay, and it now builds an empty directory.
    repo.commit(
        {
            "apps/web/kustomization.yaml": "resources:\n  - ../empty\n",
            "apps/empty/kustomization.yaml": "resources: []\n",
        },
        "broken path",
    )
    rc, data, stderr = check(repo, "--path", "apps/web", "--path", "infra")
    assert rc == 1, (data, stderr)
    findings = data["findings"]
    assert isinstance(findings, list) and len(findings) == 1
    finding = findings[0]
    assert finding["code"] == "MASS_PRUNE"
    assert "root apps/web loses every one of its objects at once" in finding["message"]
    # Moving all of them to another root is no prune at all.
    repo.commit({**_configmaps("infra", 6)}, "move instead")
    rc, data, _ = check(repo, "--path", "apps/web", "--path", "infra", base="HEAD~2")
    assert rc == 0 and not data["findings"], data


def test_the_share_comes_from_the_policy_file(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            **_configmaps("apps", 20),
            "apps/README.md": "x",
            "prune-gate.yaml": "massPrune: {fraction: 0.9}\n",
        }
    )
    repo.commit({f"apps/cm-{i}.yaml": None for i in range(12)}, "remove 12 of 20")
    lenient = gate("check", "--base", "HEAD~1", "--head", "HEAD", "--path", "apps", cwd=repo.root)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    repo.commit({"prune-gate.yaml": "massPrune: {fraction: 0.5}\n"}, "strict")
    repo.commit({f"apps/cm-{i}.yaml": None for i in range(12, 20)}, "and the rest")
    strict = gate("check", "--base", "HEAD~3", "--head", "HEAD", "--path", "apps", cwd=repo.root)
    assert strict.returncode == 1 and "MASS_PRUNE" in strict.stdout, strict.stderr


def test_a_bumped_submodule_is_not_passed_unseen(tmp_path: Path) -> None:
    """The manifests of a submodule are another repository's: a bump changes what is deployed
    in a way the gate cannot read, so it stops (an adversarial review passed a claim this way)."""
    repo = GitRepo(tmp_path / "repo")
    other = claim().replace("name: data", "name: other")
    repo.commit({"apps/claim.yaml": claim(), "other/x.yaml": other}, "base")
    first, second = "1" * 40, "2" * 40
    for pin in (first, second):
        repo.git("update-index", "--add", "--cacheinfo", f"160000,{pin},apps/vendor")
        repo.git("commit", "-q", "-m", f"pin {pin[:4]}")
    result = gate("check", "--base", "HEAD~1", "--head", "HEAD", cwd=repo.root)
    assert result.returncode == 2
    assert f"submodule apps/vendor changes ({first[:12]} -> {second[:12]})" in result.stderr
    # A submodule that does not change is no reason to stop; one outside the paths neither.
    same = gate("check", "--base", "HEAD", "--head", "HEAD", cwd=repo.root)
    assert same.returncode == 0, same.stderr
    beside = gate("check", "--base", "HEAD~1", "--head", "HEAD", "--path", "other", cwd=repo.root)
    assert beside.returncode == 0, beside.stderr
