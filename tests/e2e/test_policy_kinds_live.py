"""Under --live, a guarded custom kind the API server serves is known, though no manifest
declares its CRD; a typo of it is still exit 2, naming the nearest kind, against a real
control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .test_live import configmap_yaml, run_gate

pytestmark = pytest.mark.e2e


def _gate(tmp_path: Path, guarded: str, namespace: str, *live: str) -> Any:
    (tmp_path / "prune-gate.yaml").write_text(f"guardedKinds: [PersistentVolumeClaim, {guarded}]\n")
    (tmp_path / "base.yaml").write_text(configmap_yaml(namespace))
    (tmp_path / "head.yaml").write_text(configmap_yaml(namespace))
    return run_gate(
        tmp_path,
        "check",
        "--base-manifests=base.yaml",
        "--head-manifests=head.yaml",
        "--config=prune-gate.yaml",
        "--format=json",
        *live,
    )


def test_a_served_custom_kind_counts_and_its_typo_does_not(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    group = f"{k.unique('e2e')}.example.com"
    crd_name = f"widgets.{group}"
    crd = k.crd_body(group, "Widget", "widgets")
    ext: Any = client.ApiextensionsV1Api(kube.client)
    ext.create_custom_resource_definition(crd)
    try:
        kube.kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=30s")
        live = ("--live", f"--kubeconfig={kube.kubeconfig}")

        served = _gate(tmp_path, f"Widget.{group}", namespace, *live)
        assert served.returncode == 0, served.stderr
        assert "Traceback" not in served.stderr

        static = _gate(tmp_path, f"Widget.{group}", namespace)
        assert static.returncode == 2, static.stdout
        assert f"policy guardedKinds: Widget.{group} is no built-in kind" in static.stderr
        assert "with --live" in static.stderr

        typo = _gate(tmp_path, f"Widgets.{group}", namespace, *live)
        assert typo.returncode == 2, typo.stdout
        assert "nor the live API server" in typo.stderr
        assert f"did you mean Widget.{group}?" in typo.stderr
    finally:
        ext.delete_custom_resource_definition(crd_name)
