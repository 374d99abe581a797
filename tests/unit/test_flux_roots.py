"""`--flux-root`: the Kustomizations a repository declares decide what each revision deploys.

Real git repositories, the real CLI. The cluster entry point holds the flux-system sync and an
`apps` Kustomization whose `spec.path` holds a claim; each test changes the Kustomization, not
the claim's file, which is how a claim gets past a gate that reads directories.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.helpers import GitRepo
from tests.unit.test_build_server import needs_helper as needs_renderer
from tests.unit.test_cli import gate

SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 1m, url: "https://example.com/repo", ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux-system, namespace: flux-system}
spec:
  interval: 10m
  path: ./clusters/prod
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""
APPS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: apps, namespace: flux-system}}
spec:
  interval: 10m
  path: {path}
  prune: {prune}
  targetNamespace: {namespace}
  sourceRef: {{kind: {source}, name: flux-system}}
  postBuild:
    substitute: {{APP: web}}
"""
CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: "${APP}-data"}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""


def apps(
    path: str = "./apps/prod",
    prune: str = "true",
    namespace: str = "shop",
    source: str = "GitRepository",
) -> str:
    return APPS.format(path=path, prune=prune, namespace=namespace, source=source)


def repo_with(tmp_path: Path, head: dict[str, str | None]) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": apps(),
            "apps/prod/claim.yaml": CLAIM,
            "apps/staging/README.md": "nothing here yet",
        },
        "base",
    )
    repo.commit(head, "candidate")
    return repo


def check(repo: GitRepo, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = gate(
        "check",
        "--base",
        "HEAD~1",
        "--head",
        "HEAD",
        "--flux-root",
        "clusters/prod",
        "-o",
        "json",
        *extra,
        cwd=repo.root,
    )
    return result.returncode, json.loads(result.stdout) if result.stdout else {}, result.stderr


def only(data: dict[str, Any]) -> dict[str, Any]:
    (finding,) = data["findings"]
    assert isinstance(finding, dict)
    return finding


CASES: dict[str, tuple[dict[str, str | None], str]] = {
    "the Kustomization is removed": (
        {"clusters/prod/apps.yaml": None},
        "Kustomization flux-system/apps is removed (prune on): Flux deletes what it applied",
    ),
    "its spec.path changes": (
        {"clusters/prod/apps.yaml": apps(path="./apps/staging")},
        "spec.path changes from ./apps/prod to ./apps/staging",
    ),
    "its targetNamespace changes": (
        {"clusters/prod/apps.yaml": apps(namespace="store")},
        "spec.targetNamespace changes from shop to store",
    ),
    "its sourceRef changes to a source prune-gate does not read": (
        {"clusters/prod/apps.yaml": apps(source="OCIRepository")},
        "spec.sourceRef changes from GitRepository flux-system to OCIRepository flux-system "
        "(a source prune-gate does not read)",
    ),
}


@needs_renderer
@pytest.mark.parametrize("how", sorted(CASES))
def test_a_claim_deleted_through_its_kustomization_is_found(tmp_path: Path, how: str) -> None:
    change, cause = CASES[how]
    repo = repo_with(tmp_path, change)
    # A source prune-gate does not read is out of scope only when said so (else exit 2:
    # tests/unit/test_flux_sources.py).
    ignore = ["--flux-ignore-source", "OCIRepository/flux-system/flux-system"]
    rc, data, stderr = check(repo, *(ignore if "sourceRef" in how else []))
    assert rc == 1, (data, stderr)
    finding = only(data)
    assert finding["code"] == "NOT_RETIRED"
    assert finding["object"]["namespace"] == "shop" and finding["object"]["name"] == "web-data"
    assert finding["evidence"][0].startswith("cause: ") and cause in finding["evidence"][0]
    # Reading the entry point as one more directory sees only a Kustomization change: removed
    # or re-pointed with prune on, it deletes what it applied unseen, so it blocks
    # (KUSTOMIZATION_REMOVED, issue 33; a re-point passed in silence before).
    plain = gate(
        "check",
        "--base",
        "HEAD~1",
        "--head",
        "HEAD",
        "--render",
        "kustomize",
        "--path",
        "clusters/prod",
        cwd=repo.root,
    )
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert "KUSTOMIZATION_REMOVED" in plain.stdout
    verb = "removed" if how == "the Kustomization is removed" else "re-pointed"
    assert f"Kustomization flux-system/apps is {verb}" in plain.stdout


@needs_renderer
@pytest.mark.parametrize(
    "apps_yaml",
    [apps(prune="false"), apps().replace("prune: true", "prune: true\n  deletionPolicy: Orphan")],
)
def test_a_kustomization_that_does_not_prune_orphans(tmp_path: Path, apps_yaml: str) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": apps_yaml,
            "apps/prod/claim.yaml": CLAIM,
        },
        "base",
    )
    repo.commit({"clusters/prod/apps.yaml": None}, "remove the Kustomization")
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)
    finding = only(data)
    assert finding["code"] == "ORPHANED_BY_KEEP" and finding["severity"] == "warn"
    assert "Flux leaves it" in finding["message"]


