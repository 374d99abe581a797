"""Claims made by a shared kustomize Component (the volsync pattern of home-ops repositories),
and a Flux Kustomization removed in path mode (issue 33).

A real git repository shaped like the public Flux home-ops layout: `kubernetes/flux/cluster`
holds the `cluster-apps` Kustomization, which builds `kubernetes/apps`; each namespace's
kustomization lists its apps' `ks.yaml`; each app's Flux Kustomization builds `app/`, whose
kustomization uses `components: [../../../../components/volsync]`, a Component making the
app's claim from `${APP}` (post-build substitution). The candidate drops one app: its `ks.yaml`
line commented out, or its `components:` entry removed. The finding is placed at that line,
never at the Component's file (which the diff does not touch), and the retire fix marks that
app's claim only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.helpers import GitRepo
from tests.unit.test_cli import gate
from tests.unit.test_kustomize_trees import needs_renderer

SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 1h, url: "https://example.com/home-ops", ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux-system, namespace: flux-system}
spec:
  interval: 1h
  path: ./kubernetes/flux/cluster
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""
CLUSTER_APPS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: cluster-apps, namespace: flux-system}
spec:
  interval: 1h
  path: ./kubernetes/apps
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""
APPS_ROOT = "resources:\n  - ./default\n"
NAMESPACE_KUSTOMIZATION = """\
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ./paperless/ks.yaml
  - ./immich/ks.yaml
  - ./atuin/ks.yaml
"""
KS = """\
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {app}
  namespace: flux-system
spec:
  interval: 1h
  path: ./kubernetes/apps/default/{app}/app
  prune: true
  targetNamespace: default
  sourceRef: {{kind: GitRepository, name: flux-system}}
  postBuild:
    substitute:
      APP: {app}
      VOLSYNC_CAPACITY: 5Gi
"""
APP_KUSTOMIZATION = """\
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
components:
  - ../../../../components/volsync
resources:
  - ./configmap.yaml
"""
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: {app}-settings}}
data: {{TZ: Europe/Paris}}
"""
COMPONENT = """\
---
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources:
  - ./pvc.yaml
"""
PVC = """\
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: "${APP}"
spec:
  accessModes: ["${VOLSYNC_ACCESSMODES:=ReadWriteOnce}"]
  resources:
    requests:
      storage: "${VOLSYNC_CAPACITY:=5Gi}"
  storageClassName: "${VOLSYNC_STORAGECLASS:=ceph-block}"
"""
APPS = ("paperless", "immich", "atuin")
NAMESPACE_FILE = "kubernetes/apps/default/kustomization.yaml"


def home_ops(tmp_path: Path) -> GitRepo:
    files: dict[str, str | None] = {
        "kubernetes/flux/cluster/gotk-sync.yaml": SYNC,
        "kubernetes/flux/cluster/ks.yaml": CLUSTER_APPS,
        "kubernetes/apps/kustomization.yaml": APPS_ROOT,
        NAMESPACE_FILE: NAMESPACE_KUSTOMIZATION,
        "kubernetes/components/volsync/kustomization.yaml": COMPONENT,
        "kubernetes/components/volsync/pvc.yaml": PVC,
    }
    for app in APPS:
        base = f"kubernetes/apps/default/{app}"
        files[f"{base}/ks.yaml"] = KS.format(app=app)
        files[f"{base}/app/kustomization.yaml"] = APP_KUSTOMIZATION
        files[f"{base}/app/configmap.yaml"] = CONFIGMAP.format(app=app)
    repo = GitRepo(tmp_path / "repo")
    repo.commit(files, "base")
    return repo


def check(repo: GitRepo, *how: str) -> tuple[int, dict[str, Any], str]:
    argv = ("check", "--base", "HEAD~1", "--head", "HEAD", "-o", "json", *how)
    result = gate(*argv, cwd=repo.root)
    return result.returncode, json.loads(result.stdout) if result.stdout else {}, result.stderr


def findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


DROPPED_KS = NAMESPACE_KUSTOMIZATION.replace("  - ./immich/ks.yaml", "  # - ./immich/ks.yaml")


@needs_renderer
def test_a_dropped_ks_line_places_the_component_claim_at_that_line(tmp_path: Path) -> None:
    """Failed before: the claim's finding was placed at the Component's pvc.yaml (not in the
    diff), file-level, and its retire fix said to annotate that shared file."""
    repo = home_ops(tmp_path)
    repo.commit({NAMESPACE_FILE: DROPPED_KS}, "immich: retire")
    code, report, err = check(repo, "--flux-root", "kubernetes/flux/cluster")
    assert code == 1, err
    (claim,) = findings(report, "NOT_RETIRED")
    assert claim["object"]["name"] == "immich"
    assert claim["source"]["path"] == "kubernetes/components/volsync/pvc.yaml"
    line = line_of(DROPPED_KS, "# - ./immich/ks.yaml")
    assert claim["headSource"] == {"path": NAMESPACE_FILE, "line": line}
    fix = claim["remediation"]
    assert "its manifest is shared (it also makes PersistentVolumeClaim default/atuin" in fix
    assert "target: {kind: PersistentVolumeClaim, name: immich}" in fix
    assert "prune-gate.io/retire: <reason>" in fix
    assert "spec.patches" in fix
    # Under --flux-root what the Kustomization applied is judged: no blind finding beside it.
    assert not findings(report, "KUSTOMIZATION_REMOVED")


