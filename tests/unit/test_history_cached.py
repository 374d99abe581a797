"""`gate history` says the same with the build cache as without it, over a Flux repository's
history that changes, commit by commit, each kind of thing a build reads.

The repository is laid out as Flux repositories commonly are: an entry point, an `apps`
Kustomization over a directory without a kustomization file (Flux's generator scans it), a
Kustomization per app with a shared component, variables substituted from a ConfigMap, and
claims. Its commits change an app, the component every app uses, the substituted values, the
generator's directory, remove an app with its claim, break a build and fix it. The replay with
the cache off, with an empty cache and again with the cache it left must give the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.cli.root import main
from gate.sources import buildcache
from tests.unit.helpers import GitRepo, cli_runner
from tests.unit.test_build_server import needs_helper
from tests.unit.test_flux_roots import SYNC

APPS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 10m
  path: ./apps
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
  postBuild:
    substituteFrom: [{kind: ConfigMap, name: cluster-settings}]
"""
SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: cluster-settings, namespace: flux-system}}
data: {{CLUSTER: {cluster}}}
"""
APP_KS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: {app}, namespace: flux-system}}
spec:
  interval: 10m
  path: ./apps/{ns}/{app}/app
  prune: true
  targetNamespace: {ns}
  components: [../../../../components/common]
  sourceRef: {{kind: GitRepository, name: flux-system}}
  postBuild:
    substitute: {{APP: {app}}}
    substituteFrom: [{{kind: ConfigMap, name: cluster-settings}}]
"""
CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: "${APP}-data"}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""
DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: "${{APP}}"}}
spec:
  selector: {{matchLabels: {{app: "${{APP}}"}}}}
  template:
    metadata: {{labels: {{app: "${{APP}}"}}}}
    spec:
      containers: [{{name: main, image: "example/{image}"}}]
      volumes: [{{name: data, persistentVolumeClaim: {{claimName: "${{APP}}-data"}}}}]
"""
COMPONENT = """\
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources: [settings.yaml]
"""
TOOL = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: tools}}\n"
COMPONENT_SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: "${{APP}}-settings"}}
data: {{cluster: "${{CLUSTER}}", level: "{level}"}}
"""


def app(ns: str, name: str, image: str = "app:1") -> dict[str, str | None]:
    return {
        f"apps/{ns}/{name}/ks.yaml": APP_KS.format(app=name, ns=ns),
        f"apps/{ns}/{name}/app/kustomization.yaml": "resources: [claim.yaml, deploy.yaml]\n",
        f"apps/{ns}/{name}/app/claim.yaml": CLAIM,
        f"apps/{ns}/{name}/app/deploy.yaml": DEPLOY.format(image=image),
    }


def namespace(ns: str, apps: list[str]) -> dict[str, str | None]:
    listed = ", ".join(f"./{a}/ks.yaml" for a in apps)
    return {f"apps/{ns}/kustomization.yaml": f"resources: [{listed}]\n"}


def gone(files: dict[str, str | None]) -> dict[str, str | None]:
    return dict.fromkeys(files)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[GitRepo, str]:
    return make_history(tmp_path_factory.mktemp("cached") / "repo")


def make_history(root: Path) -> tuple[GitRepo, str]:
    repo = GitRepo(root)
    start = repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": APPS,
            "clusters/prod/settings.yaml": SETTINGS.format(cluster="prod"),
            "components/common/kustomization.yaml": COMPONENT,
            "components/common/settings.yaml": COMPONENT_SETTINGS.format(level="info"),
            **namespace("shop", ["web", "db"]),
            **app("shop", "web"),
            **app("shop", "db"),
            **namespace("media", ["player"]),
            **app("media", "player"),
            "README.md": "home cluster\n",
        },
        "start",
    )
    repo.commit(app("shop", "web", image="app:2"), "web: a new image")
    repo.commit({"README.md": "home cluster, documented\n"}, "docs only")
    repo.commit(
        {"components/common/settings.yaml": COMPONENT_SETTINGS.format(level="debug")},
        "common: debug logging",
    )
    repo.commit({"clusters/prod/settings.yaml": SETTINGS.format(cluster="home")}, "rename")
    repo.commit({**namespace("shop", ["web"]), **gone(app("shop", "db"))}, "drop db")
    # a namespace directory of plain manifests: Flux's generator lists them
    repo.commit({"apps/tools/cm.yaml": TOOL.format(name="one")}, "tools")
    repo.commit({"apps/tools/more/cm.yaml": TOOL.format(name="two")}, "tools, deeper")
    repo.commit({"apps/media/player/app/kustomization.yaml": "resources: [missing.yaml]\n"})
    repo.commit({"apps/media/player/app/kustomization.yaml": "resources: [claim.yaml]\n"})
    return repo, start


def replay(repo: GitRepo, start: str) -> list[dict[str, Any]]:
    result = cli_runner().invoke(
        main,
        [
            "history", "--repo", str(repo.root), "--range", f"{start}..HEAD",
            "--flux-root", "clusters/prod", "-o", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)["commits"]
    return [without_seconds(r) for r in rows]


def without_seconds(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_seconds(v) for v in value]
    return value


@needs_helper
def test_the_replay_is_the_same_without_the_cache_with_an_empty_one_and_a_full_one(
    history: tuple[GitRepo, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    repo, start = history
    monkeypatch.setenv(buildcache.ENV, "off")
    buildcache.reset()
    uncached = replay(repo, start)
    assert buildcache.BUILDS.hits == 0

    monkeypatch.setenv(buildcache.ENV, str(tmp_path / "builds"))
    buildcache.reset()
    cold = replay(repo, start)
    reused_across_commits = buildcache.BUILDS.hits
    buildcache.flush()

    buildcache.reset()  # a later run: only what the store kept
    warm = replay(repo, start)
    assert cold == uncached
    assert warm == uncached
    assert reused_across_commits > 0
    # a later run over the same commits builds nothing but the one build that fails (a failure
    # is not kept: it is found again, with its message)
    assert buildcache.BUILDS.misses == 1
    verdicts = [r["verdict"] for r in uncached]
    assert "block" in verdicts and "error" in verdicts, verdicts  # the history is not trivial
