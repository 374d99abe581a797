"""`--argocd-root` on layouts found in public Argo CD repositories, each read as argo-cd
v3.2.11's repo-server reads it.

Built on the fixtures of `test_argocd_root` (an Application `db` deploying `workloads/db`, a
claim); real git repositories, the real CLI.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_argocd_root import (
    ROOT_APP,
    URL,
    check_auto,
    claim_finding,
    db_app,
    repo_with,
)
from tests.unit.test_build_server import needs_helper as needs_renderer

#: The root of an app of apps that manages itself through a kustomization whose `resources`
#: name directories, each with its own kustomization listing Applications
#: (Black-And-White-Club/all-infrastructure: argocd/root-app.yaml deploys argocd/, whose
#: kustomization lists platform/, apps/...).
NESTED_ROOT = ROOT_APP.replace("name: root,", "name: the-root,").replace(
    "path: apps}", "path: argocd}"
)


@needs_renderer
def test_auto_follows_a_kustomization_into_the_directories_it_names(tmp_path: Path) -> None:
    # argocd/apps/db.yaml is deployed by the root (argocd/kustomization.yaml -> apps/ ->
    # apps/kustomization.yaml -> db.yaml), so it is no entry point of its own: removing it
    # is the root's prune of Application db, whose finalizer deletes the claim
    base: dict[str, str | None] = {
        "argocd/root.yaml": None,
        "apps/db.yaml": None,
        "argocd/root-app.yaml": NESTED_ROOT,
        "argocd/kustomization.yaml": "resources: [apps/, projects]\n",
        "argocd/projects/kustomization.yaml": "resources: [../shared]\n",
        "argocd/shared/kustomization.yaml": "resources: [web/app.yaml]\n",
        "argocd/shared/web/app.yaml": db_app(path="workloads/web").replace("name: db", "name: web"),
        "argocd/apps/kustomization.yaml": "resources: [db.yaml]\n",
        "argocd/apps/db.yaml": db_app(),
    }
    repo = repo_with(
        tmp_path,
        {"argocd/apps/db.yaml": None, "argocd/apps/kustomization.yaml": "resources: []\n"},
        base,
    )
    rc, data, stderr = check_auto(repo, "--argocd-repo", URL)
    assert rc == 1, stderr
    notes = " ".join(data["notes"])
    assert "--argocd-root auto at " in notes, data["notes"]
    said = [n for n in data["notes"] if "--argocd-root auto at " in n]
    assert len(said) == 2, data["notes"]
    assert all(n.endswith(": argocd/root-app.yaml") for n in said), said
    found = claim_finding(data)
    assert found["code"] == "NOT_RETIRED"
    assert "Application argocd/db is removed" in found["evidence"][0], found["evidence"]
