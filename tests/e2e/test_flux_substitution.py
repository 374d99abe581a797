"""Flux's post-build substitution: what the real kustomize-controller applies is what
`gate check --flux-root` reads.

A Kustomization `apps` names its objects with several of the forms Flux documents (`${var}`,
defaults, `${var/prod/stg}`, `${var:0:4}`, `${#var}`, `${var^^}`, ...), its values inline and
from a ConfigMap of the same revision; one object opts out. kustomize-controller applies it; the
names it applied (its own labels on them) must be the names prune-gate's Flux reader renders
(the helper runs Flux's own substitution code: tools/kustomize/flux.go), and `gate check` on a
candidate that drops the claim names the claim the controller created.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import yaml

from gate.sources.flux import render_flux
from tests.unit.helpers import GitRepo

from . import kube as k
from .flux import KUSTOMIZATIONS, KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, OWNER_NAME, Flux
from .kube import Cluster
from .test_defer_artifact import SOURCE, exists, flux_ns, kustomization, target, tree_files
from .test_live import run_gate

pytestmark = pytest.mark.e2e

__all__ = ["flux_ns"]  # the fixture, used by name

#: Each ConfigMap's name is one form; the values: ENV=prod, APP=webserver (inline), REGION
#: from the ConfigMap `vars`.
FORMS = [
    "${APP}",
    "${APP:0:4}-x",
    "${ENV/prod/stg}-${APP}",
    "${REGION//-/.}",
    "len-${#APP}",
    "${MISSING:=dflt}-a",
    "${MISSING:-dflt}-b",
    "${APP}-${REGION%%-*}",
    "${REGION#*-}",
]
#: The same names, written out by hand (and checked against the controller below). Names are
#: lowercase (Kubernetes) and hold no comma (kustomize keeps a renamed object's previous names
#: comma-joined: kustomize-controller's build panics on `${APP,,}` in a name with a
#: targetNamespace), so the case forms are in data.
DATA = {"upper": "${APP^^}", "first": "${APP^}", "lower": "${UPPER,,}", "length": "n${#APP}"}
DATA_EXPECTED = {"upper": "WEBSERVER", "first": "Webserver", "lower": "loud", "length": "n9"}
EXPECTED = {
    "webserver",
    "webs-x",
    "stg-webserver",
    "eu.west.1",
    "len-9",
    "dflt-a",
    "dflt-b",
    "webserver-eu",
    "west-1",
}


def configmaps() -> str:
    docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}} for n in FORMS]
    docs.append(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cases"}, "data": DATA}
    )
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "opted-out",
                "annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"},
            },
            "data": {"raw": "${APP}"},
        }
    )
    return yaml.safe_dump_all(docs)


CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: "${APP:0:3}-${ENV/prod/data}"}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""


def main_tree(ns: str) -> dict[str, str | None]:
    post = (
        "  postBuild:\n"
        "    substitute: {ENV: prod, APP: webserver, UPPER: LOUD}\n"
        "    substituteFrom:\n"
        "      - {kind: ConfigMap, name: vars}\n"
    )
    variables = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: vars, namespace: {ns}}}\n"
    return {
        "clusters/prod/root.yaml": kustomization("root", ns, "./clusters/prod"),
        "clusters/prod/vars.yaml": variables + "data: {REGION: eu-west-1}\n",
        "clusters/prod/apps.yaml": kustomization("apps", ns, "./apps/prod", target(ns) + post),
        "apps/prod/configmaps.yaml": configmaps(),
        "apps/prod/claim.yaml": CLAIM,
    }


def applied_by_apps(kube: Cluster, ns: str) -> dict[tuple[str, str], dict[str, str]]:
    """(kind, name) -> data of what the controller applied for `apps` (its labels on them)."""
    core = k.core(kube.client)
    selector = f"{OWNER_NAME}=apps"
    out = {
        ("ConfigMap", c.metadata.name): dict(c.data or {})
        for c in core.list_namespaced_config_map(ns, label_selector=selector).items
    }
    for c in core.list_namespaced_persistent_volume_claim(ns, label_selector=selector).items:
        out[("PersistentVolumeClaim", c.metadata.name)] = {}
    return out


def read_for_apps(repo: GitRepo, rev: str, ns: str) -> dict[tuple[str, str], dict[str, str]]:
    """(kind, name) -> data of what prune-gate's Flux reader says Kustomization `apps` applies."""
    return {
        (str(o.body["kind"]), str(o.body["metadata"]["name"])): dict(o.body.get("data") or {})
        for o in render_flux(repo.root, rev, "clusters/prod")
        if o.root == f"flux:{ns}/apps"
    }


def reconcile_main(flux: Flux, ns: str, repo: GitRepo, root_yaml: str) -> None:
    """Serve the repository as the GitRepository's artifact, create the root Kustomization and
    wait until the controller has applied `root` and `apps` at that revision."""
    flux.git_repository(ns, SOURCE)
    revision = flux.serve(ns, SOURCE, "main", tree_files(repo))
    root = yaml.safe_load(root_yaml)
    flux.custom.create_namespaced_custom_object(
        KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, ns, KUSTOMIZATIONS, root
    )
    for name in ("root", "apps"):
        flux.wait(functools.partial(exists, flux, ns, name), timeout=120, what=f"{ns}/{name}")
        flux.wait_reconciled(ns, name, revision, ready=True)


def test_the_controller_applies_the_names_gate_check_reads(
    kube: Cluster, flux: Flux, flux_ns: str, tmp_path: Path
) -> None:
    ns = flux_ns
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(main_tree(ns), "main")

    # What prune-gate reads for apps at main.
    read = read_for_apps(repo, base, ns)
    names = {name for kind, name in read if kind == "ConfigMap"}
    assert names == EXPECTED | {"opted-out", "cases"}, names
    assert read[("ConfigMap", "cases")] == DATA_EXPECTED
    assert read[("ConfigMap", "opted-out")] == {"raw": "${APP}"}

    # What the real controller applies.
    reconcile_main(flux, ns, repo, main_tree(ns)["clusters/prod/root.yaml"] or "")
    assert applied_by_apps(kube, ns) == read

    # A candidate that drops the claim: gate check names the claim the controller made.
    head = repo.commit({"apps/prod/claim.yaml": None}, "drop the claim")
    done = run_gate(
        repo.root, "check", f"--base={base}", f"--head={head}", "--flux-root=clusters/prod",
        "--context=merged", "--format=json",
    )  # fmt: skip
    report = json.loads(done.stdout or "{}")
    assert done.returncode == 1, (report, done.stderr)
    claims = {
        f["object"]["name"]
        for f in report["findings"]
        if f["object"]["kind"] == ("PersistentVolumeClaim")
    }
    assert claims == {"web-data"} and ("PersistentVolumeClaim", "web-data") in read, report
