"""`gate check --fetch-charts`: a removed HelmRelease's chart read where it lives.

A real git repository laid out as Flux repositories are (an entry point, an `apps`
Kustomization holding a HelmRepository and HelmReleases), the real CLI, the real helm, and the
charts served on loopback by the fixtures of `tests/e2e/charts.py`: a Helm chart repository over
HTTP and the CNCF distribution registry (OCI). Each test removes one release and reads what its
uninstall deletes from the chart itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import charts
from tests.unit.helpers import GitRepo
from tests.unit.test_cli import gate
from tests.unit.test_flux_roots import SYNC

pytestmark = pytest.mark.binaries

APPS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 10m
  path: ./apps
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""

#: A HelmRepository of the loopback chart repository (type default: HTTP) or registry (oci).
HTTP_REPO = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {{name: loopback, namespace: flux-system}}
spec: {{interval: 1h, url: "{url}"}}
"""
OCI_REPO = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {{name: loopback, namespace: flux-system}}
spec: {{interval: 1h, type: oci, insecure: true, url: "{url}"}}
"""
RELEASE = """\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: {name}, namespace: shop}}
spec:
  interval: 1h
  chart:
    spec:
      chart: {chart}
      version: "{version}"
      sourceRef: {{kind: HelmRepository, name: loopback, namespace: flux-system}}
  values: {values}
"""
#: A release whose chart is an OCIRepository (`spec.chartRef`), as flux-operator setups write it.
OCI_SOURCE = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {{name: {name}, namespace: shop}}
spec:
  interval: 1h
  url: {url}/{chart}
  insecure: true
  ref: {{tag: "{version}"}}
  layerSelector: {{mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip, operation: copy}}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: {name}, namespace: shop}}
spec:
  interval: 1h
  chartRef: {{kind: OCIRepository, name: {name}}}
  values: {values}
"""


def flux_repo(
    tmp_path: Path, source: str, release: str, head: str | None = None, name: str = "repo"
) -> GitRepo:
    """Base: the entry point, `apps`, the chart source and one release; head: the release as
    `head` has it, by default gone (its source stays, as a repository of many releases keeps
    it)."""
    repo = GitRepo(tmp_path / name)
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": APPS,
            "apps/source.yaml": source,
            "apps/release.yaml": release,
        },
        "base",
    )
    repo.commit({"apps/release.yaml": head}, "change the release" if head else "remove it")
    return repo


