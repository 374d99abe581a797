"""Flux's generator: what the real kustomize-controller applies for a Kustomization's build fields
is what `gate check --flux-root` reads.

A Kustomization `apps` builds a path that has no kustomization file (Flux generates one from the
manifests below it, a directory with its own kustomization being one resource), and adds a
`namePrefix`, a `patches` entry, and `components` of which one is missing
(`ignoreMissingComponents`). The helper runs Flux's own generator for that
(tools/kustomize/flux.go); the names and data the controller applied (its own labels on them)
must be what prune-gate's Flux reader renders.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.helpers import GitRepo

from .flux import Flux
from .kube import Cluster
from .test_defer_artifact import flux_ns, kustomization, target
from .test_flux_substitution import applied_by_apps, read_for_apps, reconcile_main

pytestmark = pytest.mark.e2e

__all__ = ["flux_ns"]  # the fixture, used by name

BUILD_FIELDS = """\
  namePrefix: p-
  components: [../shared, ../gone]
  ignoreMissingComponents: true
  patches:
    - target: {kind: ConfigMap, name: settings}
      patch: |
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: settings}
        data: {patched: "yes"}
"""


def configmap(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{from: {name}}}\n"


def main_tree(ns: str) -> dict[str, str | None]:
    component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
    return {
        "clusters/prod/root.yaml": kustomization("root", ns, "./clusters/prod"),
        "clusters/prod/apps.yaml": kustomization(
            "apps", ns, "./apps/prod", target(ns) + BUILD_FIELDS
        ),
        # no kustomization file in apps/prod: Flux generates it
        "apps/prod/settings.yaml": configmap("settings"),
        "apps/prod/deep/more/cm.yaml": configmap("deep"),
        "apps/prod/web/kustomization.yaml": "namePrefix: web-\nresources: [page.yaml]\n",
        "apps/prod/web/page.yaml": configmap("page"),
        "apps/prod/web/unlisted.yaml": configmap("unlisted"),
        "apps/shared/kustomization.yaml": component + "resources: [extra.yaml]\n",
        "apps/shared/extra.yaml": configmap("extra"),
    }


def test_the_controller_applies_what_the_generator_reads(
    kube: Cluster, flux: Flux, flux_ns: str, tmp_path: Path
) -> None:
    ns = flux_ns
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(main_tree(ns), "main")

    read = read_for_apps(repo, base, ns)
    assert read == {
        ("ConfigMap", "p-settings"): {"from": "settings", "patched": "yes"},
        ("ConfigMap", "p-deep"): {"from": "deep"},
        ("ConfigMap", "p-web-page"): {"from": "page"},
        ("ConfigMap", "p-extra"): {"from": "extra"},
    }

    reconcile_main(flux, ns, repo, main_tree(ns)["clusters/prod/root.yaml"] or "")
    assert applied_by_apps(kube, ns) == read