@needs_renderer
def test_a_dropped_components_entry_places_the_claim_at_that_entry(tmp_path: Path) -> None:
    repo = home_ops(tmp_path)
    app_file = "kubernetes/apps/default/paperless/app/kustomization.yaml"
    without = APP_KUSTOMIZATION.replace("  - ../../../../components/volsync\n", "")
    repo.commit({app_file: without}, "paperless: no more backups")
    code, report, err = check(repo, "--flux-root", "kubernetes/flux/cluster")
    assert code == 1, err
    (claim,) = findings(report, "NOT_RETIRED")
    assert claim["object"]["name"] == "paperless"
    assert claim["headSource"]["path"] == app_file
    # where the dropped entry was (the line that now stands there, as for resources:)
    assert claim["headSource"]["line"] == line_of(APP_KUSTOMIZATION, "components/volsync")


@needs_renderer
def test_path_mode_blocks_the_removed_kustomization_it_cannot_see_into(tmp_path: Path) -> None:
    """Failed before: `--render kustomize --path kubernetes/apps` saw only the Kustomization
    object leave and said ALLOW, though Flux prunes the claim it applied."""
    repo = home_ops(tmp_path)
    repo.commit({NAMESPACE_FILE: DROPPED_KS}, "immich: retire")
    code, report, err = check(repo, "--render", "kustomize", "--path", "kubernetes/apps")
    assert code == 1, err
    (ks,) = findings(report, "KUSTOMIZATION_REMOVED")
    assert ks["object"]["name"] == "immich"
    assert "--flux-root" in ks["remediation"]
    assert ks["headSource"] == {"path": NAMESPACE_FILE, "line": line_of(DROPPED_KS, "immich")}


def test_plain_git_mode_hint_names_flux_root_first(tmp_path: Path) -> None:
    repo = home_ops(tmp_path)
    repo.commit({NAMESPACE_FILE: DROPPED_KS}, "immich: retire")
    code, _, err = check(repo, "--path", "kubernetes/apps")
    assert code == 2
    assert "is kustomize input" in err
    assert err.index("--flux-root DIR") < err.index("--render kustomize")


@pytest.mark.parametrize("suspend", [True, False])
def test_a_removed_suspended_app_deletes_nothing(tmp_path: Path, suspend: bool) -> None:
    """kustomize-controller's finalizer deletes nothing for a suspended Kustomization."""
    repo = home_ops(tmp_path)
    ks_file = "kubernetes/apps/default/immich/ks.yaml"
    if suspend:
        repo.commit({ks_file: KS.format(app="immich") + "  suspend: true\n"}, "suspend")
    repo.commit({NAMESPACE_FILE: DROPPED_KS}, "immich: retire")
    code, report, err = check(repo, "--flux-root", "kubernetes/flux/cluster")
    assert bool(findings(report, "NOT_RETIRED")) is not suspend, err
    assert (code == 0) is suspend


REPOINTED = KS.format(app="immich").replace("/immich/app", "/immich/app-v2")


@needs_renderer
def test_path_mode_blocks_a_kustomization_re_pointed_it_cannot_see_into(tmp_path: Path) -> None:
    """Failed before: a Kustomization that stays but whose spec.path changes (its next apply
    prunes what the old path built) passed path mode silently."""
    repo = home_ops(tmp_path)
    repo.commit(
        {
            "kubernetes/apps/default/immich/ks.yaml": REPOINTED,
            "kubernetes/apps/default/immich/app-v2/kustomization.yaml": "resources: []\n",
        },
        "immich: new layout",
    )
    code, report, err = check(repo, "--render", "kustomize", "--path", "kubernetes/apps")
    assert code == 1, err
    (ks,) = findings(report, "KUSTOMIZATION_REMOVED")
    assert ks["object"]["name"] == "immich"
    assert "re-pointed (spec.path: ./kubernetes/apps/default/immich/app ->" in ks["message"]
    assert "--flux-root" in ks["remediation"]
    # With the entry point both paths are built: the claim the old path made is judged itself.
    code, report, err = check(repo, "--flux-root", "kubernetes/flux/cluster")
    assert code == 1, err
    assert not findings(report, "KUSTOMIZATION_REMOVED")
    assert [f["object"]["name"] for f in findings(report, "NOT_RETIRED")] == ["immich"]


@needs_renderer
def test_a_re_point_without_prune_passes_path_mode(tmp_path: Path) -> None:
    """Without prune, a re-pointed Kustomization deletes nothing on its next apply."""
    repo = home_ops(tmp_path)
    spec = REPOINTED.replace("  prune: true\n", "  prune: false\n")
    repo.commit(
        {
            "kubernetes/apps/default/immich/ks.yaml": spec,
            "kubernetes/apps/default/immich/app-v2/kustomization.yaml": "resources: []\n",
        },
        "immich: new layout",
    )
    code, report, err = check(repo, "--render", "kustomize", "--path", "kubernetes/apps")
    assert not findings(report, "KUSTOMIZATION_REMOVED"), report
    assert code == 0, err


@needs_renderer
def test_a_re_point_while_suspended_still_blocks(tmp_path: Path) -> None:
    """The attack: re-point and suspend in one change, resume in the next. The resume changes
    no path, so it is the re-point that must block: a suspended Kustomization prunes what the
    old path built as soon as it resumes."""
    repo = home_ops(tmp_path)
    repo.commit(
        {
            "kubernetes/apps/default/immich/ks.yaml": REPOINTED + "  suspend: true\n",
            "kubernetes/apps/default/immich/app-v2/kustomization.yaml": "resources: []\n",
        },
        "immich: new layout, suspended",
    )
    code, report, err = check(repo, "--render", "kustomize", "--path", "kubernetes/apps")
    assert code == 1, err
    (ks,) = findings(report, "KUSTOMIZATION_REMOVED")
    assert ks["object"]["name"] == "immich" and "re-pointed" in ks["message"]
