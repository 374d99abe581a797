"""Fixtures for end-to-end tests: one real control plane per session, one namespace per test.

``kube`` (session) starts ``scripts/dev-cluster up`` in a temporary state dir, building the binaries
first when they are missing, and stops it at the end. With ``PRUNE_GATE_TEST_KUBECONFIG`` set it
uses that cluster instead (e.g. one from ``scripts/dev-cluster up``) and starts nothing.

In CI (``tests.ci.ci()``: ``CI=true``) a cluster that cannot be had is a failure, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.ci import ci

from . import charts
from . import kube as k
from .flux import FLUX_APP, Flux, run_flux
from .kube import Cluster
from .webhookserver import Webhook, cleanup_claims, serve_webhook

REPO = Path(__file__).resolve().parents[2]
DEV_CLUSTER = REPO / "scripts" / "dev-cluster"
E2E_LABEL = "prune-gate.io/e2e"


def _start_cluster(state_dir: Path, pytestconfig: pytest.Config) -> str:
    """Run ``dev-cluster up`` in ``state_dir``; return its kubeconfig. Fail (or skip) loudly."""
    env = {**os.environ, "PRUNE_GATE_CLUSTER_DIR": str(state_dir)}
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    # A cold build takes many minutes: let its progress reach the terminal.
    ctx = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with ctx:
        result = subprocess.run([str(DEV_CLUSTER), "up"], env=env, check=False)
        if result.returncode != 0 and (state_dir / "kubeconfig").exists():
            # Binaries are there but a component died while starting (seen once on a loaded
            # 2-core machine): `up` is idempotent, so one more try restarts what is down.
            print("dev-cluster: up failed once; trying again", flush=True)
            result = subprocess.run([str(DEV_CLUSTER), "up"], env=env, check=False)
    if result.returncode == 0:
        return str(state_dir / "kubeconfig")
    message = (
        f"scripts/dev-cluster up failed (exit {result.returncode}); its output is above and the "
        f"component logs are in {state_dir / 'logs'}"
    )
    if not ci() and shutil.which("go") is None and not os.environ.get("KUBEBUILDER_ASSETS"):
        pytest.skip(
            "no control plane: Go is not installed to build it. Install Go, or set "
            "KUBEBUILDER_ASSETS or PRUNE_GATE_TEST_KUBECONFIG (see README, 'A local cluster')"
        )
    pytest.fail(message, pytrace=False)


def _stop_cluster(state_dir: Path) -> None:
    env = {**os.environ, "PRUNE_GATE_CLUSTER_DIR": str(state_dir)}
    subprocess.run([str(DEV_CLUSTER), "down"], env=env, check=True)


@pytest.fixture(scope="session")
def kube(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Cluster]:
    """The control plane shared by the whole session (see the module docstring)."""
    existing = os.environ.get("PRUNE_GATE_TEST_KUBECONFIG")
    state_dir: Path | None = None
    if existing:
        kubeconfig = existing
    else:
        state_dir = tmp_path_factory.mktemp("dev-cluster")
        # A failed `up` stops what it started and leaves the state dir (and its logs) to read.
        kubeconfig = _start_cluster(state_dir, pytestconfig)
    cluster = Cluster(kubeconfig)
    try:
        yield cluster
    finally:
        cluster.close()
        if state_dir is not None:
            # `down` removes the state dir: keep the component logs in pytest's tmp dir.
            logs = tmp_path_factory.mktemp("dev-cluster-logs")
            shutil.copytree(state_dir / "logs", logs, dirs_exist_ok=True)
            _stop_cluster(state_dir)


@pytest.fixture
def namespace(kube: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (its ``default`` service account exists), deleted after the test.

    Teardown force-deletes its pods first, since no kubelet would finish their graceful deletion.
    """
    core = k.core(kube.client)
    name = k.unique(f"e2e-{request.node.name}"[:40])
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={E2E_LABEL: "true"}))
    )
    k.wait_for(
        lambda: not k.gone(core.read_namespaced_service_account, "default", name),
        timeout=30,
        what=f"service account default in namespace {name}",
    )
    try:
        yield name
    finally:
        k.force_delete_pods(kube.client, name)
        k.delete_if_present(core.delete_namespace, name)


