"""Charts read where they live (`--fetch-charts`): a HelmRelease's chart from a registry.

Without it, a HelmRelease whose chart comes from a HelmRepository or an OCI registry is not
rendered, and its removal is RELEASE_CONTENT_UNKNOWN: nothing says what the uninstall deletes.
A CI runner with network can read such a chart as helm-controller would: at the version the
release pins, from the URL its source declares in the same revision. Helm itself pulls it
(`helm pull`, the code helm-controller's chart fetch is built on) into a content cache
(`~/.cache/prune-gate/charts`, one read-only file per URL, chart and version: a pinned version
of a published chart does not change), and the reader renders it with the release's values as
it renders a chart kept in the repository.

What is not read, and why, is said (`Unreadable`): a version range (`1.x`, `*`, none) is whatever
the registry holds at deploy time, not a fact of the revision; a source with credentials
(`secretRef`) or values from the cluster (`valuesFrom`) or from files inside the chart
(`valuesFiles`) would be guessed. A chart that should be readable and is not (the registry
refuses it, the network is down) is an error: `--fetch-charts` asked for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.model.errors import RenderError
from gate.sources.cachedirs import cache_root

#: An exact chart version (semver 2, an optional leading v): what a pin looks like.
PINNED = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")

#: Seconds one `helm pull` may take.
PULL_TIMEOUT = 120.0

#: A pulled chart larger than this is refused (charts are kilobytes; a megabyte is generous).
MAX_CHART_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class ChartAt:
    """A chart at a pinned version in a HelmRepository (HTTP) or an OCI registry."""

    #: The repository URL (https://charts.example.com) or the OCI reference without the tag
    #: (oci://registry.example.com/charts/db).
    url: str
    #: The chart's name in an HTTP repository ("" for OCI: the reference names it).
    chart: str
    version: str
    #: An OCI registry served over plain HTTP (the source's `spec.insecure: true`).
    plain_http: bool = False

    @property
    def oci(self) -> str:
        return self.url if self.url.startswith("oci://") else ""

    def __str__(self) -> str:
        return (
            f"{self.oci}:{self.version}"
            if self.oci
            else f"{self.chart} {self.version} from {self.url}"
        )


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Why a release's chart is not read from where it lives."""

    why: str


#: A revision's Flux sources by (kind, namespace, name).
Sources = Mapping[tuple[str, str, str], Mapping[str, Any]]


