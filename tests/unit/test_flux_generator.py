"""A Flux Kustomization's build fields, applied by Flux's own generator (issue 33).

kustomize-controller does not build `spec.path` as it is: fluxcd/pkg/kustomize's `Generator`
first writes the path's kustomization file, made from every manifest below it when there is
none, with the Kustomization's `targetNamespace`, `namePrefix`, `patches`, `components`,
`images`... merged into that same file. The helper runs that code (tools/kustomize/flux.go) and
serves the result in place of the file; these tests are the cases where applying the fields on
top of the build (what prune-gate emulated before) reads other objects than Flux applies.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gate.model.errors import RenderError
from gate.sources import render
from gate.sources.buildserver import BuildServer
from gate.sources.flux import render_flux
from tests.unit.helpers import GitRepo
from tests.unit.test_build_server import needs_helper
from tests.unit.test_cli import gate

ENTRY = "clusters/prod"


def flux_kustomization(name: str, path: str, spec: str = "") -> str:
    return f"""\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: {name}, namespace: flux-system}}
spec:
  interval: 1h
  path: {path}
  prune: true
  sourceRef: {{kind: GitRepository, name: flux-system}}
{spec}"""


SYNC = flux_kustomization("flux-system", "./clusters/prod")
CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"
#: The app's own kustomization renames what it builds.
WEB = "namePrefix: web-\nresources: [claim.yaml, configmap.yaml]\n"
#: A patch of the Flux Kustomization that deletes the claim, by the name its file gives it.
DELETE_CLAIM = """\
  patches:
    - target: {kind: PersistentVolumeClaim, name: data}
      patch: |
        $patch: delete
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata: {name: data}
"""


def repository(tmp_path: Path, apps_spec: str = "", extra: dict[str, str] | None = None) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {
        f"{ENTRY}/flux-system.yaml": SYNC,
        f"{ENTRY}/apps.yaml": flux_kustomization(
            "apps", "./apps/web", "  targetNamespace: web\n" + apps_spec
        ),
        "apps/web/kustomization.yaml": WEB,
        "apps/web/claim.yaml": CLAIM,
        "apps/web/configmap.yaml": CONFIGMAP,
        **(extra or {}),
    }
    repo.commit(files, "base")
    return repo


def applied(repo: GitRepo, root: str = "flux:flux-system/apps") -> dict[tuple[str, str], Any]:
    """(kind, namespace/name) -> object, of what Kustomization `root` applies at HEAD."""
    out = {}
    for o in render_flux(repo.root, "HEAD", ENTRY):
        meta = o.body["metadata"]
        if o.root == root:
            out[(o.body["kind"], f"{meta.get('namespace', '')}/{meta['name']}")] = o
    return out


@needs_helper
def test_the_kustomizations_patch_applies_before_the_paths_own_name_prefix(
    tmp_path: Path,
) -> None:
    """Flux merges `spec.patches` into the path's kustomization, where patches run before its
    `namePrefix`: the patch's `name: data` selects the claim, and deletes it; a candidate that
    prunes the claim this way is blocked, naming it as Flux does."""
    repo = repository(tmp_path)
    assert ("PersistentVolumeClaim", "web/web-data") in applied(repo)
    repo.commit(
        {f"{ENTRY}/apps.yaml": flux_kustomization("apps", "./apps/web", DELETE_CLAIM)},
        "drop the claim by a patch",
    )
    assert ("PersistentVolumeClaim", "web/web-data") not in applied(repo)
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--flux-root", ENTRY, "-o", "json",
        cwd=repo.root,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    claims = {
        f["object"]["name"]
        for f in report["findings"]
        if f["object"]["kind"] == "PersistentVolumeClaim"
    }
    assert claims == {"web-data"}, report["findings"]


@needs_helper
def test_the_kustomizations_components_are_built_inside_the_path(tmp_path: Path) -> None:
    """`spec.components` join the path's own kustomization: what a component adds gets the
    path's `namePrefix` (Flux names the component's claim `web-backup`). Applied on top of the
    build (before), it was read as `backup`, a claim the cluster does not have, so a candidate
    that drops the component was judged on the wrong object."""
    component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
    shared = {
        "apps/shared/kustomization.yaml": component + "resources: [claim.yaml]\n",
        "apps/shared/claim.yaml": CLAIM.replace("name: data", "name: backup"),
    }
    repo = repository(tmp_path, "  components: [../shared]\n", shared)
    keys = set(applied(repo))
    assert ("PersistentVolumeClaim", "web/web-backup") in keys
    assert ("PersistentVolumeClaim", "web/backup") not in keys
    without = flux_kustomization("apps", "./apps/web", "  targetNamespace: web\n")
    repo.commit({f"{ENTRY}/apps.yaml": without}, "no more backups")
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--flux-root", ENTRY, "-o", "json",
        cwd=repo.root,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    names = {f["object"]["name"] for f in json.loads(result.stdout)["findings"]}
    assert "web-backup" in names and "backup" not in names


@needs_helper
def test_a_missing_component_is_left_out_when_the_kustomization_says_so(tmp_path: Path) -> None:
    """`ignoreMissingComponents: true` (Flux v1.6+) builds without a component path that is not
    there; before, the path went into a wrapper and the build failed (exit 2)."""
    component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
    repo = repository(
        tmp_path,
        "  components: [../shared, ../gone]\n  ignoreMissingComponents: true\n",
        {
            "apps/shared/kustomization.yaml": component + "resources: [extra.yaml]\n",
            "apps/shared/extra.yaml": CONFIGMAP.replace("settings", "extra"),
        },
    )
    names = {name for _, name in applied(repo)}
    assert names == {"web/web-data", "web/web-settings", "web/web-extra"}


@needs_helper
def test_a_cluster_scoped_custom_kind_keeps_no_target_namespace(tmp_path: Path) -> None:
    """kustomize sets `targetNamespace` on every kind it does not know; a kind whose CRD (in the
    same revision) is cluster-scoped is applied without one, and named so."""
    crd = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: ClusterIssuer, plural: issuers}
  versions: [{name: v1, served: true, storage: true}]
"""
    issuer = "apiVersion: example.com/v1\nkind: ClusterIssuer\nmetadata: {name: letsencrypt}\n"
    repo = repository(
        tmp_path,
        extra={
            f"{ENTRY}/crd.yaml": crd,
            "apps/web/kustomization.yaml": WEB.replace("]", ", issuer.yaml]"),
            "apps/web/issuer.yaml": issuer,
        },
    )
    keys = set(applied(repo))
    assert ("ClusterIssuer", "/web-letsencrypt") in keys
    assert ("PersistentVolumeClaim", "web/web-data") in keys


