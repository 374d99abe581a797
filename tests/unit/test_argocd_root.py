"""`--argocd-root`: the Applications and ApplicationSets a repository declares decide what each
revision deploys, and Argo CD's switches decide what leaves the cluster.

Real git repositories, the real CLI (and the real helm for Helm sources). The entry point
`argocd/` holds a root Application that deploys `apps/` (an app of apps); `apps/db.yaml` is the
Application `db`, which deploys `workloads/db` (a claim). Each test changes an Application or an
ApplicationSet, never the claim's file: that is how a claim gets past a gate that reads
directories.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.ci import pinned_binary
from tests.unit.helpers import GitRepo
from tests.unit.test_build_server import needs_helper as needs_renderer
from tests.unit.test_cli import gate

URL = "https://git.example.com/org/gitops.git"
ROOT_APP = f"""\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: root, namespace: argocd}}
spec:
  project: default
  source: {{repoURL: {URL}, targetRevision: HEAD, path: apps}}
  destination: {{server: https://kubernetes.default.svc, namespace: argocd}}
  syncPolicy: {{automated: {{prune: true}}}}
"""
DB_APP = """\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: db
  namespace: argocd
{finalizers}spec:
  project: default
  source: {{repoURL: {url}, targetRevision: {revision}, path: {path}}}
  destination: {{server: https://kubernetes.default.svc, namespace: shop}}
  syncPolicy:
{sync}
"""
FINALIZER = "  finalizers: [resources-finalizer.argocd.argoproj.io]\n"
AUTOMATED = "    automated: {prune: true}"
CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: db-data
{annotations}spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"""


def db_app(
    *,
    finalizer: bool = True,
    path: str = "workloads/db",
    sync: str = AUTOMATED,
    url: str = URL,
    revision: str = "HEAD",
) -> str:
    return DB_APP.format(
        finalizers=FINALIZER if finalizer else "", path=path, sync=sync, url=url, revision=revision
    )


def claim(options: str = "") -> str:
    note = f"  annotations: {{argocd.argoproj.io/sync-options: '{options}'}}\n" if options else ""
    return CLAIM.format(annotations=note)


def repo_with(
    tmp_path: Path,
    head: Mapping[str, str | None],
    base: Mapping[str, str | None] | None = None,
) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {
        "argocd/root.yaml": ROOT_APP,
        "apps/db.yaml": db_app(),
        "workloads/db/claim.yaml": claim(),
        "workloads/web/README.md": "nothing here yet",
        "apps/README.md": "the Applications the root deploys",
    }
    files.update(base or {})
    repo.commit({k: v for k, v in files.items() if v is not None}, "base")
    repo.commit(dict(head), "candidate")
    return repo


def check(
    repo: GitRepo, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], str]:
    result = gate(
        "check",
        "--base",
        "HEAD~1",
        "--head",
        "HEAD",
        "--argocd-root",
        "argocd",
        "--argocd-repo",
        URL,
        "-o",
        "json",
        *extra,
        cwd=repo.root,
        env_extra=env,
    )
    return result.returncode, json.loads(result.stdout) if result.stdout else {}, result.stderr


def check_auto(repo: GitRepo, *extra: str) -> tuple[int, dict[str, Any], str]:
    """`gate check --argocd-root auto`: the repository is the origin's unless `extra` names it."""
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--argocd-root", "auto", "-o", "json",
        *extra, cwd=repo.root,
    )  # fmt: skip
    return result.returncode, json.loads(result.stdout) if result.stdout else {}, result.stderr


def codes(data: dict[str, Any]) -> list[str]:
    return sorted(f["code"] for f in data["findings"])


def claim_finding(data: dict[str, Any]) -> dict[str, Any]:
    (found,) = [f for f in data["findings"] if f["object"]["kind"] == "PersistentVolumeClaim"]
    assert isinstance(found, dict)
    return found


DELETING: dict[str, tuple[dict[str, str | None], str]] = {
    "the Application is removed with the resources finalizer": (
        {"apps/db.yaml": None},
        "Application argocd/db is removed with the resources-finalizer.argocd.argoproj.io "
        "finalizer: Argo CD deletes what it deployed",
    ),
    "its path moves and it prunes automatically": (
        {"apps/db.yaml": db_app(path="workloads/web")},
        "Application argocd/db no longer deploys it, and prunes automatically",
    ),
    "Prune=false does not keep it from its Application's deletion": (
        {"apps/db.yaml": None, "workloads/db/claim.yaml": claim("Prune=false")},
        "Argo CD deletes what it deployed",
    ),
}


@needs_renderer
@pytest.mark.parametrize("how", sorted(DELETING))
def test_a_claim_deleted_through_its_application_is_found(tmp_path: Path, how: str) -> None:
    change, cause = DELETING[how]
    base: dict[str, str | None] | None = (
        {"workloads/db/claim.yaml": claim("Prune=false")} if "Prune=false" in how else None
    )
    repo = repo_with(tmp_path, change, base)
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    found = claim_finding(data)
    assert found["code"] == "NOT_RETIRED" and found["severity"] == "block"
    assert found["object"]["namespace"] == "shop", "the destination namespace is the claim's"
    assert found["evidence"][0].startswith("cause: ") and cause in found["evidence"][0], found
    # Read as directories, the same change shows no claim at all: the Application is all it sees.
    plain = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--path", "apps", "-o", "json",
        cwd=repo.root,
    )  # fmt: skip
    assert "PersistentVolumeClaim" not in plain.stdout


LEAVING: dict[str, tuple[dict[str, str | None], dict[str, str | None], str]] = {
    "no resources finalizer": (
        {"apps/db.yaml": db_app(finalizer=False)},
        {"apps/db.yaml": None},
        "is removed without the resources finalizer: Argo CD leaves what it deployed",
    ),
    "Delete=false": (
        {"workloads/db/claim.yaml": claim("Delete=false")},
        {"apps/db.yaml": None},
        "it has Delete=false",
    ),
    "Delete=confirm": (
        {"workloads/db/claim.yaml": claim("Delete=confirm")},
        {"apps/db.yaml": None},
        "waits for a person to approve",
    ),
    "Delete=false as the Application's default": (
        {"apps/db.yaml": db_app(sync=AUTOMATED + "\n    syncOptions: [Delete=false]")},
        {"apps/db.yaml": None},
        "it has Delete=false",
    ),
    "Prune=confirm": (
        {"workloads/db/claim.yaml": claim("Prune=confirm")},
        {"apps/db.yaml": db_app(path="workloads/web")},
        "it has Prune=confirm",
    ),
    "Prune=false": (
        {"workloads/db/claim.yaml": claim("Prune=false")},
        {"apps/db.yaml": db_app(path="workloads/web")},
        "Prune=false",
    ),
}


@needs_renderer
@pytest.mark.parametrize("how", sorted(LEAVING))
def test_argo_cd_leaves_the_claim(tmp_path: Path, how: str) -> None:
    base, head, said = LEAVING[how]
    repo = repo_with(tmp_path, head, base)
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)
    found = claim_finding(data)
    assert found["code"] == "ORPHANED_BY_KEEP" and found["severity"] == "warn"
    assert said in found["message"], found["message"]