def check(repo: GitRepo, helm: charts.Helm, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = gate(
        "check",
        "--base",
        "HEAD~1",
        "--head",
        "HEAD",
        "--flux-root",
        "clusters/prod",
        "--context",
        "merged",
        "-o",
        "json",
        *extra,
        cwd=repo.root,
        env_extra={"PRUNE_GATE_HELM": helm.path, "PRUNE_GATE_CACHE": str(repo.root.parent)},
    )
    data = json.loads(result.stdout) if result.stdout else {}
    return result.returncode, data, result.stderr


def codes(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    assert "findings" in data, "no report (exit 2)"
    return sorted((f["code"], f["object"]["kind"], f["object"]["name"]) for f in data["findings"])


CASES = {
    # chart, values, what the uninstall is found to delete (none: allowed)
    "a plain claim": ("db-claim", "{}", [("PersistentVolumeClaim", "db-data")]),
    "a StatefulSet whose retention deletes its claims": (
        "db-statefulset",
        "{whenDeleted: Delete}",
        [("StatefulSet", "db-db")],
    ),
    "nothing stateful": ("stateless", "{}", []),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("where", ["http", "oci"])
def test_an_uninstall_is_read_from_the_chart(
    tmp_path: Path,
    case: str,
    where: str,
    chart_repo: charts.ChartRepo,
    oci_registry: charts.OciRegistry,
    chart_helm: charts.Helm,
) -> None:
    chart, values, deleted = CASES[case]
    source = (
        HTTP_REPO.format(url=chart_repo.url)
        if where == "http"
        else OCI_REPO.format(url=oci_registry.url)
    )
    release = RELEASE.format(name="db", chart=chart, version="1.2.3", values=values)
    repo = flux_repo(tmp_path, source, release)

    rc, data, stderr = check(repo, chart_helm)  # offline: the release's content is unknown
    assert rc == 0 and codes(data) == [("RELEASE_CONTENT_UNKNOWN", "HelmRelease", "db")], stderr

    rc, data, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc != 2, stderr
    expected = [("RELEASE_UNINSTALL_DELETES", kind, name) for kind, name in deleted]
    assert codes(data) == expected, (data, stderr)
    assert rc == (1 if deleted else 0), stderr
    if deleted:
        (finding,) = data["findings"]
        assert "helm-controller uninstalls release shop/db" in finding["message"]
        assert f"{chart}" in finding["evidence"][0] and "1.2.3" in finding["evidence"][0]
        assert finding["source"]["path"] == "apps/release.yaml"  # the HelmRelease's line


def test_statefulset_claims_that_outlive_the_uninstall_are_allowed(
    tmp_path: Path, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    """Helm deletes what the release rendered, not the claims a StatefulSet's volumeClaimTemplates
    made: with the default retention (Retain) they stay, and a re-install binds them again."""
    release = RELEASE.format(name="db", chart="db-statefulset", version="1.2.3", values="{}")
    repo = flux_repo(tmp_path, HTTP_REPO.format(url=chart_repo.url), release)
    rc, data, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 0 and data["verdict"] == "allow" and data["findings"] == [], (data, stderr)


def test_a_chart_ref_to_an_oci_repository_is_read(
    tmp_path: Path, oci_registry: charts.OciRegistry, chart_helm: charts.Helm
) -> None:
    both = OCI_SOURCE.format(
        name="db", url=oci_registry.url, chart="db-claim", version="1.2.3", values="{}"
    )
    source, release = both.split("---\n")
    repo = flux_repo(tmp_path, source, release)
    rc, data, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 1, (data, stderr)
    assert codes(data) == [("RELEASE_UNINSTALL_DELETES", "PersistentVolumeClaim", "db-data")]


def test_values_switch_the_claim_off(
    tmp_path: Path, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    """The release's own values are rendered: a chart whose claim the values turn off makes none."""
    values = "{persistence: {enabled: false}}"
    release = RELEASE.format(name="db", chart="db-claim", version="1.2.3", values=values)
    repo = flux_repo(tmp_path, HTTP_REPO.format(url=chart_repo.url), release)
    rc, data, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 0 and data["findings"] == [], (data, stderr)


def test_an_upgrade_whose_values_drop_the_claim_blocks_and_defers_by_keeping_the_release(
    tmp_path: Path, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    """Not a removal: the candidate keeps the HelmRelease but switches its claim off, and the
    upgrade deletes what the chart no longer makes. Offline nothing is rendered on either side;
    with --fetch-charts both are, and the claim's deletion is judged. In the merge queue the
    artifact keeps the HelmRelease as base declares it: no upgrade before the merge."""
    source = HTTP_REPO.format(url=chart_repo.url)
    release = RELEASE.format(name="db", chart="db-claim", version="1.2.3", values="{}")
    off = release.replace("values: {}", "values: {persistence: {enabled: false}}")
    repo = flux_repo(tmp_path, source, release, head=off)
    rc, data, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 1 and codes(data) == [("NOT_RETIRED", "PersistentVolumeClaim", "db-data")], stderr
    assert "chart no longer makes it" in data["findings"][0]["evidence"][0]
    rc, data, stderr = check(repo, chart_helm, "--fetch-charts", "--context", "speculative")
    assert rc == 1 and data["verdict"] == "block", (data, stderr)  # unretired: a block
    assert ("SPECULATIVE_PRUNE", "PersistentVolumeClaim", "db-data") in codes(data)

    # Stage 1 merged (the chart's claim carries the retire mark in base): the queue defers.
    retire = '{persistence: {annotations: {prune-gate.io/retire: "db moves"}}}'
    retired = release.replace("values: {}", f"values: {retire}")
    repo = flux_repo(tmp_path, source, retired, head=off, name="retired")
    out = tmp_path / "artifact"
    rc, data, stderr = check(
        repo, chart_helm, "--fetch-charts", "--context", "speculative", "--defer-to", str(out)
    )
    assert rc == 0 and data["verdict"] == "defer", (data, stderr)
    assert codes(data) == [("SPECULATIVE_PRUNE", "PersistentVolumeClaim", "db-data")]
    written = "\n".join(p.read_text() for p in sorted(out.rglob("*.yaml")))
    assert "prune-gate.io/retire" in written and "enabled: false" not in written, written


@pytest.mark.parametrize(
    ("version", "why"),
    [("1.x", "is not one version"), ("", "(none: the latest)")],
)
def test_a_version_range_is_not_guessed(
    tmp_path: Path, version: str, why: str, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    """What a range resolves to at deploy time is not a fact of the revision: not read, said."""
    release = RELEASE.format(name="db", chart="db-claim", version=version, values="{}")
    repo = flux_repo(tmp_path, HTTP_REPO.format(url=chart_repo.url), release)
    before = list(chart_repo.requests)
    rc, data, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 0 and codes(data) == [("RELEASE_CONTENT_UNKNOWN", "HelmRelease", "db")], stderr
    assert any(why in note for note in data["notes"]), data["notes"]
    assert chart_repo.requests == before  # nothing was pulled


def test_a_version_the_registry_lacks_cannot_be_decided(
    tmp_path: Path, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    """--fetch-charts asked for the chart: when the registry does not have it, exit 2, never a
    silent allow."""
    release = RELEASE.format(name="db", chart="db-claim", version="9.9.9", values="{}")
    repo = flux_repo(tmp_path, HTTP_REPO.format(url=chart_repo.url), release)
    rc, _, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 2 and "cannot pull db-claim 9.9.9" in stderr, stderr


def test_a_pulled_chart_is_read_from_the_cache_next_time(
    tmp_path: Path, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    release = RELEASE.format(name="db", chart="db-claim", version="1.2.3", values="{}")
    repo = flux_repo(tmp_path, HTTP_REPO.format(url=chart_repo.url), release)
    rc, _, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 1, stderr
    pulls = [r for r in chart_repo.requests if r.endswith(".tgz")]
    rc, _, stderr = check(repo, chart_helm, "--fetch-charts")
    assert rc == 1, stderr
    assert [r for r in chart_repo.requests if r.endswith(".tgz")] == pulls
    cached = list((repo.root.parent / "charts").glob("*.tgz"))
    assert len(cached) == 1 and not cached[0].stat().st_mode & 0o222  # read-only


def test_a_speculative_candidate_defers_an_uninstall_it_cannot_read(
    tmp_path: Path, chart_repo: charts.ChartRepo, chart_helm: charts.Helm
) -> None:
    """Offline, a merge-queue candidate that removes a release of a remote chart defers: exit 1
    without --defer-to, and with it the artifact keeps the HelmRelease as base declares it."""
    release = RELEASE.format(name="db", chart="db-claim", version="1.2.3", values="{}")
    repo = flux_repo(tmp_path, HTTP_REPO.format(url=chart_repo.url), release)
    speculative = ("--context", "speculative")
    rc, data, stderr = check(repo, chart_helm, *speculative)
    assert rc == 1 and data["verdict"] == "defer", (data, stderr)
    out = tmp_path / "artifact"
    rc, data, stderr = check(repo, chart_helm, *speculative, "--defer-to", str(out))
    assert rc == 0 and data["verdict"] == "defer", (data, stderr)
    written = "\n".join(p.read_text() for p in sorted(out.rglob("*.yaml")))
    assert "kind: HelmRelease" in written and "chart: db-claim" in written, written


def test_history_reads_charts_too(
    tmp_path: Path, oci_registry: charts.OciRegistry, chart_helm: charts.Helm
) -> None:
    """`gate history --fetch-charts` replays with each revision's charts read where they live:
    the commit that removes the release blocks; offline it is only a warning."""
    release = RELEASE.format(name="db", chart="db-claim", version="1.2.3", values="{}")
    repo = flux_repo(tmp_path, OCI_REPO.format(url=oci_registry.url), release)
    env = {"PRUNE_GATE_HELM": chart_helm.path, "PRUNE_GATE_CACHE": str(tmp_path / "cache")}
    rows = {}
    for extra in ((), ("--fetch-charts",)):
        args = ("history", "--range", "HEAD~1..HEAD", "--flux-root", "clusters/prod", "-o", "json")
        done = gate(*args, *extra, cwd=repo.root, env_extra=env)
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)["commits"]
        rows[extra] = (row["verdict"], row["codes"])
    assert rows[()] == ("warn", ["RELEASE_CONTENT_UNKNOWN"])
    assert rows[("--fetch-charts",)] == ("block", ["RELEASE_UNINSTALL_DELETES"])
