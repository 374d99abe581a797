"""kustomize rendering at a revision: real git repositories, the real `kubectl kustomize`.

Which binary is found is faked with a PATH that holds only what a test wants: `git`, and either
`kubectl`, a `kustomize` shim (which logs its arguments and delegates to kubectl), or neither.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.model.errors import GitError, RenderError
from gate.model.objects import RawObject
from gate.sources import render
from tests.ci import needs_binaries
from tests.unit.helpers import GitRepo

KUBECTL = shutil.which("kubectl")
GIT = shutil.which("git")

# `make test` puts the pinned kubectl on PATH; in CI a missing kubectl is a failure, not a skip.
needs_kubectl = needs_binaries(
    KUBECTL is not None,
    reason="kubectl is not installed (run `make test`, which builds the pinned one)",
)

BASE_KUSTOMIZATION = """\
resources:
  - claim.yaml
  - deploy.yaml
"""

CLAIM = """\
# the claim the incident lost
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
"""

DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx
      volumes:
        - name: data
          persistentVolumeClaim:
            claimName: data
"""

OVERLAY = """\
namespace: prod
namePrefix: prod-
resources:
  - ../../base
configMapGenerator:
  - name: extra
    literals: [a=b]
patches:
  - target: {kind: Deployment, name: web}
    patch: |
      - op: add
        path: /spec/replicas
        value: 3
"""