#: An Application that does not prune by itself: its next sync with prune deletes the claim.
NOT_AUTOMATED: dict[str, tuple[dict[str, str | None], dict[str, str | None]]] = {
    "no automated prune": (
        {"apps/db.yaml": db_app(sync="    automated: {prune: false}")},
        {"apps/db.yaml": db_app(path="workloads/web", sync="    automated: {prune: false}")},
    ),
    "automation switched off": (
        {"apps/db.yaml": db_app(sync="    automated: {prune: true, enabled: false}")},
        {
            "apps/db.yaml": db_app(
                path="workloads/web", sync="    automated: {prune: true, enabled: false}"
            )
        },
    ),
}


@needs_renderer
@pytest.mark.parametrize("how", sorted(NOT_AUTOMATED))
@pytest.mark.parametrize("context", ["preview", "speculative", "merged"])
def test_the_next_sync_with_prune_deletes_it(tmp_path: Path, how: str, context: str) -> None:
    """An Application that does not prune by itself deletes nothing until a sync with prune,
    which a merge-queue job runs (`argocd app sync --prune`) as a person does: the claim counts
    as pruned, in every context, with the cause saying so."""
    base, head = NOT_AUTOMATED[how]
    repo = repo_with(tmp_path, head, base)
    rc, data, stderr = check(repo, "--context", context)
    assert rc == 1, (data, stderr)
    claims = [f for f in data["findings"] if f["object"]["kind"] == "PersistentVolumeClaim"]
    assert {(f["code"], f["severity"]) for f in claims} >= {("NOT_RETIRED", "block")}, claims
    cause = claims[0]["evidence"][0]
    assert "does not prune automatically, but the next sync with prune deletes it" in cause, cause


