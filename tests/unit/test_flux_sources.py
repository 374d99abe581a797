"""`--flux-source`, `--flux-ignore-source`, `--flux-root auto` and per-side entry points.

Real git repositories shaped like public Flux repositories, the real CLI: an OCI layout
(`flux push artifact --path k8s`, Kustomizations reading `OCIRepository/flux-system` with
spec.path relative to `k8s`), a `flux bootstrap` layout (gotk-sync.yaml), a flux-operator
layout (FluxInstance) and a ksail layout (ksail.yaml's source directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.model.errors import InputError
from gate.sources.flux import FluxSource, find_roots, parse_source
from tests.unit.helpers import GitRepo
from tests.unit.test_cli import gate
from tests.unit.test_kustomize_trees import needs_renderer

OCI_SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 1m, url: "oci://ghcr.io/example/manifests", ref: {tag: latest}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux-system, namespace: flux-system}
spec:
  interval: 10m
  path: ./clusters/prod
  prune: true
  sourceRef: {kind: OCIRepository, name: flux-system}
"""
GIT_SYNC = """\
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
  prune: true
  targetNamespace: shop
  sourceRef: {{kind: {kind}, name: {name}}}
"""
CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: web-data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""
IGNORE = "OCIRepository/flux-system/infra"
#: What stays beside the claim (Flux fails on a spec.path that does not exist).
KEEP = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: web-settings}
data: {mode: prod}
"""


def apps(path: str = "./apps/prod", kind: str = "OCIRepository", name: str = "flux-system") -> str:
    return APPS.format(path=path, kind=kind, name=name)


def check(repo: GitRepo, *extra: str, fmt: str = "json") -> tuple[int, str, str]:
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "-o", fmt, *extra, cwd=repo.root
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def codes(stdout: str) -> list[str]:
    data: dict[str, Any] = json.loads(stdout)
    return [f["code"] for f in data["findings"]]


def oci_repo(tmp_path: Path) -> GitRepo:
    """The repository pushes `k8s` as the OCI artifact its Flux reads; the claim is removed."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "k8s/clusters/prod/flux-system/gotk-sync.yaml": OCI_SYNC,
            "k8s/clusters/prod/apps.yaml": apps(),
            "k8s/apps/prod/claim.yaml": CLAIM,
            "k8s/apps/prod/settings.yaml": KEEP,
            "README.md": "flux push artifact --path k8s",
        },
        "base",
    )
    repo.commit({"k8s/apps/prod/claim.yaml": None}, "drop the claim")
    return repo


@needs_renderer
def test_an_oci_source_with_an_artifact_directory_is_followed(tmp_path: Path) -> None:
    """Before: the apps Kustomization read an OCIRepository and was skipped: ALLOW."""
    repo = oci_repo(tmp_path)
    # The entry's own Kustomization applies ./clusters/prod from the artifact, and the entry
    # is k8s/clusters/prod: the artifact is k8s.
    rc, out, err = check(repo, "--flux-root", "k8s/clusters/prod")
    assert rc == 1, (out, err)
    assert codes(out) == ["NOT_RETIRED"]
    assumed = "OCIRepository/flux-system/flux-system read as directory k8s of this repository"
    assert any(assumed in n for n in json.loads(out)["notes"])
    told = ("--flux-source", "OCIRepository/flux-system/flux-system=k8s")
    rc, out, err = check(repo, "--flux-root", "k8s/clusters/prod", *told)
    assert rc == 1, (out, err)
    assert codes(out) == ["NOT_RETIRED"] and assumed not in out
    # Told the wrong directory (the root): spec.path ./clusters/prod is read inside it, and
    # does not exist there.
    wrong = ("--flux-source", "OCIRepository/flux-system/flux-system")
    rc, _, err = check(repo, "--flux-root", "k8s/clusters/prod", *wrong)
    assert rc == 2 and "names spec.path clusters/prod, which does not exist" in err