@needs_renderer
def test_a_kustomization_whose_path_moves_with_its_files_removes_nothing(tmp_path: Path) -> None:
    repo = repo_with(
        tmp_path,
        {
            "apps/prod/claim.yaml": None,
            "kubernetes/apps/prod/claim.yaml": CLAIM,
            "clusters/prod/apps.yaml": apps(path="./kubernetes/apps/prod"),
        },
    )
    rc, data, stderr = check(repo)
    assert rc == 0 and not data["findings"], (data, stderr)


@needs_renderer
def test_errors_name_what_to_fix(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, {"clusters/prod/apps.yaml": apps(path="./apps/nowhere")})
    rc, _, stderr = check(repo)
    assert rc == 2
    assert "Kustomization flux-system/apps names spec.path apps/nowhere" in stderr
    assert "clusters/prod/apps.yaml:1" in stderr
    rc, _, stderr = check(repo, "--path", "apps")
    assert rc == 2 and "leave out --path" in stderr
    rc, _, stderr = check(repo, "--flux-source", "flux-system")
    assert rc == 2 and "NAMESPACE/NAME" in stderr


@needs_renderer
@pytest.mark.parametrize(
    ("name", "expected"),
    [("${APP/web/shop}-data", "shop-data"), ("${APP:0:2}-${#APP}", "we-3"), ("${APP^^}", "WEB")],
)
def test_a_name_is_substituted_with_flux_s_code(tmp_path: Path, name: str, expected: str) -> None:
    """The forms kustomize-controller's substitution (fluxcd/pkg/envsubst) knows beyond
    defaults: the Python emulation left them as written, so the claim had another identity than
    the one Flux gives it (tests/unit/test_flux_substitution.py has every form)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": apps(),
            "apps/prod/claim.yaml": CLAIM.replace('"${APP}-data"', json.dumps(name)),
            "apps/prod/README.md": "x",
        },
        "base",
    )
    repo.commit({"apps/prod/claim.yaml": None}, "drop the claim")
    rc, data, stderr = check(repo)
    assert rc == 1 and only(data)["object"]["name"] == expected, (data, stderr)


@needs_renderer
def test_a_variable_with_no_value_fails_as_flux_fails(tmp_path: Path) -> None:
    """Strict substitution (kustomize-controller >= 1.9): `${UNKNOWN}` with every source read
    is a Kustomization Flux cannot build; the check cannot say what it applies."""
    repo = repo_with(tmp_path, {"apps/prod/claim.yaml": CLAIM.replace("APP", "UNKNOWN")})
    rc, _, stderr = check(repo)
    assert rc == 2 and "variable not set (strict mode)" in stderr and "UNKNOWN" in stderr


@needs_renderer
def test_variables_come_from_configmaps_of_the_same_revision(tmp_path: Path) -> None:
    settings = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: flux-system}\n"
        "data: {APP: shop}\n"
    )
    from_settings = apps().replace(
        "    substitute: {APP: web}\n",
        "    substituteFrom: [{kind: ConfigMap, name: settings}]\n",
    )
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/settings.yaml": settings,
            "clusters/prod/apps.yaml": from_settings,
            "apps/prod/claim.yaml": CLAIM,
            "apps/prod/README.md": "x",
        },
        "base",
    )
    repo.commit({"apps/prod/claim.yaml": None}, "drop the claim")
    rc, data, _ = check(repo)
    assert rc == 1 and only(data)["object"]["name"] == "shop-data"


CHART = {
    "charts/db/Chart.yaml": "apiVersion: v2\nname: db\nversion: 0.1.0\n",
    "charts/db/templates/pvc.yaml": """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{ .Release.Name }}-data
  {{- if .Values.keep }}
  annotations: {helm.sh/resource-policy: keep}
  {{- else if .Values.retired }}
  annotations: {prune-gate.io/retire: "db moves to the new cluster"}
  {{- end }}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: {{ .Values.size }}}}
