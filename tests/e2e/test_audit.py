"""`gate audit --live` against a real control plane, through the real console script: claims
bound (by the real PV controller) to a Delete and a Retain volume and one left Pending, listed
and counted as they stand; without the VolumeSnapshot API, and with it (a ready snapshot makes a
claim safe); and a cluster that cannot be read is exit 2, never an empty audit."""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .test_live import run_gate

pytestmark = pytest.mark.e2e

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"


def _volume(name: str, namespace: str, claim: str, policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": policy,
            "storageClassName": "",
            "hostPath": {"path": f"/tmp/{name}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


#: The class of the claim left Pending: no volume has it, so the PV controller never binds the
#: claim to a class-less volume another test makes while this namespace is still going away.
UNBINDABLE = "prune-gate-e2e-no-such-class"


def _claim(name: str, volume: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "" if volume else UNBINDABLE,
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def claims(kube: Cluster, namespace: str) -> Iterator[dict[str, str]]:
    """db on a Delete volume, media on a Retain one (both Bound by the PV controller), and new
    left Pending; returns claim -> volume name. The volumes are made Retain and deleted after."""
    core = k.core(kube.client)
    volumes = {"db": k.unique("pv-db"), "media": k.unique("pv-media")}
    policies = {"db": "Delete", "media": "Retain"}
    for name, pv in volumes.items():
        core.create_persistent_volume(_volume(pv, namespace, name, policies[name]))
    try:
        for name, pv in volumes.items():
            core.create_namespaced_persistent_volume_claim(namespace, _claim(name, pv))
        core.create_namespaced_persistent_volume_claim(namespace, _claim("new", None))
        for name in volumes:
            k.wait_for(functools.partial(_bound, core, namespace, name), what=f"claim {name} Bound")
        yield volumes
    finally:
        for pv in volumes.values():
            core.patch_persistent_volume(pv, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
            k.delete_if_present(core.delete_persistent_volume, pv)


def _bound(core: Any, namespace: str, name: str) -> bool:
    return bool(
        core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound"
    )


def audit(kube: Cluster, tmp_path: Path, *args: str, kubeconfig: str | None = None) -> Any:
    return run_gate(
        tmp_path, "audit", "--live", f"--kubeconfig={kubeconfig or kube.kubeconfig}", *args
    )


def snapshot_api_served(kube: Cluster) -> bool:
    groups = client.ApisApi(kube.client).get_api_versions().groups
    return any(g.name == SNAPSHOT_GROUP for g in groups)


def test_lists_the_claim_whose_volume_deletes_its_data(
    kube: Cluster, namespace: str, claims: dict[str, str], tmp_path: Path
) -> None:
    if snapshot_api_served(kube):
        pytest.skip("the VolumeSnapshot API is installed in this cluster: this case is its absence")

    done = audit(kube, tmp_path, "-n", namespace)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "NAMESPACE", "NAME", "VOLUME", "RECLAIM", "STORAGECLASS", "CAPACITY", "SNAPSHOT",
    ]  # fmt: skip
    assert lines[1].split() == [namespace, "db", claims["db"], "Delete", '""', "1Gi", "<no", "API>"]
    assert len([line for line in lines if line.startswith(namespace)]) == 1  # media is safe
    assert (
        f"1 guarded claim(s) in namespace {namespace} whose data a deletion would destroy; 1 safe "
        "(1 on a Retain volume, 0 with a ready VolumeSnapshot); 1 bound to no volume"
    ) in lines
    assert "VolumeSnapshots (snapshot.storage.k8s.io) are not served" in done.stdout
    assert f"kubectl patch pv {claims['db']} -p" in done.stdout

    as_json = audit(kube, tmp_path, "-n", namespace, "-o", "json")

    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["volumeSnapshotApi"] is False
    assert doc["counts"] == {"at-risk": 1, "retained": 1, "snapshotted": 0, "unbound": 1}
    assert doc["atRisk"] == [
        {
            "namespace": namespace,
            "name": "db",
            "standing": "at-risk",
            "volume": claims["db"],
            "reclaimPolicy": "Delete",
            "storageClassName": "",
            "capacity": "1Gi",
            "snapshots": [],
        }
    ]
    assert [(c["name"], c["reclaimPolicy"]) for c in doc["safe"]] == [("media", "Retain")]
    assert [c["name"] for c in doc["unbound"]] == ["new"]


def test_all_namespaces_includes_this_one(
    kube: Cluster, namespace: str, claims: dict[str, str], tmp_path: Path
) -> None:
    done = audit(kube, tmp_path, "-A", "-o", "json")

    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["namespace"] is None
    mine = [(c["namespace"], c["name"]) for c in doc["atRisk"] if c["namespace"] == namespace]
    assert mine == [(namespace, "db")]


def test_a_ready_snapshot_makes_the_claim_safe(
    kube: Cluster, namespace: str, claims: dict[str, str], tmp_path: Path
) -> None:
    if snapshot_api_served(kube):
        pytest.skip("the VolumeSnapshot API is installed already: not ours to install and remove")
    ext: Any = client.ApiextensionsV1Api(kube.client)
    body = k.crd_body(SNAPSHOT_GROUP, "VolumeSnapshot", "volumesnapshots")
    # a *.k8s.io group is protected: the external snapshotter's CRD carries this approval
    approval = "https://github.com/kubernetes-csi/external-snapshotter/pull/419"
    body["metadata"]["annotations"] = {"api-approved.kubernetes.io": approval}
    ext.create_custom_resource_definition(body)
    custom: Any = client.CustomObjectsApi(kube.client)
    snap = {
        "apiVersion": f"{SNAPSHOT_GROUP}/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "db-nightly"},
        "spec": {"source": {"persistentVolumeClaimName": "db"}},
        "status": {"readyToUse": True},  # schemaless, no status subresource: kept as written
    }
    try:
        k.wait_for(
            lambda: _created(lambda: custom.create_namespaced_custom_object(
                SNAPSHOT_GROUP, "v1", namespace, "volumesnapshots", snap
            )),
            what="VolumeSnapshots served",
        )  # fmt: skip

        done = audit(kube, tmp_path, "-n", namespace, "-o", "json")

        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["volumeSnapshotApi"] is True
        assert doc["atRisk"] == []
        safe = {c["name"]: c for c in doc["safe"]}
        assert safe["db"]["standing"] == "snapshotted"
        assert safe["db"]["snapshots"] == ["db-nightly"]
    finally:
        k.delete_if_present(ext.delete_custom_resource_definition, body["metadata"]["name"])
        k.wait_for(
            lambda: k.gone(ext.read_custom_resource_definition, body["metadata"]["name"]),
            what="the VolumeSnapshot CRD gone",
        )


def _created(create: Any) -> bool:
    try:
        create()
    except client.ApiException as exc:
        if exc.status == 404:
            return False  # the CRD is not served yet
        raise
    return True


def test_a_cluster_that_cannot_be_read_is_exit_2(kube: Cluster, tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(doc))

    done = audit(kube, tmp_path, "-A", kubeconfig=str(config))

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"error: list persistentvolumeclaims: cannot reach the API server at https://127.0.0.1:{port}"
    )
    assert "Traceback" not in done.stderr
