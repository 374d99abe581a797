"""The chart's fence Lease against a real API server (issue 32, item 2): `helm install` creates
it unheld, CI holds it, a `helm upgrade` leaves CI's hold alone, `helm uninstall` leaves the
Lease, and a Lease CI created before the chart is left alone rather than refused by Helm.

As in tests/e2e/test_chart.py, no pod runs the webhook: its entries are registered Ignore and
never answer; what the webhook decides about the Lease is tests/e2e/test_guards.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.engine.fence import HOLDER_USER

from .kube import Cluster
from .test_chart import CHART, Helm, Obj, release_name
from .test_live import run_gate

pytestmark = pytest.mark.e2e


@pytest.fixture
def helm(kube: Cluster, tmp_path: Path) -> Helm:
    return Helm(kube, tmp_path / "helm")


def _values(release: str, namespace: str, resync: str = "5m") -> Obj:
    return {
        "webhook": {
            "failurePolicy": "Ignore",
            "objectSelector": {"matchLabels": {"prune-gate.io/e2e-chart": release}},
        },
        "policy": {
            "webhook": {
                "fence": {"namespace": namespace, "name": "speculation-fence"},
                "resync": resync,
            }
        },
    }


def _lease(kube: Cluster, namespace: str) -> Any:
    got = kube.kubectl(
        "get", "lease", "-n", namespace, "speculation-fence", "-o", "json", check=False
    )
    return json.loads(got.stdout) if got.returncode == 0 else None


def test_install_creates_the_fence_unheld_and_upgrade_and_uninstall_leave_cis_hold(
    kube: Cluster, helm: Helm, namespace: str, tmp_path: Path
) -> None:
    release = release_name()
    lease = f"{namespace}/speculation-fence"
    try:
        helm("install", release, str(CHART), "--namespace", namespace,
             values=_values(release, namespace))  # fmt: skip
        created = _lease(kube, namespace)
        assert created is not None, "the chart did not create the fence Lease"
        assert created["spec"].get("holderIdentity") is None
        assert created["metadata"]["annotations"]["meta.helm.sh/release-name"] == release

        held = run_gate(tmp_path, "fence", "hold", "--holder", "aaa111", "--lease", lease,
                        f"--kubeconfig={kube.kubeconfig}")  # fmt: skip
        assert held.returncode == 0, held.stderr
        before = _lease(kube, namespace)
        helm("upgrade", release, str(CHART), "--namespace", namespace,
             values=_values(release, namespace, resync="6m"))  # fmt: skip
        after = _lease(kube, namespace)
        assert after["spec"] == before["spec"]  # still held by aaa111, times untouched
        assert (
            after["metadata"]["annotations"][HOLDER_USER]
            == (before["metadata"]["annotations"][HOLDER_USER])
        )
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=60s")
    kept = _lease(kube, namespace)
    assert kept is not None and kept["spec"]["holderIdentity"] == "aaa111"


def test_a_fence_ci_created_first_is_left_alone(
    kube: Cluster, helm: Helm, namespace: str, tmp_path: Path
) -> None:
    lease = f"{namespace}/speculation-fence"
    held = run_gate(tmp_path, "fence", "hold", "--holder", "bbb222", "--lease", lease,
                    f"--kubeconfig={kube.kubeconfig}")  # fmt: skip
    assert held.returncode == 0, held.stderr
    before = _lease(kube, namespace)
    release = release_name()
    try:
        helm("install", release, str(CHART), "--namespace", namespace,
             values=_values(release, namespace))  # fmt: skip
        helm("upgrade", release, str(CHART), "--namespace", namespace,
             values=_values(release, namespace, resync="6m"))  # fmt: skip
        after = _lease(kube, namespace)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert "meta.helm.sh/release-name" not in (after["metadata"].get("annotations") or {})
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=60s")
    assert _lease(kube, namespace)["spec"]["holderIdentity"] == "bbb222"