""",
}
RELEASE = """\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: db, namespace: shop}}
spec:
  interval: 1h
  chart:
    spec:
      chart: ./charts/db
      sourceRef: {{kind: GitRepository, name: flux-system, namespace: flux-system}}
  values: {{size: 20Gi, keep: {keep}, retired: {retired}}}
"""


def release_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: str, retired: str = "false"
) -> GitRepo:
    from tests.unit.test_chart import helm

    monkeypatch.setenv("PATH", f"{Path(helm()).parent}{os.pathsep}{os.environ['PATH']}")
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": apps(),
            "apps/prod/db.yaml": RELEASE.format(keep=keep, retired=retired),
            "apps/prod/README.md": "x",
            **CHART,
        },
        "base",
    )
    repo.commit({"apps/prod/db.yaml": None}, "remove the database release")
    return repo


@needs_renderer
def test_a_removed_helm_release_uninstalls_the_claims_its_chart_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = release_repo(tmp_path, monkeypatch, keep="false")
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    finding = only(data)  # said once, in the release's terms: not NOT_RETIRED besides
    assert finding["code"] == "RELEASE_UNINSTALL_DELETES"
    assert (finding["object"]["namespace"], finding["object"]["name"]) == ("shop", "db-data")
    assert (
        "uninstalls release shop/db, and Helm deletes PersistentVolumeClaim shop/db-data"
        in (finding["message"])
    )
    assert "./charts/db" in finding["evidence"][0]
    assert finding["source"]["path"] == "apps/prod/db.yaml"  # where a reader edits


@needs_renderer
def test_an_uninstalled_claim_on_a_retained_static_volume_keeps_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart's claim is bound to a static PersistentVolume with Retain that the repository
    declares and keeps: the uninstall deletes the claim, not the data (VOLUME_RETAINS_DATA, a
    warning, as for any claim), rather than RELEASE_UNINSTALL_DELETES."""
    repo = release_repo(tmp_path, monkeypatch, keep="false")
    volume = """\
apiVersion: v1
kind: PersistentVolume
metadata: {name: db-nfs}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: shop, name: db-data}
  nfs: {server: nas.internal, path: /export/db}
"""
    # The same repository, the release back with a static volume beside it, then removed.
    repo.commit({"apps/prod/db.yaml": RELEASE.format(keep="false", retired="false")}, "back")
    repo.commit({"apps/prod/pv.yaml": volume}, "a static volume for the claim")
    repo.commit({"apps/prod/db.yaml": None}, "remove the release again")
    rc, data, stderr = check(repo)
    assert rc == 0 and data["verdict"] == "warn", (data, stderr)
    finding = only(data)
    assert finding["code"] == "VOLUME_RETAINS_DATA", finding
    assert "db-nfs" in finding["message"]