@pytest.fixture
def node(kube: Cluster) -> Iterator[str]:
    """A fresh Ready node (no kubelet behind it) for pods to be scheduled on; deleted after."""
    name = k.make_node(kube.client).metadata.name
    try:
        yield name
    finally:
        k.delete_node(kube.client, name)


@pytest.fixture(scope="module")
def webhook(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The webhook with the tests' policy, served and registered for the module using it."""
    with serve_webhook(kube, tmp_path_factory.mktemp("webhook")) as hook:
        yield hook


@pytest.fixture(scope="module")
def flux(
    kube: Cluster, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Flux]:
    """Flux's kustomize-controller (built from tools/flux) running against the cluster, its CRDs
    installed, for the module using it (see ``flux``). Built first when missing, with its
    progress on the terminal; without Go that is a skip outside CI, as for the cluster."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    ctx = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with ctx:
        build = [str(k.BUILD_BINARIES), "build", "kustomize-controller"]
        built = subprocess.run(build, check=False)
    if built.returncode != 0:
        if not ci() and shutil.which("go") is None:
            pytest.skip("no kustomize-controller: Go is not installed to build it (tools/flux)")
        pytest.fail(f"scripts/build-binaries kustomize-controller failed ({built.returncode})")
    with run_flux(kube, tmp_path_factory.mktemp("flux")) as running:
        yield running


@pytest.fixture
def app(flux: Flux, namespace: str) -> Iterator[str]:
    """The test's namespace; its Kustomization ``app`` is deleted (orphaning) before the
    namespace is."""
    try:
        yield namespace
    finally:
        flux.delete_kustomization(namespace, FLUX_APP)


@pytest.fixture
def clean(kube: Cluster, namespace: str, webhook: Webhook) -> Iterator[str]:
    """The test's namespace, emptied of pods and claims before the namespace fixture deletes it."""
    try:
        yield namespace
    finally:
        cleanup_claims(kube, namespace)


@pytest.fixture(scope="session")
def chart_helm(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> charts.Helm:
    """The pinned helm (built when missing), with cache, config and data homes of its own."""
    return charts.Helm(charts.built_binary("helm", pytestconfig), tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="session")
def fixture_charts(
    chart_helm: charts.Helm, tmp_path_factory: pytest.TempPathFactory
) -> charts.PackagedCharts:
    """tests/fixtures/charts packaged by ``helm package``: ``.archives`` and ``.versions``."""
    return charts.package_charts(chart_helm, tmp_path_factory.mktemp("charts"))


@pytest.fixture(scope="session")
def chart_repo(
    chart_helm: charts.Helm,
    fixture_charts: charts.PackagedCharts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[charts.ChartRepo]:
    """A Helm chart repository of the fixture charts over HTTP on loopback (``.url``,
    ``.charts``: name -> version, ``.requests``), served from a thread for the session."""
    tmp = tmp_path_factory.mktemp("chart-repo")
    with charts.serve_chart_repo(chart_helm, fixture_charts, tmp) as repo:
        yield repo


@pytest.fixture(scope="session")
def oci_registry(
    chart_helm: charts.Helm,
    fixture_charts: charts.PackagedCharts,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[charts.OciRegistry]:
    """The distribution registry (tools/registry) on loopback, plain HTTP, with the fixture charts
    pushed (``.url`` = oci://127.0.0.1:PORT/charts, ``.host``, ``.charts``, ``.log``)."""
    binary = charts.built_binary("registry", pytestconfig)
    tmp = tmp_path_factory.mktemp("oci-registry")
    with charts.run_oci_registry(binary, chart_helm, fixture_charts, tmp) as registry:
        yield registry
