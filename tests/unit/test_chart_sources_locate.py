"""`gate.sources.charts`: where a HelmRelease's chart lives, and pulling it once.

`locate` is pure: a release and its revision's Flux sources in, a chart at a version or the
reason it is not read out. `pull` runs a stand-in helm here (a script that writes an archive, or
breaks off as a dropped connection does); the real helm against real servers is in
tests/e2e/test_fetch_charts.py.
"""

from __future__ import annotations

import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gate.model.errors import RenderError
from gate.sources.charts import ChartAt, Unreadable, index_sources, locate, pull


def release(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": spec,
    }


def source(kind: str, name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def chart(version: str | None = "1.2.3", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "chart": "postgres",
        "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": "flux-system"},
        **extra,
    }
    if version is not None:
        spec["version"] = version
    return {"spec": spec}


HTTP = source("HelmRepository", "charts", "flux-system", url="https://charts.example.com/")
OCI = source("HelmRepository", "charts", "flux-system", type="oci", url="oci://ghcr.io/acme")


def test_an_http_repository_at_a_pinned_version() -> None:
    found = locate(release(chart=chart()), index_sources([HTTP]))
    assert found == ChartAt("https://charts.example.com", "postgres", "1.2.3")


def test_an_oci_repository_names_the_chart_in_its_reference() -> None:
    found = locate(release(chart=chart("v2.0.0")), index_sources([OCI]))
    assert found == ChartAt("oci://ghcr.io/acme/postgres", "", "v2.0.0")
    insecure = source(
        "HelmRepository",
        "charts",
        "flux-system",
        type="oci",
        insecure=True,
        url="oci://127.0.0.1:5000/c",
    )
    at = locate(release(chart=chart()), index_sources([insecure]))
    assert isinstance(at, ChartAt) and at.plain_http


def test_a_chart_ref_to_an_oci_repository_at_a_tag() -> None:
    oci = source(
        "OCIRepository", "db", "shop", url="oci://ghcr.io/acme/postgres", ref={"tag": "1.2.3"}
    )
    found = locate(release(chartRef={"kind": "OCIRepository", "name": "db"}), index_sources([oci]))
    assert found == ChartAt("oci://ghcr.io/acme/postgres", "", "1.2.3")


@pytest.mark.parametrize(
    ("spec", "sources", "why"),
    [
        ({"chart": chart("1.x")}, [HTTP], "is not one version"),
        ({"chart": chart("*")}, [HTTP], "is not one version"),
        ({"chart": chart(None)}, [HTTP], "(none: the latest)"),
        ({"chart": chart(), "valuesFrom": [{"kind": "Secret", "name": "v"}]}, [HTTP], "valuesFrom"),
        ({"chart": chart(valuesFiles=["values-prod.yaml"])}, [HTTP], "valuesFiles"),
        ({"chart": chart()}, [], "HelmRepository flux-system/charts is not declared"),
        (
            {"chart": chart()},
            [
                source(
                    "HelmRepository",
                    "charts",
                    "flux-system",
                    url="https://x",
                    secretRef={"name": "s"},
                )
            ],
            "credentials",
        ),
        (
            {"chartRef": {"kind": "OCIRepository", "name": "db"}},
            [source("OCIRepository", "db", "shop", url="oci://r/db", ref={"semver": ">=1.0.0"})],
            "is not at one version tag",
        ),
        (
            {"chartRef": {"kind": "OCIRepository", "name": "db"}},
            [
                source(
                    "OCIRepository",
                    "db",
                    "shop",
                    url="oci://r/db",
                    ref={"tag": "1.0.0"},
                    provider="aws",
                )
            ],
            "credentials",
        ),
        ({"chartRef": {"kind": "HelmChart", "name": "db"}}, [], "not an OCIRepository"),
        (
            {"chart": chart()},
            [source("HelmRepository", "charts", "flux-system", url="file:///etc")],
            "neither http(s):// nor oci://",
        ),
    ],
)
def test_what_is_not_read_says_why(
    spec: dict[str, Any], sources: list[dict[str, Any]], why: str
) -> None:
    found = locate(release(**spec), index_sources(sources))
    assert isinstance(found, Unreadable) and why in found.why, found


def test_a_source_of_another_namespace_or_group_is_not_taken() -> None:
    """The sourceRef's namespace decides (the release's own when it names none), and only a Flux
    source counts: a look-alike of another group is not a HelmRepository."""
    other_ns = source("HelmRepository", "charts", "shop", url="https://evil.example.com")
    look_alike = {**HTTP, "apiVersion": "example.com/v1"}
    assert isinstance(
        locate(release(chart=chart()), index_sources([other_ns, look_alike])), Unreadable
    )


STAND_IN = """#!/bin/sh
# A stand-in helm: `helm pull ... --destination DIR ...` writes DIR/postgres-1.2.3.tgz, after
# failing as a dropped connection does while {marker} does not exist (then creating it).
dest=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--destination" ]; then dest="$2"; fi
  shift
done
echo call >> {calls}
if [ ! -e {marker} ]; then
  : > {marker}
  echo 'Error: read tcp 127.0.0.1:1->127.0.0.1:2: read: {failure}' >&2
  exit 1
fi
printf 'chart' > "$dest/postgres-1.2.3.tgz"
"""


def stand_in(tmp_path: Path, failure: str) -> tuple[str, Path]:
    script = tmp_path / "helm"
    calls = tmp_path / "calls"
    script.write_text(
        STAND_IN.format(marker=tmp_path / "failed-once", calls=calls, failure=failure)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), calls


@pytest.mark.parametrize(
    "failure",
    [
        "connection reset by peer",
        # closed before any answer (seen from a loaded chart repository on loopback in CI)
        'looks like "http://127.0.0.1:45641" is not a valid chart repository or cannot be '
        'reached: Get "http://127.0.0.1:45641/index.yaml": EOF',
    ],
)
def test_a_pull_that_broke_off_is_tried_once_more_then_cached_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path / "cache"))
    helm, calls = stand_in(tmp_path, failure)
    at = ChartAt("https://charts.example.com", "postgres", "1.2.3")
    archive = pull(at, helm)
    assert archive.read_text() == "chart" and archive.parent == tmp_path / "cache" / "charts"
    assert not archive.stat().st_mode & 0o222  # read-only input
    assert calls.read_text().count("call") == 2
    assert pull(at, helm) == archive  # cached: helm is not run again
    assert calls.read_text().count("call") == 2


def test_a_refusal_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path / "cache"))
    helm, calls = stand_in(tmp_path, "chart version 1.2.3 not found")
    with pytest.raises(
        RenderError, match=re.escape("cannot pull postgres 1.2.3 from https://charts")
    ):
        pull(ChartAt("https://charts.example.com", "postgres", "1.2.3"), helm)
    assert calls.read_text().count("call") == 1


def test_both_sides_pulling_one_chart_at_once_pull_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`read_both` reads base and head in two threads, and both often name the same chart: one
    pull, both get the cached archive. (Two pulls at once once wrote the same temporary file
    and the second rename failed: an internal error, exit 3.)"""
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "failed-once").touch()  # the stand-in succeeds at once
    helm, calls = stand_in(tmp_path, "unused")
    at = ChartAt("https://charts.example.com", "postgres", "1.2.3")
    start = threading.Barrier(2)

    def side() -> Path:
        start.wait()
        return pull(at, helm)

    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: side(), range(2)))
    assert got[0] == got[1] and got[0].read_text() == "chart"
    assert calls.read_text().count("call") == 1