@needs_renderer
def test_a_bucket_source_is_a_directory_too(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": GIT_SYNC,
            "clusters/prod/apps.yaml": apps(kind="Bucket", name="manifests"),
            "bucket/apps/prod/claim.yaml": CLAIM,
            "bucket/apps/prod/settings.yaml": KEEP,
        },
        "base",
    )
    repo.commit({"bucket/apps/prod/claim.yaml": None}, "drop the claim")
    told = ("--flux-source", "flux-system/flux-system", "--flux-source")
    rc, out, err = check(
        repo, "--flux-root", "clusters/prod", *told, "Bucket/flux-system/manifests=bucket"
    )
    assert rc == 1, (out, err)
    assert codes(out) == ["NOT_RETIRED"]


@needs_renderer
def test_a_source_not_followed_is_exit_2_with_the_option_that_follows_it(tmp_path: Path) -> None:
    """Before: the Kustomization reading another source was skipped, and the claim's removal
    under it passed: ALLOW."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": GIT_SYNC,
            "clusters/prod/apps.yaml": apps(kind="OCIRepository", name="manifests"),
            "k8s/apps/prod/claim.yaml": CLAIM,
            "k8s/apps/prod/settings.yaml": KEEP,
        },
        "base",
    )
    repo.commit({"k8s/apps/prod/claim.yaml": None}, "drop the claim")
    rc, out, err = check(repo, "--flux-root", "clusters/prod")
    assert rc == 2 and not out, err
    assert "clusters/prod/apps.yaml:1" in err
    assert "Kustomization flux-system/apps reads OCIRepository/flux-system/manifests" in err
    assert "--flux-source OCIRepository/flux-system/manifests=DIR" in err
    assert "--flux-ignore-source OCIRepository/flux-system/manifests" in err
    # Followed as the hint says, the removal is found.
    told = ("--flux-source", "flux-system/flux-system", "--flux-source")
    rc, out, err = check(
        repo, "--flux-root", "clusters/prod", *told, "OCIRepository/flux-system/manifests=k8s"
    )
    assert rc == 1 and codes(out) == ["NOT_RETIRED"], err


@needs_renderer
@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "github", "sarif"])
def test_an_ignored_source_is_said_in_every_format(tmp_path: Path, fmt: str) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": GIT_SYNC,
            "clusters/prod/apps.yaml": apps(kind="GitRepository", name="flux-system"),
            "clusters/prod/infra.yaml": apps(kind="OCIRepository", name="infra").replace(
                "name: apps", "name: infra"
            ),
            "apps/prod/claim.yaml": CLAIM,
            "apps/prod/settings.yaml": KEEP,
        },
        "base",
    )
    repo.commit({"README.md": "docs"}, "docs only")
    rc, out, err = check(repo, "--flux-root", "clusters/prod", fmt=fmt)
    assert rc == 2 and "Kustomization flux-system/infra reads OCIRepository" in err
    rc, out, err = check(
        repo, "--flux-root", "clusters/prod", "--flux-ignore-source", IGNORE, fmt=fmt
    )
    assert rc == 0, (out, err)
    said = "Kustomization flux-system/infra (clusters/prod/infra.yaml:1) skipped"
    assert said in out and f"its source {IGNORE} is out of scope" in out, out
    if fmt == "json":
        data = json.loads(out)
        for side in ("base", "head"):  # each revision's own note (it names its sha)
            assert any(n.startswith(f"{side}: {said}") for n in data["notes"]), data["notes"]


def test_source_options_are_parsed_or_refused() -> None:
    assert parse_source("flux-system/repo") == FluxSource("GitRepository", "flux-system", "repo")
    assert parse_source("ocirepository/fs/x=./k8s/") == FluxSource(
        "OCIRepository", "fs", "x", "k8s"
    )
    assert parse_source("Bucket/fs/b").dir == "."
    for bad in ("flux-system", "HelmRepository/fs/x", "a/b/c/d", "OCIRepository/fs/x=../up"):
        with pytest.raises(InputError):
            parse_source(bad)
    with pytest.raises(InputError, match="--flux-ignore-source"):
        parse_source("fs/x=k8s", "--flux-ignore-source", with_dir=False)


FLUX_INSTANCE = """\
apiVersion: fluxcd.controlplane.io/v1
kind: FluxInstance
metadata: {name: flux, namespace: flux-system}
spec:
  distribution: {version: "2.x", registry: ghcr.io/fluxcd}
  sync:
    kind: GitRepository
    url: https://example.com/repo
    ref: refs/heads/main
    path: clusters/prod