APPSET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: workloads, namespace: argocd}
spec:
  generators:
  - git:
      repoURL: @URL@
      revision: HEAD
      directories:
      - path: workloads/*
      - path: workloads/web
        exclude: true
  template:
    metadata: {name: '{{path.basename}}'}
    spec:
      project: default
      source: {repoURL: @URL@, targetRevision: HEAD, path: '{{path}}'}
      destination: {server: https://kubernetes.default.svc, namespace: '{{path[1]}}'}
      syncPolicy: {automated: {prune: true}}
"""


def appset(policy: str = "") -> str:
    return APPSET.replace("@URL@", URL) + policy


@needs_renderer
def test_an_application_set_that_stops_generating_an_app_deletes_its_claim(
    tmp_path: Path,
) -> None:
    base = {"apps/db.yaml": None, "apps/workloads.yaml": appset()}
    repo = repo_with(tmp_path, {"workloads/db/claim.yaml": None, "workloads/db2/x.md": "x"}, base)
    # the claim's directory goes, so the generator makes no `db` Application: the
    # ApplicationSet controller deletes it, and its (added) resources finalizer the claim
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    found = claim_finding(data)
    assert found["object"]["namespace"] == "db", "the template's {{path[1]}}"
    assert "no longer generated by ApplicationSet argocd/workloads" in found["evidence"][0]
    (generated,) = [r for r in data["plan"]["roots"] if r["root"] == "appset:argocd/workloads"]
    assert generated["label"] == "ApplicationSet argocd/workloads"
    (app,) = generated["namespaces"][0]["objects"]
    assert app["object"]["name"] == "db" and "no longer generates it" in app["cause"]


@needs_renderer
@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("  syncPolicy: {applicationsSync: create-update}\n", "applicationsSync: create-update"),
        ("  syncPolicy: {preserveResourcesOnDeletion: true}\n", "without the resources finalizer"),
    ],
)
def test_an_application_set_that_keeps_what_its_apps_deployed(
    tmp_path: Path, policy: str, said: str
) -> None:
    base = {"apps/db.yaml": None, "apps/workloads.yaml": appset(policy)}
    repo = repo_with(tmp_path, {"workloads/db/claim.yaml": None, "workloads/db2/x.md": "x"}, base)
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)
    assert said in claim_finding(data)["message"]


@needs_renderer
def test_removing_the_application_set_deletes_what_its_apps_deployed(tmp_path: Path) -> None:
    base = {"apps/db.yaml": None, "apps/workloads.yaml": appset()}
    repo = repo_with(tmp_path, {"apps/workloads.yaml": None}, base)
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    assert "deleted with ApplicationSet argocd/workloads" in claim_finding(data)["evidence"][0]


@needs_renderer
def test_an_application_whose_source_is_elsewhere_is_said_and_fails_closed(
    tmp_path: Path,
) -> None:
    elsewhere = db_app(url="https://charts.example.com/other.git")
    repo = repo_with(tmp_path, {"apps/db.yaml": None}, {"apps/db.yaml": elsewhere})
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)  # a warning: nothing says what it deployed
    (found,) = data["findings"]
    assert found["code"] == "APPLICATION_DELETES_RESOURCES" and found["severity"] == "warn"
    assert "nothing says which guarded objects" in found["message"]
    notes = " ".join(data.get("notes", []))
    assert "https://charts.example.com/other.git" in notes and "not read" in notes
    # in a merge queue it waits for the merge
    rc, data, _ = check(repo, "--context", "speculative")
    assert rc == 1 and data["findings"][0]["severity"] == "defer", data


MIXED_APP = """\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: db, namespace: argocd, finalizers: [resources-finalizer.argocd.argoproj.io]}}
spec:
  project: default
  sources:
  - {{repoURL: https://charts.example.com, chart: postgres, targetRevision: 1.2.3}}
  - {{repoURL: {url}, path: workloads/web, targetRevision: HEAD}}
  destination: {{namespace: shop}}
"""


@needs_renderer
@pytest.mark.parametrize(
    "chart",
    [
        "{repoURL: https://charts.example.com, chart: postgres, targetRevision: 1.2.3}",
        "{repoURL: 'oci://ghcr.io/example/charts/postgres', path: ., targetRevision: 1.2.3}",
    ],
)
def test_an_application_with_a_chart_from_elsewhere_is_not_read_whole(
    tmp_path: Path, chart: str
) -> None:
    """Its repository's source is rendered, its chart is not: its removal with the resources
    finalizer deletes what the chart installed, which nothing here says."""
    mixed = MIXED_APP.format(url=URL).replace(
        "{repoURL: https://charts.example.com, chart: postgres, targetRevision: 1.2.3}", chart
    )
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n"
    base = {"apps/db.yaml": mixed, "workloads/web/config.yaml": config}
    repo = repo_with(tmp_path, {"apps/db.yaml": None}, base)
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)
    found = [f for f in data["findings"] if f["object"]["kind"] == "Application"]
    assert [(f["code"], f["severity"]) for f in found] == [
        ("APPLICATION_DELETES_RESOURCES", "warn")
    ], data["findings"]


@needs_renderer
def test_a_source_at_another_revision_is_not_read(tmp_path: Path) -> None:
    pinned = db_app(revision="v1.2.0")
    repo = repo_with(tmp_path, {"apps/db.yaml": db_app(path="workloads/web", revision="v1.2.0")},
                     {"apps/db.yaml": pinned})  # fmt: skip
    rc, data, stderr = check(repo)
    assert rc == 0 and not data["findings"], (data, stderr)
    assert "follows revision v1.2.0" in " ".join(data.get("notes", []))
    # named as following this branch, it is read, and its re-pointing prunes the claim
    rc, data, stderr = check(repo, "--argocd-revision", "v1.2.0")
    assert rc == 1 and claim_finding(data)["code"] == "NOT_RETIRED", (data, stderr)


@needs_renderer
def test_a_kustomize_source_with_its_options(tmp_path: Path) -> None:
    kustomized: dict[str, str | None] = {
        "workloads/db/kustomization.yaml": "resources: [claim.yaml]\n",
        "apps/db.yaml": db_app().replace(
            "path: workloads/db}", "path: workloads/db, kustomize: {namePrefix: prod-}}"
        ),
    }
    repo = repo_with(tmp_path, {"apps/db.yaml": None}, kustomized)
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    assert claim_finding(data)["object"]["name"] == "prod-db-data"


@needs_renderer
def test_a_helm_source_with_values_from_another_source(tmp_path: Path) -> None:
    helm = {"PRUNE_GATE_HELM": pinned_binary("helm")}
    chart: dict[str, str | None] = {
        "charts/db/Chart.yaml": "apiVersion: v2\nname: db\nversion: 1.0.0\n",
        "charts/db/templates/claim.yaml": (
            "{{- if .Values.persistence }}\n"
            + CLAIM.format(annotations="").replace("db-data", "{{ .Release.Name }}-data")
            + "{{- end }}\n"
        ),
        "values/prod.yaml": "persistence: true\n",
        "apps/db.yaml": f"""\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: db, namespace: argocd, finalizers: [resources-finalizer.argocd.argoproj.io]}}
spec:
  sources:
  - repoURL: {URL}
    path: charts/db
    helm: {{releaseName: main, valueFiles: [$values/values/prod.yaml]}}
  - {{repoURL: {URL}, ref: values}}
  destination: {{namespace: shop}}
""",
    }
    repo = repo_with(tmp_path, {"values/prod.yaml": "persistence: false\n"}, chart)
    # the values file in the other source turns persistence off: the upgrade deletes the claim
    # (automated prune is off: at the next sync with prune)
    rc, data, stderr = check(repo, env=helm)
    assert rc == 1, (data, stderr)
    (found, *_) = [f for f in data["findings"] if f["object"]["kind"] == "PersistentVolumeClaim"]
    assert found["object"] == {**found["object"], "name": "main-data", "namespace": "shop"}
    assert "the next sync with prune deletes it" in found["evidence"][0], found


GO_APPSET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: workloads, namespace: argocd}
spec:
  goTemplate: true
  goTemplateOptions: [missingkey=error]
  generators:
  - git:
      repoURL: @URL@
      revision: HEAD
      directories: [{path: 'workloads/*'}]
  template:
    metadata: {name: 'wl-{{ .path.basename | lower }}'}
    spec:
      project: default
      source: {repoURL: @URL@, targetRevision: HEAD, path: '{{ .path.path }}'}
      destination: {namespace: '{{ index .path.segments 1 }}'}
      syncPolicy: {automated: {prune: true}}
""".replace("@URL@", URL)


@needs_renderer
def test_a_go_template_application_set_is_rendered_by_the_helper(tmp_path: Path) -> None:
    repo = repo_with(
        tmp_path,
        {"workloads/db/claim.yaml": None, "workloads/db2/x.md": "x"},
        {"apps/db.yaml": None, "apps/workloads.yaml": GO_APPSET},
    )
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    found = claim_finding(data)
    assert found["object"]["namespace"] == "db"
    assert "Application argocd/wl-db is no longer generated" in found["evidence"][0]
    # a template that fails (missingkey=error) generates nothing in Argo CD: exit 2, said
    broken = GO_APPSET.replace(".path.basename", ".path.nope")
    repo.commit({"apps/workloads.yaml": broken}, "a broken template")
    rc, _, stderr = check(repo)
    assert rc == 2 and 'map has no entry for key "nope"' in stderr, stderr


@needs_renderer
def test_auto_finds_the_entry_and_the_origin_names_the_repository(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, {"apps/db.yaml": None})
    repo.git("remote", "add", "origin", "git@git.example.com:org/gitops.git")
    rc, data, stderr = check_auto(repo)
    assert rc == 1, stderr
    notes = " ".join(data.get("notes", []))
    assert "--argocd-root auto" in notes and "argocd" in notes
    assert "git@git.example.com:org/gitops.git" in notes
    assert claim_finding(data)["code"] == "NOT_RETIRED"


def test_argocd_root_refuses_paths_and_flux(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, {"apps/db.yaml": None})
    for extra in (["--path", "apps"], ["--flux-root", "clusters/prod"]):
        rc, _, stderr = check(repo, *extra)
        assert rc == 2 and "--argocd-root" in stderr, stderr


@pytest.mark.parametrize(
    ("url", "same"),
    [
        ("https://git.example.com/org/gitops.git", True),
        ("https://GIT.example.com/org/gitops/", True),
        ("git@git.example.com:org/gitops.git", True),
        ("ssh://git@git.example.com/org/gitops", True),
        ("https://git.example.com/org/gitops-other", False),
        ("https://git.example.com:8443/org/gitops", False),
    ],
)
def test_repo_urls_compare_as_argo_cd_compares_them(url: str, same: bool) -> None:
    from gate.sources.argocd import normalize_url

    assert (normalize_url(url) == normalize_url(URL)) is same


@needs_renderer
def test_a_directory_source_reads_as_the_repo_server_does(tmp_path: Path) -> None:
    app = db_app().replace(
        "path: workloads/db}",
        "path: workloads/db, directory: {recurse: true, exclude: '{skip/*,*.json}'}}",
    )
    hook = (
        claim()
        .replace("name: db-data", "name: hook-data")
        .replace("spec:", "  annotations: {argocd.argoproj.io/hook: PreSync}\nspec:", 1)
    )
    files: dict[str, str | None] = {
        "apps/db.yaml": app,
        "workloads/db/nested/more.yaml": claim().replace("db-data", "nested-data"),
        "workloads/db/skip/old.yaml": claim().replace("db-data", "skipped-data"),
        "workloads/db/marked.yaml": "# +argocd:skip-file-rendering\n"
        + claim().replace("db-data", "marked-data"),
        "workloads/db/values.yaml": "replicas: 3\n",  # not a manifest: ignored
        "workloads/db/hook.yaml": hook,
    }
    repo = repo_with(tmp_path, {"apps/db.yaml": None}, files)
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    deleted = sorted(
        f["object"]["name"]
        for f in data["findings"]
        if f["object"]["kind"] == "PersistentVolumeClaim"
    )
    assert deleted == ["db-data", "nested-data"], deleted


@needs_renderer
def test_auto_takes_the_bootstrap_file_an_app_of_apps_does_not_deploy(tmp_path: Path) -> None:
    # the root Application sits beside a kustomization that Argo CD itself is installed from
    # (and that does not list root.yaml): auto takes the file, not the directory
    repo = repo_with(
        tmp_path,
        {"apps/db.yaml": None},
        {
            "argocd/kustomization.yaml": "resources: [ns.yaml]\n",
            "argocd/ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: argocd}\n",
            "apps/argocd.yaml": db_app(path="argocd").replace("name: db", "name: argocd"),
        },
    )
    repo.git("remote", "add", "origin", URL)
    rc, data, stderr = check_auto(repo)
    assert rc == 1, stderr
    assert "--argocd-root auto at " in " ".join(data["notes"])
    assert "argocd/root.yaml" in " ".join(data["notes"])
    assert claim_finding(data)["code"] == "NOT_RETIRED"


@needs_renderer
def test_auto_reads_include_globs_and_takes_an_application_that_manages_itself(
    tmp_path: Path,
) -> None:
    # the root deploys the repository's root with recurse, but its include lets through only
    # apps/*.yaml (argo-cd `findManifests`): standalone/web.yaml is no file of the root's, and
    # the Application in it deploys its own directory, so someone applied it first: a root too
    root = ROOT_APP.replace(
        "path: apps}", "path: ., directory: {recurse: true, include: 'apps/*.yaml'}}"
    )
    web = db_app(path="standalone").replace("name: db", "name: web")
    files: dict[str, str | None] = {
        "argocd/root.yaml": root,
        "standalone/web.yaml": web,
        "standalone/claim.yaml": claim().replace("db-data", "web-data"),
    }
    repo = repo_with(tmp_path, {"standalone/web.yaml": None}, files)
    rc, data, stderr = check_auto(repo, "--argocd-repo", URL)
    assert rc == 1, stderr
    assert "argocd/root.yaml, standalone/web.yaml" in " ".join(data["notes"]), data["notes"]
    found = claim_finding(data)
    assert found["object"]["name"] == "web-data"
    assert "Application argocd/web is removed" in found["evidence"][0]


@needs_renderer
def test_a_chart_of_applications_as_the_entry(tmp_path: Path) -> None:
    chart: dict[str, str | None] = {
        "argocd/root.yaml": None,
        "apps/db.yaml": None,
        "apps/Chart.yaml": "apiVersion: v2\nname: apps\nversion: 1.0.0\n",
        "apps/values.yaml": "db: true\n",
        "apps/templates/db.yaml": "{{- if .Values.db }}\n" + db_app() + "{{- end }}\n",
    }
    repo = repo_with(tmp_path, {"apps/values.yaml": "db: false\n"}, chart)
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--argocd-root", "apps",
        "--argocd-repo", URL, "-o", "json", cwd=repo.root,
        env_extra={"PRUNE_GATE_HELM": pinned_binary("helm")},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert (
        "Application argocd/db is removed"
        in claim_finding(json.loads(result.stdout))["evidence"][0]
    )


@needs_renderer
def test_a_candidate_cannot_switch_pruning_off_in_the_commit_that_prunes(tmp_path: Path) -> None:
    # The Application may sync the candidate's revision under the spec deployed now (prune on)
    # before its parent applies the candidate's spec (Prune=false as its default): pruned.
    off = db_app(sync=AUTOMATED + "\n    syncOptions: [Prune=false]")
    keep = {"workloads/db/README.md": "the claim moves"}
    repo = repo_with(tmp_path, {"apps/db.yaml": off, "workloads/db/claim.yaml": None}, keep)
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    assert "under the spec deployed now" in claim_finding(data)["evidence"][0]
    # deployed first, on its own, the default holds
    repo.commit({"workloads/db/claim.yaml": claim(), "apps/db.yaml": db_app()}, "restore")
    repo.commit({"apps/db.yaml": off}, "Prune=false first")
    repo.commit({"workloads/db/claim.yaml": None}, "then remove")
    rc, data, stderr = check(repo)
    assert rc == 0 and "Prune=false" in claim_finding(data)["message"], (data, stderr)


@needs_renderer
def test_a_candidate_cannot_switch_application_set_deletion_off_in_the_same_commit(
    tmp_path: Path,
) -> None:
    base = {"apps/db.yaml": None, "apps/workloads.yaml": appset()}
    keeping = appset("  syncPolicy: {applicationsSync: create-only}\n")
    head = {"apps/workloads.yaml": keeping, "workloads/db/claim.yaml": None, "workloads/x/a.md": ""}
    repo = repo_with(tmp_path, head, base)
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    assert "no longer generated by ApplicationSet" in claim_finding(data)["evidence"][0]


@needs_renderer
def test_an_application_its_parent_does_not_prune_keeps_what_it_deployed(tmp_path: Path) -> None:
    assert "syncPolicy: {automated: {prune: true}}" in ROOT_APP
    keeping = ROOT_APP.replace(
        "syncPolicy: {automated: {prune: true}}",
        "syncPolicy: {automated: {prune: true}, syncOptions: [Prune=false]}",
    )
    repo = repo_with(tmp_path, {"apps/db.yaml": None}, {"argocd/root.yaml": keeping})
    rc, data, stderr = check(repo)
    assert rc == 0, (data, stderr)
    found = claim_finding(data)
    assert (
        "Application argocd/db is not deleted (it has Prune=false: Application argocd/root "
        "leaves it)" in found["message"]
    ), found["message"]
    # without automated prune, the root's next sync with prune deletes it, and its claim
    manual = ROOT_APP.replace("syncPolicy: {automated: {prune: true}}", "syncPolicy: {}")
    repo = repo_with(tmp_path / "manual", {"apps/db.yaml": None}, {"argocd/root.yaml": manual})
    rc, data, stderr = check(repo)
    assert rc == 1 and claim_finding(data)["code"] == "NOT_RETIRED", (data, stderr)


@needs_renderer
def test_a_symlink_cannot_read_the_runners_files(tmp_path: Path) -> None:
    # `up -> ..` names the repository's parent; `s1 -> up/..`, `s2 -> s1/..`... each look
    # inside the repository but climb one more level of the exported tree's; a manifest linked
    # through the last reaches any file of the runner, here one that declares a claim
    outside = tmp_path / "outside.yaml"
    outside.write_text(claim().replace("db-data", "stolen"), encoding="utf-8")
    repo = repo_with(tmp_path, {"apps/db.yaml": None})
    repo.git("checkout", "-q", "HEAD~1")
    (repo.root / "up").symlink_to("..")
    previous = "up"
    for i in range(1, 30):
        (repo.root / f"s{i}").symlink_to(f"{previous}/..")
        previous = f"s{i}"
    (repo.root / "workloads/db/leak.yaml").symlink_to(f"../../{previous}{outside}")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "links")
    repo.git("rm", "-q", "apps/db.yaml")
    repo.git("commit", "-q", "-m", "remove the app")
    rc, data, stderr = check(repo)
    assert "stolen" not in json.dumps(data) + stderr, (data, stderr)
    # refused as the repo-server refuses it ("illegal filepath in symlink"): what the
    # directory deploys is unknown
    assert rc == 2 and "workloads/db/leak.yaml is a symlink out of the repository" in stderr


@needs_renderer
def test_the_artifact_holds_only_what_applications_base_declares_render(tmp_path: Path) -> None:
    """A candidate's new Application is withheld from the artifact, and so is what it renders:
    `gate argocd sync` would sync that into whatever live Application has its name."""
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n"
    payments = db_app(path="workloads/web").replace("  name: db\n", "  name: payments\n")
    assert "name: payments" in payments
    repo = repo_with(
        tmp_path, {"apps/payments.yaml": payments, "workloads/web/config.yaml": config}
    )
    out = tmp_path / "speculative"
    rc, data, stderr = check(repo, "--context", "speculative", f"--defer-to={out}")
    assert rc == 0, (data, stderr)
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.yaml"))
    assert "argocd/argocd/db.yaml" in written and "argocd/argocd/payments.yaml" not in written
    assert "web" not in (out / "argocd" / "argocd" / "db.yaml").read_text(encoding="utf-8")
    record = json.loads(Path(f"{out}.deferred.json").read_text(encoding="utf-8"))
    assert [u["application"] for u in record["undeclaredApplications"]] == ["argocd/payments"]