def index_sources(
    objects: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """The Flux sources (source.toolkit.fluxcd.io) among a revision's objects, read once for
    all of its HelmReleases."""
    index: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for body in objects:
        if str(body.get("apiVersion", "")).startswith("source.toolkit.fluxcd.io/"):
            meta = _dict(body.get("metadata"))
            key = (str(body.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))
            index.setdefault(key, body)
    return index


def locate(release: Mapping[str, Any], sources: Sources) -> ChartAt | Unreadable:
    """Where a HelmRelease's chart lives, from its spec and the same revision's Flux sources
    (`index_sources`), or why it cannot be read. A chart of this repository is not here: the
    reader renders it from the tree."""
    spec = _dict(release.get("spec"))
    namespace = str(_dict(release.get("metadata")).get("namespace") or "")
    if spec.get("valuesFrom"):
        return Unreadable("spec.valuesFrom reads its values from the cluster")
    chart_ref = _dict(spec.get("chartRef"))
    if chart_ref:
        if chart_ref.get("kind") != "OCIRepository":
            return Unreadable(
                f"spec.chartRef names a {chart_ref.get('kind')}, not an OCIRepository"
            )
        source = _find(
            sources, "OCIRepository", str(chart_ref.get("namespace") or namespace), chart_ref
        )
        return source if isinstance(source, Unreadable) else _from_oci_repository(source)
    chart = _dict(_dict(spec.get("chart")).get("spec"))
    ref = _dict(chart.get("sourceRef"))
    if ref.get("kind") != "HelmRepository":
        return Unreadable(f"its chart comes from a {ref.get('kind') or 'source not named'}")
    if chart.get("valuesFiles") or chart.get("valuesFile"):
        return Unreadable("spec.chart.spec.valuesFiles reads values from files in the chart")
    version = str(chart.get("version") or "")
    if not PINNED.match(version):
        return Unreadable(
            f"spec.chart.spec.version {version or '(none: the latest)'} is not one version: "
            "which chart the registry serves at deploy time is not known now"
        )
    source = _find(sources, "HelmRepository", str(ref.get("namespace") or namespace), ref)
    if isinstance(source, Unreadable):
        return source
    repo = _dict(source.get("spec"))
    if repo.get("secretRef") or repo.get("certSecretRef"):
        return Unreadable("its HelmRepository needs credentials (spec.secretRef)")
    url = str(repo.get("url") or "").rstrip("/")
    name = str(chart.get("chart") or "")
    if not url or not name or "/" in name:
        return Unreadable("its HelmRepository URL or chart name is missing or not a name")
    if url.startswith("oci://") or repo.get("type") == "oci":
        return ChartAt(f"{url}/{name}", "", version, repo.get("insecure") is True)
    if not url.startswith(("https://", "http://")):
        return Unreadable(f"its HelmRepository URL {url} is neither http(s):// nor oci://")
    return ChartAt(url, name, version)


def _from_oci_repository(source: Mapping[str, Any]) -> ChartAt | Unreadable:
    spec = _dict(source.get("spec"))
    if (
        spec.get("secretRef")
        or spec.get("certSecretRef")
        or spec.get("provider") not in (None, "generic")
    ):
        return Unreadable("its OCIRepository needs credentials (spec.secretRef or a provider)")
    url = str(spec.get("url") or "").rstrip("/")
    ref = _dict(spec.get("ref"))
    version = str(ref.get("tag") or ref.get("semver") or "")
    if ref.get("digest") or not PINNED.match(version) or not url.startswith("oci://"):
        return Unreadable(
            f"its OCIRepository {url or '(no url)'} is not at one version tag (spec.ref: "
            f"{dict(ref) or 'none, the latest'})"
        )
    return ChartAt(url, "", version, spec.get("insecure") is True)


def _find(
    sources: Sources, kind: str, namespace: str, ref: Mapping[str, Any]
) -> Mapping[str, Any] | Unreadable:
    name = str(ref.get("name") or "")
    found = sources.get((kind, namespace, name))
    return (
        found
        if found is not None
        else Unreadable(f"{kind} {namespace}/{name} is not declared in this revision")
    )


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def cache_dir() -> Path:
    """Where pulled charts are kept (under `gate.sources.cachedirs.cache_root`)."""
    return cache_root() / "charts"


#: One pull at a time in this process (`read_both` reads the two revisions in threads).
_PULLING = threading.Lock()


def pull(chart: ChartAt, helm: str) -> Path:
    """The chart's archive, pulled with `helm pull` when it is not cached yet; a `RenderError`
    naming the chart and Helm's reason when it cannot be."""
    key = hashlib.sha256(f"{chart.url}\0{chart.chart}\0{chart.version}".encode()).hexdigest()
    cached = cache_dir() / f"{key[:24]}.tgz"
    with _PULLING:  # both sides are read at once and often name the same chart: pull it once
        if not cached.is_file():
            _pull_into(chart, helm, cached)
    return cached


def _pull_into(chart: ChartAt, helm: str, cached: Path) -> None:
    """Pull the chart and move its archive into the cache, read-only, in one rename (another
    process sharing the cache sees the whole file or none)."""
    with tempfile.TemporaryDirectory(prefix="prune-gate-chart-") as home:
        Path(f"{home}/out").mkdir()
        argv = [helm, "pull", "--version", chart.version, "--destination", f"{home}/out"]
        if chart.oci:
            argv += [chart.oci, *(["--plain-http"] if chart.plain_http else [])]
        else:
            argv += ["--repo", chart.url, chart.chart]
        done = _helm_pull(argv, home, chart)
        archives = sorted(Path(f"{home}/out").glob("*.tgz")) if done.returncode == 0 else []
        if len(archives) != 1:
            reason = done.stderr.strip() or "helm pull wrote no chart archive"
            raise RenderError(f"--fetch-charts: cannot pull {chart}: {reason}")
        if archives[0].stat().st_size > MAX_CHART_BYTES:
            raise RenderError(f"--fetch-charts: {chart} is larger than 16 MiB: refused")
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{cached.name}.", suffix=".tmp", dir=cached.parent)
        os.close(fd)
        tmp = Path(name)
        shutil.copyfile(archives[0], tmp)
        tmp.chmod(0o444)  # read-only input
        tmp.replace(cached)


#: What helm says when a connection broke rather than the registry refusing: worth one more try
#: (a CI runner's network drops a connection now and then; helm itself does not retry).
_TRANSIENT = (
    "connection reset by peer",
    "i/o timeout",
    "unexpected EOF",
    "TLS handshake timeout",
    '": EOF',  # Go's net/http: `Get "URL": EOF`, the connection closed before any answer
)


def _helm_pull(argv: list[str], home: str, chart: ChartAt) -> subprocess.CompletedProcess[str]:
    """`helm pull`, tried a second time when the first broke off in transit."""
    what = f"--fetch-charts: cannot pull {chart}"
    done = run_helm(argv, home, PULL_TIMEOUT, what)
    if done.returncode != 0 and any(t in done.stderr for t in _TRANSIENT):
        done = run_helm(argv, home, PULL_TIMEOUT, what)
    return done


def run_helm(
    argv: list[str], home: str, timeout: float, what: str
) -> subprocess.CompletedProcess[str]:
    """Run helm with homes of its own under `home` (`helm_env`); a `RenderError` starting with
    `what` when it cannot be run or times out (its exit code is the caller's to read)."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=helm_env(home), check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RenderError(f"{what}: {exc}") from None


def helm_env(home: str) -> dict[str, str]:
    """Helm run with its own empty homes: no repositories, registries or plugins of the
    runner's user are read (and none written)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": home,
        "HELM_CACHE_HOME": f"{home}/cache",
        "HELM_CONFIG_HOME": f"{home}/config",
        "HELM_DATA_HOME": f"{home}/data",
        **{k: v for k, v in os.environ.items() if k in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")},
    }