"""
KSAIL = """\
apiVersion: ksail.io/v1alpha1
kind: Cluster
spec:
  workload:
    sourceDirectory: {directory}
"""

#: Each layout: its files, the claim the candidate drops, the root, where it is declared.
LAYOUTS: dict[str, tuple[dict[str, str], str, str, str]] = {
    "gotk-sync.yaml": (
        {
            "clusters/prod/flux-system/gotk-sync.yaml": GIT_SYNC,
            "clusters/prod/apps.yaml": apps(kind="GitRepository"),
        },
        "apps/prod/claim.yaml",
        "clusters/prod",
        "Kustomization spec.path in clusters/prod/flux-system/gotk-sync.yaml",
    ),
    "FluxInstance": (
        {
            "flux/instance.yaml": FLUX_INSTANCE,
            "clusters/prod/apps.yaml": apps(kind="GitRepository"),
        },
        "apps/prod/claim.yaml",
        "clusters/prod",
        "FluxInstance spec.sync.path in flux/instance.yaml",
    ),
    # ksail pushes its source directory as the OCI artifact its Flux reads: the entry's own
    # Kustomization applies the artifact's root, so the artifact is the entry (k8s).
    "ksail.yaml": (
        {
            "ksail.yaml": KSAIL.format(directory="k8s"),
            "k8s/flux-system.yaml": OCI_SYNC.replace("./clusters/prod", "./"),
            "k8s/apps.yaml": apps(),
        },
        "k8s/apps/prod/claim.yaml",
        "k8s",
        "ksail source directory in ksail.yaml",
    ),
}


@needs_renderer
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_auto_finds_the_declared_entry_point(tmp_path: Path, layout: str) -> None:
    """Before: `auto` was a directory name that does not exist (exit 2)."""
    files, claim, root, where = LAYOUTS[layout]
    repo = GitRepo(tmp_path / "repo")
    repo.commit({**files, claim: CLAIM, claim.replace("claim", "settings"): KEEP}, "base")
    repo.commit({claim: None}, "drop the claim")
    assert find_roots(repo.root) == [(root, where)]
    rc, out, err = check(repo, "--flux-root", "auto", fmt="text")
    assert rc == 1, (out, err)
    assert "NOT_RETIRED" in out
    assert "--flux-root auto at " in out and f": {root} ({where})" in out


@needs_renderer
def test_auto_with_several_entry_points_lists_them(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    staging = GIT_SYNC.replace("./clusters/prod", "./clusters/staging")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": GIT_SYNC,
            "clusters/staging/flux-system/gotk-sync.yaml": staging,
        },
        "base",
    )
    repo.commit({"README.md": "docs"}, "docs")
    rc, _, err = check(repo, "--flux-root", "auto")
    assert rc == 2
    assert "2 entry points declared" in err
    assert (
        "clusters/prod (Kustomization spec.path in clusters/prod/flux-system/gotk-sync.yaml)" in err
    )
    assert "clusters/staging (" in err and "--flux-root DIR" in err


@needs_renderer
def test_per_side_entry_points_follow_a_repository_that_moves_its_own(tmp_path: Path) -> None:
    """The candidate moves its entry point (clusters/prod -> clusters/production) and, in the
    same commit, drops the claim. Before: one --flux-root for both sides could not say it."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": GIT_SYNC,
            "clusters/prod/apps.yaml": apps(kind="GitRepository"),
            "apps/prod/claim.yaml": CLAIM,
            "apps/prod/settings.yaml": KEEP,
        },
        "base",
    )
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": None,
            "clusters/prod/apps.yaml": None,
            "clusters/production/flux-system/gotk-sync.yaml": GIT_SYNC.replace(
                "./clusters/prod", "./clusters/production"
            ),
            "clusters/production/apps.yaml": apps(kind="GitRepository"),
            "apps/prod/claim.yaml": None,
        },
        "move the entry point",
    )
    rc, _, err = check(repo, "--flux-root", "clusters/prod")
    assert rc == 2 and "--flux-root clusters/prod does not exist" in err
    sides = ("--base-flux-root", "clusters/prod", "--head-flux-root", "clusters/production")
    rc, out, err = check(repo, *sides)
    assert rc == 1, (out, err)
    assert codes(out) == ["NOT_RETIRED"]
    rc, out, err = check(repo, "--flux-root", "auto")
    assert rc == 1 and codes(out) == ["NOT_RETIRED"], err
    rc, _, err = check(repo, "--base-flux-root", "clusters/prod")
    assert rc == 2 and "--base-flux-root and --head-flux-root go together" in err