@needs_renderer
def test_a_speculative_uninstall_defers_by_keeping_the_helm_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge-queue candidate that removes a HelmRelease whose chart makes a retired claim
    defers, and the artifact keeps the HelmRelease as base declares it (the claim itself is
    helm-controller's to install, not the artifact's): the release is not uninstalled until the
    merge. Without retirement the uninstall blocks, as NOT_RETIRED would."""
    repo = release_repo(tmp_path, monkeypatch, keep="false")
    rc, data, stderr = check(repo, "--context", "speculative")
    codes = {(f["code"], f["severity"]) for f in data["findings"]}
    assert rc == 1 and data["verdict"] == "block", (data, stderr)
    assert codes == {("RELEASE_UNINSTALL_DELETES", "block"), ("SPECULATIVE_PRUNE", "defer")}

    repo = release_repo(tmp_path / "retired", monkeypatch, keep="false", retired="true")
    out = tmp_path / "artifact"
    rc, data, stderr = check(repo, "--context", "speculative", "--defer-to", str(out))
    assert rc == 0 and data["verdict"] == "defer", (data, stderr)  # written: deploy the artifact
    assert [(f["code"], f["object"]["name"]) for f in data["findings"]] == [
        ("SPECULATIVE_PRUNE", "db-data")
    ]
    written = "\n".join(p.read_text() for p in sorted(out.rglob("*.yaml")))
    assert "kind: HelmRelease" in written and "name: db" in written, written
    assert "kind: PersistentVolumeClaim" not in written  # the chart's, not the artifact's
    rc, data, _ = check(repo)  # merged: retired, the uninstall may go
    assert rc == 0 and data["verdict"] == "allow", data


@needs_renderer
def test_a_claim_the_chart_keeps_is_an_orphan_not_a_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = release_repo(tmp_path, monkeypatch, keep="true")
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)
    assert only(data)["code"] == "ORPHANED_BY_KEEP"


DROP = """\
  patches:
    - target: {kind: PersistentVolumeClaim}
      patch: |
        $patch: delete
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata: {name: any}
"""


@needs_renderer
@pytest.mark.parametrize("how", ["a $patch: delete in spec.patches", "a new spec.namePrefix"])
def test_what_the_kustomization_adds_to_the_build_counts(tmp_path: Path, how: str) -> None:
    """Flux builds spec.patches, images, components and name affixes into the path's build: a
    claim deleted by a patch on the Kustomization object is deleted."""
    extra = DROP if how.startswith("a $patch") else "  namePrefix: v2-\n"
    repo = repo_with(tmp_path, {"clusters/prod/apps.yaml": apps() + extra})
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    finding = only(data)
    assert finding["code"] == "NOT_RETIRED" and finding["object"]["name"] == "web-data"
    assert "Kustomization flux-system/apps no longer applies it" in finding["evidence"][0]


@needs_renderer
def test_the_entry_point_is_its_own_kustomizations(tmp_path: Path) -> None:
    """What the entry point holds is applied by flux-system: built once (no duplicates), pruned
    by it, and when the candidate re-points flux-system, Flux applies the new path instead."""
    repo = repo_with(tmp_path, {"clusters/prod/extra.yaml": CLAIM.replace("${APP}", "top")})
    rc, data, stderr = check(repo)
    assert rc == 0 and "declared" not in stderr, (data, stderr)
    repo.commit({"clusters/prod/extra.yaml": None}, "drop the claim in the entry point")
    rc, data, _ = check(repo)
    finding = only(data)
    assert rc == 1 and finding["object"]["name"] == "top-data"
    assert "Kustomization flux-system/flux-system no longer applies it" in finding["evidence"][0]
    other = SYNC.replace("./clusters/prod", "./clusters/other")
    repo.commit(
        {"clusters/prod/flux-system/gotk-sync.yaml": other, "clusters/other/README.md": "x"},
        "re-point the cluster to an empty directory",
    )
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    assert "web-data" in {f["object"]["name"] for f in data["findings"]}


@needs_renderer
def test_history_replays_with_the_roots_each_revision_declares(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, {"clusters/prod/extra.yaml": CLAIM.replace("${APP}", "top")})
    repo.commit({"clusters/prod/apps.yaml": None}, "remove the apps Kustomization")
    result = gate(
        "history",
        "--range",
        "HEAD~2..HEAD",
        "--flux-root",
        "clusters/prod",
        "-o",
        "json",
        cwd=repo.root,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["commits"]
    assert [r["verdict"] for r in rows] == ["allow", "block"]
    assert rows[1]["codes"] == ["NOT_RETIRED"] and rows[1]["objects"] == rows[0]["objects"] - 2
    bad = gate(
        "history", "--range", "HEAD~1..HEAD", "--flux-root", "x", "--path", "y", cwd=repo.root
    )
    assert bad.returncode == 2 and "leave out --path" in bad.stderr


@needs_renderer
def test_a_claim_from_a_component_goes_with_its_kustomization(tmp_path: Path) -> None:
    """The shape of onedr0p/home-ops 45fa022975 (remove zigbee2mqtt and mosquitto): the claim
    comes from `spec.components`, not from the path, and is pruned with the Kustomization."""
    with_component = apps().replace(
        "  postBuild:", "  components: [../../components/backup]\n  postBuild:"
    )
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": with_component,
            "apps/prod/cm.yaml": 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${APP}"}\n',
            "components/backup/kustomization.yaml": (
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
                "resources: [claim.yaml]\n"
            ),
            "components/backup/claim.yaml": CLAIM,
        },
        "base",
    )
    repo.commit({"clusters/prod/apps.yaml": None}, "remove the app")
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    finding = only(data)
    assert (finding["object"]["namespace"], finding["object"]["name"]) == ("shop", "web-data")
    assert finding["source"]["path"] == "components/backup/claim.yaml"