@needs_helper
def test_building_a_path_writes_nothing_into_the_exported_tree(tmp_path: Path) -> None:
    """The generated kustomization is served, not written: a later build of a parent directory
    scans the tree as Flux's copy of the source has it (no kustomization file left in a child
    that has none, which would make it one resource instead of its files)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "apps/a/cm.yaml": CONFIGMAP,
            "apps/a/deep/cm.yaml": CONFIGMAP.replace("settings", "deep"),
        }
    )
    with render.ExportedTree(repo.root, "HEAD") as tree:
        child = {o.body["metadata"]["name"] for o in tree.build("apps/a", kustomization={})}
        assert child == {"settings", "deep"}
        assert not (tree.tree / "apps/a/kustomization.yaml").exists()
        parent = {o.body["metadata"]["name"] for o in tree.build("apps", kustomization={})}
        assert parent == {"settings", "deep"}


@needs_helper
def test_a_manifest_flux_cannot_decode_fails_the_generated_build_as_in_flux(
    tmp_path: Path,
) -> None:
    """Flux's generator decodes every manifest it lists, and fails the build on one it cannot;
    the error names the file as a repository path."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"apps/a/cm.yaml": CONFIGMAP, "apps/a/broken.yaml": "kind: [unclosed\n"})
    with render.ExportedTree(repo.root, "HEAD") as tree:
        try:
            tree.build("apps/a", kustomization={})
        except RenderError as exc:
            message = str(exc)
        else:
            raise AssertionError("the build of a path with an undecodable manifest passed")
    assert "failed to generate kustomization.yaml" in message
    assert "apps/a/broken.yaml" in message
    assert str(tmp_path) not in message.replace(str(repo.root), "")


def test_without_the_helper_a_path_flux_would_generate_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the helper runs Flux's generator: with a fallback renderer (`kustomize build` here,
    a stand-in that must never be run) a path without a kustomization file is exit 2 saying
    what to install, never a build of something else."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"apps/a/cm.yaml": CONFIGMAP})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "ran"
    fake = bin_dir / "kustomize"
    fake.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n", encoding="utf-8")
    fake.chmod(0o755)
    git = shutil.which("git")
    assert git is not None
    (bin_dir / "git").symlink_to(git)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv(render.HELPER_ENV, raising=False)
    with pytest.raises(RenderError) as info:
        render.render_kustomize(repo.root, "HEAD", "apps/a")
    message = str(info.value)
    assert "generates its kustomization file" in message
    assert "prune-gate-kustomize" in message and "build-binaries" in message
    assert not ran.exists()


