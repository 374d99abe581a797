"""Chart sources on loopback, for the tests of ``gate check --fetch-charts``.

The fixture charts of tests/fixtures/charts (``db-statefulset``, ``db-claim``, ``stateless``),
packaged by the pinned helm (``package_charts``), are served two ways, both on 127.0.0.1 only:

- ``serve_chart_repo``: a classic Helm chart repository, the archives and the ``index.yaml`` that
  ``helm repo index --url`` writes, served over plain HTTP by a thread of the test process;
- ``run_oci_registry``: an OCI registry, the CNCF distribution registry built from tools/registry
  (``scripts/build-binaries registry``), on a free port with a temporary filesystem store and no
  TLS, the charts pushed to it with ``helm push --plain-http``.

Nothing waits on time: the registry is ready when ``GET /v2/`` answers 200, polled against a
deadline that only guards against a hang.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ci import ci

from . import kube as k
from .webhookserver import free_port

CHARTS = Path(__file__).resolve().parents[1] / "fixtures" / "charts"
#: Where the registry keeps the pushed charts: ``oci://HOST/charts/NAME``.
OCI_NAMESPACE = "charts"
#: A hang guard for one helm command or the registry's start, not a speed assertion.
HANG_GUARD = 120.0

# No proxy for loopback, whatever the environment says (urllib would otherwise use http_proxy).
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def built_binary(name: str, pytestconfig: pytest.Config) -> str:
    """The path of a binary of ``scripts/build-binaries``, built first when missing with its
    progress on the terminal; without Go that is a skip outside CI, a failure in CI."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    ctx = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with ctx:
        built = subprocess.run([str(k.BUILD_BINARIES), "build", name], check=False)
    if built.returncode != 0:
        if not ci() and shutil.which("go") is None:
            pytest.skip(f"no {name}: Go is not installed to build it (scripts/build-binaries)")
        pytest.fail(f"scripts/build-binaries build {name} failed ({built.returncode})")
    path = subprocess.run(
        [str(k.BUILD_BINARIES), "path", name], check=True, stdout=subprocess.PIPE, text=True
    )
    return path.stdout.strip()