@needs_renderer
def test_history_reads_the_same_sources_and_entry_points(tmp_path: Path) -> None:
    """`gate history` reads Flux roots as `gate check` does: the OCI layout's claim removal is
    a block (before: allow), `auto` and an ignored source are said in the row's notes."""
    repo = oci_repo(tmp_path)
    repo.write({"ksail.yaml": KSAIL.format(directory="k8s/clusters/prod")})
    repo.commit(
        {"k8s/clusters/prod/infra.yaml": apps(name="infra").replace("name: apps", "name: infra")},
        "an infra Kustomization from another artifact",
    )
    result = gate(
        "history", "--range", "HEAD~2..HEAD", "--flux-root", "auto", "-o", "json",
        "--flux-ignore-source", IGNORE, cwd=repo.root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["commits"]
    assert [r["verdict"] for r in rows] == ["block", "allow"], rows
    assert rows[0]["codes"] == ["NOT_RETIRED"]
    assert any(
        "--flux-root auto at" in n and ": k8s/clusters/prod (" in n for n in rows[0]["notes"]
    )
    assert any("Kustomization flux-system/infra" in n and "skipped" in n for n in rows[1]["notes"])
    unfollowed = gate(
        "history", "--range", "HEAD~1..HEAD", "--flux-root", "auto", "-o", "json", cwd=repo.root
    )
    assert unfollowed.returncode == 0, unfollowed.stderr
    (row,) = json.loads(unfollowed.stdout)["commits"]
    assert row["verdict"] == "error" and "--flux-ignore-source " + IGNORE in row["error"]


@needs_renderer
def test_doctor_and_retire_read_sources_and_auto_as_check_does(tmp_path: Path) -> None:
    """`gate doctor --rev` and `gate retire status --base` take the same options: the OCI
    layout's claim is found through `auto` and the artifact directory (before: `auto` was a
    missing directory, and the OCIRepository's Kustomization was skipped)."""
    from gate.cli.doctor import declared_lookup
    from gate.model.refs import ObjectRef

    repo = oci_repo(tmp_path)
    flux = (("auto",), ("OCIRepository/flux-system/flux-system=k8s",), ())
    declared = declared_lookup(None, "HEAD~1", str(repo.root), (), None, flux=flux)
    claim = ObjectRef("", "PersistentVolumeClaim", "shop", "web-data")
    assert declared(claim) == "k8s/apps/prod/claim.yaml:1"
    bad = gate(
        "retire", "status", "--base", "HEAD", "--flux-root", "auto",
        "--flux-ignore-source", "flux-system/x=k8s", cwd=repo.root,
    )  # fmt: skip
    assert bad.returncode == 2 and "--flux-ignore-source 'flux-system/x=k8s'" in bad.stderr


@needs_renderer
def test_auto_names_where_it_found_a_root_that_is_not_there(tmp_path: Path) -> None:
    """A FluxInstance syncing an OCIRepository names a path inside the artifact: not a
    directory of the repository, so exit 2 says where the root came from and what to give."""
    repo = oci_repo(tmp_path)
    instance = FLUX_INSTANCE.replace("kind: GitRepository", "kind: OCIRepository")
    repo.commit({"k8s/clusters/prod/flux-system/gotk-sync.yaml": None, "flux.yaml": instance})
    rc, _, err = check(repo, "--flux-root", "auto")
    assert rc == 2 and "--flux-root clusters/prod does not exist" in err
    assert "FluxInstance spec.sync.path in flux.yaml" in err and "needs --flux-root DIR" in err


@needs_renderer
def test_auto_follows_the_source_a_flux_instance_generates(tmp_path: Path) -> None:
    """flux-operator names the GitRepository it generates after the FluxInstance's namespace:
    with `auto`, Kustomizations reading that one are this repository (no --flux-source)."""
    repo = GitRepo(tmp_path / "repo")
    instance = FLUX_INSTANCE.replace("namespace: flux-system", "namespace: flux-cd")
    ks = apps(kind="GitRepository", name="flux-cd").replace(
        "namespace: flux-system", "namespace: flux-cd"
    )
    repo.commit(
        {
            "flux/instance.yaml": instance,
            "clusters/prod/apps.yaml": ks,
            "apps/prod/claim.yaml": CLAIM,
            "apps/prod/settings.yaml": KEEP,
        },
        "base",
    )
    repo.commit({"apps/prod/claim.yaml": None}, "drop the claim")
    rc, out, err = check(repo, "--flux-root", "auto")
    assert rc == 1 and codes(out) == ["NOT_RETIRED"], err
    rc, _, err = check(repo, "--flux-root", "clusters/prod")
    assert rc == 2 and "--flux-source GitRepository/flux-cd/flux-cd=DIR" in err


#: Flux's own install manifests, applied from the upstream OCI artifact at its root (`./`), as
#: many home-ops repositories do beside their own GitRepository (flux-manifests).
UPSTREAM_FLUX = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: flux-manifests, namespace: flux-system}
spec: {interval: 10m, url: "oci://ghcr.io/fluxcd/flux-manifests", ref: {tag: v2.7.3}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux, namespace: flux-system}
spec:
  interval: 10m
  path: ./
  prune: true
  sourceRef: {kind: OCIRepository, name: flux-manifests}