@needs_helper
def test_the_paths_own_patch_reaches_what_the_kustomizations_components_add(
    tmp_path: Path,
) -> None:
    """The pattern of a public home-ops repository (an app's kustomization patches the
    SecurityPolicy its Flux Kustomization's `spec.components` adds): Flux builds it, since the
    components join the app's kustomization. Before, the components went on top of the build,
    the patch found no target, and every commit of that cluster was exit 2."""
    component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
    policy = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: policy}\ndata: {group: admins}\n"
    patch = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: policy}\ndata: {group: users}\n"
    repo = repository(
        tmp_path,
        "  components: [../shared]\n",
        {
            "apps/shared/kustomization.yaml": component + "resources: [policy.yaml]\n",
            "apps/shared/policy.yaml": policy,
            "apps/web/kustomization.yaml": WEB + "patches:\n  - path: policy.patch.yaml\n",
            "apps/web/policy.patch.yaml": patch,
        },
    )
    objects = applied(repo)
    assert objects[("ConfigMap", "web/web-policy")].body["data"] == {"group": "users"}


# --- attacks on the generator's confinement: a candidate's Kustomization and files -----------

SECRET = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: runner-secret}\ndata: {token: s3cr3t}\n"


@needs_helper
def test_a_component_outside_the_repository_is_refused(tmp_path: Path) -> None:
    """A candidate's `spec.components` climbing out of the tree (to a Component a runner
    happens to hold) is refused with the build, its content never read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [s.yaml]\n"
    )
    (outside / "s.yaml").write_text(SECRET)
    climb = "../" * 12 + str(outside).lstrip("/")
    repo = repository(tmp_path, f"  components: [{climb}]\n")
    with pytest.raises(RenderError) as info:
        applied(repo)
    assert "s3cr3t" not in str(info.value)


@needs_helper
def test_a_manifest_linked_outside_the_repository_is_never_read(tmp_path: Path) -> None:
    """A path with no kustomization file whose manifest is a symlink out of the tree: the
    export writes no link that leaves the tree, so Flux's generator lists only the path's own
    manifests, and the linked file's content is in nothing built."""
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET)
    repo = GitRepo(tmp_path / "repo")
    (repo.root / "apps" / "a").mkdir(parents=True)
    (repo.root / "apps" / "a" / "leak.yaml").symlink_to(secret)
    repo.commit({"apps/a/cm.yaml": CONFIGMAP})
    with render.ExportedTree(repo.root, "HEAD") as tree:
        built = tree.build("apps/a", kustomization={})
    assert [o.body["metadata"]["name"] for o in built] == ["settings"]
    assert "s3cr3t" not in json.dumps([o.body for o in built])


@needs_helper
def test_the_helpers_generator_refuses_a_link_out_of_its_root(tmp_path: Path) -> None:
    """The same link given to the helper directly (a tree that does hold it): Flux's confined
    file system refuses the walk, so the build fails and says nothing of the file."""
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET)
    root = tmp_path / "tree"
    (root / "app").mkdir(parents=True)
    (root / "app" / "cm.yaml").write_text(CONFIGMAP)
    (root / "app" / "leak.yaml").symlink_to(secret)
    helper = shutil.which(render.HELPER)
    assert helper is not None
    server = BuildServer(helper, timeout=120)
    generate = {"root": str(root), "dir": str(root / "app"), "kustomization": {}}
    try:
        done = server.build([root], root / "app", generate=generate)
    finally:
        server.close()
    assert done is not None and done.returncode == 1, done
    assert "s3cr3t" not in done.stdout + done.stderr