@pytest.fixture
def history(tmp_path: Path) -> tuple[GitRepo, str, str]:
    """base: overlay builds the claim; candidate: the claim is dropped from base's resources."""
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "base/kustomization.yaml": BASE_KUSTOMIZATION,
            "base/claim.yaml": CLAIM,
            "base/deploy.yaml": DEPLOY,
            "overlays/prod/kustomization.yaml": OVERLAY,
        },
        "base",
    )
    head = repo.commit(
        {
            "base/kustomization.yaml": "resources:\n  - deploy.yaml\n",
            "base/claim.yaml": None,
        },
        "drop the claim",
    )
    return repo, base, head


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only `git`; tests add the renderer they want found."""
    assert GIT is not None
    path = tmp_path / "bin"
    path.mkdir()
    (path / "git").symlink_to(GIT)
    monkeypatch.setenv("PATH", str(path))
    return path


def unhashed(name: str) -> str:
    """A generated name without its content hash (kustomize's hash is not ours to pin)."""
    return re.sub(r"-[a-z0-9]{10}$", "-<hash>", name) if name.startswith("prod-extra") else name


def summary(objects: list[RawObject]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (
            o.body["kind"],
            o.body["metadata"].get("namespace", ""),
            unhashed(o.body["metadata"]["name"]),
            str(o.source),
        )
        for o in objects
    )


def bodies(objects: list[RawObject]) -> list[Any]:
    return sorted((o.body for o in objects), key=lambda b: (b["kind"], b["metadata"]["name"]))


@needs_kubectl
def test_render_an_overlay_at_two_revisions(history: tuple[GitRepo, str, str]) -> None:
    repo, base, head = history
    before = render.render_kustomize(repo.root, base, "overlays/prod")
    after = render.render_kustomize(repo.root, head, "overlays/prod")
    assert summary(before) == [
        ("ConfigMap", "prod", "prod-extra-<hash>", "overlays/prod/kustomization.yaml:6"),
        ("ConfigMap", "prod", "prod-settings", "base/claim.yaml:12"),
        ("Deployment", "prod", "prod-web", "base/deploy.yaml:1"),
        ("PersistentVolumeClaim", "prod", "prod-data", "base/claim.yaml:2"),
    ]
    assert [k for k, *_ in summary(after)] == ["ConfigMap", "Deployment"]
    deploy = next(o for o in before if o.body["kind"] == "Deployment")
    assert deploy.body["spec"]["replicas"] == 3  # the overlay's patch applied
    volume = deploy.body["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"]["claimName"] == "prod-data"  # name references followed


@needs_kubectl
def test_origin_annotations_are_removed_and_bodies_match_a_plain_build(
    history: tuple[GitRepo, str, str],
) -> None:
    repo, _, head = history
    objects = render.render_kustomize(repo.root, head, "overlays/prod")
    for o in objects:
        assert render.ORIGIN_ANNOTATION not in o.body["metadata"].get("annotations", {})
    assert KUBECTL is not None
    plain = subprocess.run(
        [KUBECTL, "kustomize", str(repo.root / "overlays" / "prod")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert bodies(objects) == bodies([RawObject(b, objects[0].source) for b in _docs(plain)])


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


@needs_kubectl
def test_render_leaves_the_work_tree_alone(history: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = history
    render.render_kustomize(repo.root, base, "overlays/prod")
    assert repo.git("status", "--porcelain", "--ignored") == ""
    assert not (repo.root / "base" / "claim.yaml").exists()  # head's work tree stays head's


@needs_kubectl
def test_render_several_paths_at_one_revision(history: tuple[GitRepo, str, str]) -> None:
    repo, base, _ = history
    objects = render.render_kustomize_paths(repo.root, base, ["base", "overlays/prod/"])
    names = sorted(unhashed(o.body["metadata"]["name"]) for o in objects)
    assert names == [
        "data",
        "prod-data",
        "prod-extra-<hash>",
        "prod-settings",
        "prod-web",
        "settings",
        "web",
    ]


@needs_kubectl
def test_a_component_falls_back_to_a_plain_build(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {
            "comp/kustomization.yaml": (
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
                "resources: [cm.yaml]\nnamePrefix: x-\n"
            ),
            "comp/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        }
    )
    objects = render.render_kustomize(repo.root, sha, "comp")
    assert summary(objects) == [("ConfigMap", "", "x-c", f"comp (kustomize build at {sha[:12]}):1")]


@needs_kubectl
def test_kubectl_is_used_when_kustomize_is_missing(
    history: tuple[GitRepo, str, str], bin_dir: Path
) -> None:
    assert KUBECTL is not None
    (bin_dir / "kubectl").symlink_to(KUBECTL)
    assert render.find_kustomize() == [str(bin_dir / "kubectl"), "kustomize"]
    repo, base, _ = history
    assert len(render.render_kustomize(repo.root, base, "overlays/prod")) == 4


@needs_kubectl
def test_kustomize_is_preferred_when_installed(
    history: tuple[GitRepo, str, str], bin_dir: Path, tmp_path: Path
) -> None:
    assert KUBECTL is not None
    (bin_dir / "kubectl").symlink_to(KUBECTL)
    log = tmp_path / "kustomize.log"
    shim = bin_dir / "kustomize"
    shim.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        '[ "$1" = build ] || exit 64\n'
        "shift\n"
        f'exec "{KUBECTL}" kustomize "$@"\n',
        encoding="utf-8",
    )
    shim.chmod(0o755)
    assert render.find_kustomize() == [str(shim), "build"]
    repo, base, _ = history
    objects = render.render_kustomize(repo.root, base, "overlays/prod")
    assert len(objects) == 4
    calls = log.read_text(encoding="utf-8").splitlines()
    assert len(calls) == 1
    assert calls[0].startswith("build --load-restrictor=LoadRestrictionsRootOnly ")


def test_no_renderer_installed_says_how_to_install(
    history: tuple[GitRepo, str, str], bin_dir: Path
) -> None:
    repo, base, _ = history
    with pytest.raises(RenderError) as info:
        render.render_kustomize(repo.root, base, "overlays/prod")
    message = str(info.value)
    assert "none of `prune-gate-kustomize`, `kustomize` or `kubectl` is on PATH" in message
    assert "scripts/build-binaries path prune-gate-kustomize" in message
    assert "install kustomize" in message


def test_find_kustomize_with_an_explicit_search_path(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RenderError):
        render.find_kustomize(str(empty))
    tool = tmp_path / "tools" / "kubectl"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n", encoding="utf-8")
    tool.chmod(0o755)
    assert render.find_kustomize(f"{empty}:{tool.parent}") == [str(tool), "kustomize"]


@needs_kubectl
def test_a_failed_build_carries_kustomizes_message(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit({"app/kustomization.yaml": "resources:\n  - missing.yaml\n"})
    with pytest.raises(RenderError) as info:
        render.render_kustomize(repo.root, sha, "app")
    message = str(info.value)
    assert re.match(
        rf"app \(kustomize build at {sha[:12]}\): "
        r"`(prune-gate-kustomize|kubectl kustomize)` failed",
        message,
    )
    assert "app/missing.yaml: no such file or directory" in message
    assert re.search(r"prune-gate-(?!kustomize)", message) is None  # nor the temporary directory
    assert "run.go" not in message  # nor is kubectl's log header


@needs_kubectl
def test_a_directory_without_a_kustomization_builds_as_flux_generates_it(
    history: tuple[GitRepo, str, str],
) -> None:
    """Flux builds a path with no kustomization from every YAML file below it, and a directory
    with its own kustomization as one resource (built, not read file by file)."""
    repo, _, _ = history
    sha = repo.commit(
        {
            "plain/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
            "plain/deep/more/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n",
            "plain/app/kustomization.yaml": "namePrefix: app-\nresources: [cm.yaml]\n",
            "plain/app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: e}\n",
            "plain/app/unlisted.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: u}\n",
        }
    )
    objects = render.render_kustomize(repo.root, sha, "plain")
    names = sorted(o.body["metadata"]["name"] for o in objects)
    assert names == ["app-e", "c", "d"]  # app/ built by its kustomization: unlisted is not in it
    where = {o.body["metadata"]["name"]: str(o.source) for o in objects}
    assert where["d"] == "plain/deep/more/cm.yaml:1"
    assert where["app-e"] == "plain/app/cm.yaml:1"


def test_a_path_missing_at_the_revision_is_a_git_error(history: tuple[GitRepo, str, str]) -> None:
    repo, base, head = history
    with pytest.raises(GitError, match=rf"overlays/staging does not exist at revision {base}"):
        render.render_kustomize(repo.root, base, "overlays/staging")
    with pytest.raises(GitError, match=r"base/deploy\.yaml is not a directory"):
        render.render_kustomize(repo.root, head, "base/deploy.yaml")
    with pytest.raises(GitError, match="outside the repository"):
        render.render_kustomize(repo.root, head, "../x")


FLUX_LAYOUT: dict[str, str | None] = {
    "apps/web/pvc.yaml": CLAIM,
    "clusters/prod/kustomization.yaml": (
        "resources:\n  - ../../apps/web/pvc.yaml\nnamespace: prod\n"
    ),
}


@needs_kubectl
def test_a_kustomization_may_name_files_outside_its_directory(tmp_path: Path) -> None:
    """Flux builds with LoadRestrictionsNone; kustomize's default would refuse the file."""
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(FLUX_LAYOUT)
    expected = [
        ("ConfigMap", "prod", "settings", "apps/web/pvc.yaml:12"),
        ("PersistentVolumeClaim", "prod", "data", "apps/web/pvc.yaml:2"),
    ]
    assert summary(render.render_kustomize(repo.root, sha, "clusters/prod")) == expected


@needs_kubectl
def test_the_plain_build_lifts_the_load_restriction_too(tmp_path: Path) -> None:
    """A Component cannot be wrapped: its plain build names an outside file all the same."""
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {
            "apps/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
            "comp/kustomization.yaml": (
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
                "resources: [../apps/cm.yaml]\n"
            ),
        }
    )
    objects = render.render_kustomize(repo.root, sha, "comp")
    assert summary(objects) == [("ConfigMap", "", "c", f"comp (kustomize build at {sha[:12]}):1")]