"""
OWN_SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: home-ops, namespace: flux-system}
spec: {interval: 30m, url: "https://example.com/home-ops", ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: cluster, namespace: flux-system}
spec:
  interval: 30m
  path: ./kubernetes/flux
  prune: true
  sourceRef: {kind: GitRepository, name: home-ops}
"""


@needs_renderer
def test_the_upstream_flux_manifests_at_an_artifacts_root_are_not_this_repository(
    tmp_path: Path,
) -> None:
    """The entry's own Kustomization (spec.path the entry, from a GitRepository) names the
    source that is this repository, though another Kustomization beside it applies `./` of
    an OCIRepository: that one is Flux's upstream install artifact, not this repository's
    directory (before: taken for it, and every Kustomization of the repository refused)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            # listed before the entry's own: the order of the files must not decide
            "kubernetes/flux/config/a-flux.yaml": UPSTREAM_FLUX,
            "kubernetes/flux/config/cluster.yaml": OWN_SYNC,
            "kubernetes/flux/apps.yaml": apps(
                path="./kubernetes/apps", kind="GitRepository", name="home-ops"
            ),
            "kubernetes/apps/claim.yaml": CLAIM,
            "kubernetes/apps/settings.yaml": KEEP,
        },
        "base",
    )
    repo.commit({"kubernetes/apps/claim.yaml": None}, "drop the claim")
    rc, out, err = check(repo, "--flux-root", "kubernetes/flux")
    assert rc == 2, (out, err)
    assert "reads OCIRepository/flux-system/flux-manifests" in err, err
    assert "followed: GitRepository/flux-system/home-ops=." in err, err
    ignored = ("--flux-ignore-source", "OCIRepository/flux-system/flux-manifests")
    rc, out, err = check(repo, "--flux-root", "kubernetes/flux", *ignored)
    assert rc == 1, (out, err)
    assert codes(out) == ["NOT_RETIRED"]