@dataclass(frozen=True)
class Helm:
    """The pinned helm with homes of its own (cache, config, data) under ``home``: it reads none
    of the person's repositories or registry logins, and leaves nothing in them."""

    path: str
    home: Path

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("HELM_")}
        for kind in ("cache", "config", "data"):
            env[f"HELM_{kind.upper()}_HOME"] = str(self.home / kind)
        return env

    def __call__(
        self, *args: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``helm ARGS``; with ``check``, a non-zero exit is an AssertionError quoting it."""
        result = subprocess.run(
            [self.path, *args],
            env=self.env(),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed (exit {result.returncode}):\n{result.stderr}"
            )
        return result


@dataclass(frozen=True)
class PackagedCharts:
    """The fixture charts as ``helm package`` made them."""

    #: chart name -> its archive (``NAME-VERSION.tgz``)
    archives: Mapping[str, Path]
    #: chart name -> version (every fixture chart is 1.2.3)
    versions: Mapping[str, str]


def package_charts(helm: Helm, dest: Path) -> PackagedCharts:
    """``helm package`` every chart of tests/fixtures/charts into ``dest``."""
    archives: dict[str, Path] = {}
    versions: dict[str, str] = {}
    for chart in sorted(p.parent for p in CHARTS.glob("*/Chart.yaml")):
        meta = yaml.safe_load((chart / "Chart.yaml").read_text(encoding="utf-8"))
        name, version = str(meta["name"]), str(meta["version"])
        helm("package", str(chart), "--destination", str(dest))
        archive = dest / f"{name}-{version}.tgz"
        assert archive.is_file(), f"helm package {chart} wrote no {archive.name}"
        archives[name], versions[name] = archive, version
    assert archives, f"no chart under {CHARTS}"
    return PackagedCharts(archives, versions)


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``url`` directly (no proxy): its status and body, an HTTP error's included."""
    try:
        with _direct.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


# ------------------------------------------------------------------------- chart repository


@dataclass(frozen=True)
class ChartRepo:
    """A Helm chart repository served over HTTP on loopback."""

    #: ``http://127.0.0.1:PORT``: what ``helm pull --repo`` and ``helm repo add`` take
    url: str
    #: what is served: the archives and ``index.yaml``
    directory: Path
    #: chart name -> version
    charts: Mapping[str, str]
    #: the request paths answered so far, in order (``/index.yaml``, ``/db-claim-1.2.3.tgz``)
    requests: list[str] = field(default_factory=list)


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves a directory; records each request's path instead of logging it to stderr."""

    def __init__(self, *args: Any, requests: list[str], **kwargs: Any) -> None:
        self._requests = requests
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self._requests.append(self.path)


class _RepoServer(ThreadingHTTPServer):
    """A deeper listen backlog than http.server's 5: a loaded machine is slow to accept."""

    request_queue_size = 64


@contextlib.contextmanager
def serve_chart_repo(helm: Helm, charts: PackagedCharts, tmp: Path) -> Iterator[ChartRepo]:
    """Copy the archives into ``tmp``, index them with ``helm repo index --url``, and serve that
    directory from a thread on a port the kernel picks; stopped when the context ends."""
    directory = tmp / "repo"
    directory.mkdir()
    for archive in charts.archives.values():
        shutil.copy2(archive, directory / archive.name)
    requests: list[str] = []
    handler = functools.partial(_QuietHandler, requests=requests, directory=str(directory))
    server = _RepoServer(("127.0.0.1", 0), handler)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        helm("repo", "index", str(directory), "--url", url)
        thread = threading.Thread(target=server.serve_forever, name="chart-repo", daemon=True)
        thread.start()
        try:
            yield ChartRepo(url, directory, dict(charts.versions), requests)
        finally:
            server.shutdown()
            thread.join()
    finally:
        server.server_close()


# ----------------------------------------------------------------------------- OCI registry


@dataclass(frozen=True)
class OciRegistry:
    """The distribution registry on loopback, with every fixture chart pushed to it."""

    #: ``oci://127.0.0.1:PORT/charts``: a chart is ``{url}/NAME``, pulled with ``--plain-http``
    url: str
    #: ``127.0.0.1:PORT``
    host: str
    #: chart name -> version (the tag it was pushed as)
    charts: Mapping[str, str]
    #: the registry's log (its access log included)
    log: Path


def registry_config(port: int, storage: Path) -> dict[str, Any]:
    """The registry's configuration: loopback, plain HTTP, a filesystem store, no auth."""
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
        "health": {"storagedriver": {"enabled": False}},
    }


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start_registry(binary: str, tmp: Path, attempt: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start the registry and wait until ``GET /v2/`` answers 200; return it and its host.

    Raises ``AssertionError`` (with its log) when it exits first, e.g. on a port taken between
    ``free_port`` and its bind."""
    port = free_port()
    host = f"127.0.0.1:{port}"
    config = tmp / f"config-{attempt}.yaml"
    config.write_text(yaml.safe_dump(registry_config(port, tmp / "storage")), encoding="utf-8")
    log = tmp / "registry.log"
    # No OTLP exporter: its default would post traces to a collector on localhost:4318.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "OTEL_TRACES_EXPORTER": "none"}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [binary, "serve", str(config)], env=env, stdout=out, stderr=subprocess.STDOUT
        )

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"the registry exited {proc.returncode} before it answered:\n{log.read_text()}"
            )
        try:
            return http_get(f"http://{host}/v2/", timeout=2)[0] == 200
        except OSError:
            return False

    try:
        k.wait_for(ready, timeout=HANG_GUARD, what=f"the registry to answer GET http://{host}/v2/")
    except BaseException:
        _stop(proc)
        raise
    return proc, host


@contextlib.contextmanager
def run_oci_registry(
    binary: str, helm: Helm, charts: PackagedCharts, tmp: Path
) -> Iterator[OciRegistry]:
    """Run the registry ``binary`` (tools/registry) on a free loopback port with its store in
    ``tmp``, push every packaged chart to ``oci://HOST/charts``, and stop it when the context
    ends (SIGTERM, then SIGKILL after 30 s)."""
    for attempt in range(3):
        try:
            proc, host = _start_registry(binary, tmp, attempt)
            break
        except AssertionError as exc:
            # Another process took the free port before the registry bound it: a new port.
            if attempt == 2 or "address already in use" not in str(exc):
                raise
    log = tmp / "registry.log"
    try:
        url = f"oci://{host}/{OCI_NAMESPACE}"
        for archive in charts.archives.values():
            helm("push", str(archive), url, "--plain-http")
        yield OciRegistry(url, host, dict(charts.versions), log)
    finally:
        _stop(proc)
