"""The chart sources of the ``--fetch-charts`` tests work with the real helm: the HTTP chart
repository (``chart_repo``) and the OCI registry (``oci_registry``) each serve every fixture chart
at 1.2.3, byte for byte as packaged, and refuse a version they do not have.

No cluster is needed; helm and the registry are built from tools/ (marker ``binaries``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .charts import ChartRepo, Helm, OciRegistry, PackagedCharts, http_get

pytestmark = pytest.mark.binaries

SOURCES = ["chart_repo", "oci_registry"]
FIXTURES = {"db-claim": "1.2.3", "db-statefulset": "1.2.3", "stateless": "1.2.3"}


def pull_args(source: ChartRepo | OciRegistry, name: str, version: str) -> list[str]:
    """``helm pull`` of chart ``name`` at ``version`` from ``source``."""
    if isinstance(source, ChartRepo):
        return ["pull", "--repo", source.url, name, "--version", version]
    return ["pull", f"{source.url}/{name}", "--version", version, "--plain-http"]


def rendered(helm: Helm, chart: Path, *args: str) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders from ``chart``."""
    out = helm("template", "release", str(chart), *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(obj["kind"] for obj in objects)


@pytest.mark.parametrize("source_name", SOURCES)
def test_pull_gives_the_packaged_chart_and_it_renders_a_claim(
    source_name: str,
    request: pytest.FixtureRequest,
    chart_helm: Helm,
    fixture_charts: PackagedCharts,
    tmp_path: Path,
) -> None:
    source: ChartRepo | OciRegistry = request.getfixturevalue(source_name)
    assert source.charts == FIXTURES
    dest = tmp_path / "pulled"
    dest.mkdir()
    chart_helm(*pull_args(source, "db-claim", "1.2.3"), "--destination", str(dest))
    assert sorted(p.name for p in dest.iterdir()) == ["db-claim-1.2.3.tgz"]
    pulled = dest / "db-claim-1.2.3.tgz"
    assert pulled.read_bytes() == fixture_charts.archives["db-claim"].read_bytes()

    objects = rendered(chart_helm, pulled)
    assert kinds(objects) == ["Deployment", "PersistentVolumeClaim"]
    (claim,) = (o for o in objects if o["kind"] == "PersistentVolumeClaim")
    (deployment,) = (o for o in objects if o["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert volumes == [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    ]
    # Values switch the claim off: the Deployment mounts an emptyDir instead.
    without = rendered(chart_helm, pulled, "--set", "persistence.enabled=false")
    assert kinds(without) == ["Deployment"]
    assert without[0]["spec"]["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


@pytest.mark.parametrize("source_name", SOURCES)
def test_a_version_the_source_lacks_is_refused(
    source_name: str, request: pytest.FixtureRequest, chart_helm: Helm, tmp_path: Path
) -> None:
    source: ChartRepo | OciRegistry = request.getfixturevalue(source_name)
    dest = tmp_path / "pulled"
    dest.mkdir()
    refused = chart_helm(*pull_args(source, "db-claim", "1.2.4"), "-d", str(dest), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "not found" in refused.stderr, refused.stderr
    assert list(dest.iterdir()) == []
    # The same command with the version the source has succeeds: the refusal is the version's.
    chart_helm(*pull_args(source, "db-claim", "1.2.3"), "-d", str(dest))
    assert [p.name for p in dest.iterdir()] == ["db-claim-1.2.3.tgz"]


def test_the_repository_index_lists_every_fixture_chart_at_its_url(chart_repo: ChartRepo) -> None:
    status, body = http_get(f"{chart_repo.url}/index.yaml")
    assert status == 200
    index = yaml.safe_load(body)
    assert {
        name: [e["version"] for e in entries] for name, entries in index["entries"].items()
    } == {name: [version] for name, version in FIXTURES.items()}
    for name, (entry,) in index["entries"].items():
        assert entry["urls"] == [f"{chart_repo.url}/{name}-1.2.3.tgz"]
    assert "/index.yaml" in chart_repo.requests
    assert http_get(f"{chart_repo.url}/db-claim-9.9.9.tgz")[0] == 404


def test_the_registry_holds_every_fixture_chart_as_one_tag(oci_registry: OciRegistry) -> None:
    assert oci_registry.url == f"oci://{oci_registry.host}/charts"
    assert oci_registry.host.startswith("127.0.0.1:")
    for name, version in FIXTURES.items():
        status, body = http_get(f"http://{oci_registry.host}/v2/charts/{name}/tags/list")
        assert status == 200, body
        assert json.loads(body) == {"name": f"charts/{name}", "tags": [version]}
    assert http_get(f"http://{oci_registry.host}/v2/charts/absent/tags/list")[0] == 404


@pytest.mark.parametrize(
    ("chart", "expected"),
    [
        ("db-statefulset", ["Service", "StatefulSet"]),
        ("db-claim", ["Deployment", "PersistentVolumeClaim"]),
        ("stateless", ["Deployment", "Service"]),
    ],
)
def test_each_fixture_chart_renders_what_its_name_says(
    chart: str, expected: list[str], chart_helm: Helm, fixture_charts: PackagedCharts
) -> None:
    objects = rendered(chart_helm, fixture_charts.archives[chart])
    assert kinds(objects) == expected
    templates = [
        o["spec"].get("volumeClaimTemplates", []) for o in objects if o["kind"] == "StatefulSet"
    ]
    assert [[t["metadata"]["name"] for t in ts] for ts in templates] == (
        [["data"]] if chart == "db-statefulset" else []
    )
