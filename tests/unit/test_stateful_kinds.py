"""Database operators' clusters are guarded out of the box, without their CRD in sight.

In real repositories an operator's CRDs come from its Helm chart, so a diff that removes a
CloudNativePG `Cluster` or a Crunchy `PostgresCluster` holds no CRD: the kinds are known from the
catalogue (`gate.model.stateful`). The manifests are written in the shape public home-ops
repositories use (a 100Gi CNPG cluster with barman backups; a Crunchy cluster with a pgBackRest
repository), the real CLI reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.model.stateful import CATALOGUE
from tests.unit.test_cli import gate, write

CNPG = """\
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata:
  name: postgres16
  namespace: database
spec:
  instances: 3
  imageName: ghcr.io/cloudnative-pg/postgresql:16.4-27
  primaryUpdateStrategy: unsupervised
  storage:
    size: 100Gi
    storageClass: openebs-hostpath
  superuserSecret:
    name: cloudnative-pg-secret
  enableSuperuserAccess: true
  monitoring:
    enablePodMonitor: true
  backup:
    retentionPolicy: 30d
    barmanObjectStore:
      destinationPath: s3://cloudnative-pg/
      endpointURL: https://s3.example.internal
      s3Credentials:
        accessKeyId: {name: cloudnative-pg-secret, key: aws-access-key-id}
        secretAccessKey: {name: cloudnative-pg-secret, key: aws-secret-access-key}
"""
CRUNCHY = """\
apiVersion: postgres-operator.crunchydata.com/v1beta1
kind: PostgresCluster
metadata:
  name: immich
  namespace: media
spec:
  postgresVersion: 16
  instances:
    - name: postgres
      replicas: 2
      dataVolumeClaimSpec:
        storageClassName: ceph-block
        accessModes: [ReadWriteOnce]
        resources:
          requests:
            storage: 20Gi
  backups:
    pgbackrest:
      repos:
        - name: repo1
          volume:
            volumeClaimSpec:
              storageClassName: ceph-block
              accessModes: [ReadWriteOnce]
              resources:
                requests:
                  storage: 10Gi
"""
SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: postgres-lb, namespace: database}
spec: {ports: [{port: 5432}]}
"""


def check(
    tmp_path: Path, base: dict[str, str], head: dict[str, str], *extra: str
) -> tuple[int, dict[str, Any], str]:
    for side, files in (("base", base), ("head", head)):
        (tmp_path / side).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write(tmp_path / side / name, text)
    result = gate(
        "check",
        "--base-manifests",
        str(tmp_path / "base"),
        "--head-manifests",
        str(tmp_path / "head"),
        "-o",
        "json",
        *extra,
        cwd=tmp_path,
    )
    return result.returncode, json.loads(result.stdout or "{}"), result.stderr


def found(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((f["code"], f["object"]["kind"], f["object"]["name"]) for f in data["findings"])


@pytest.mark.parametrize(
    ("manifest", "kind", "name", "operator"),
    [
        (CNPG, "Cluster", "postgres16", "CloudNativePG"),
        (CRUNCHY, "PostgresCluster", "immich", "Crunchy"),
    ],
)
def test_a_removed_database_cluster_blocks_without_its_crd(
    tmp_path: Path, manifest: str, kind: str, name: str, operator: str
) -> None:
    rc, data, stderr = check(
        tmp_path,
        {"db.yaml": manifest, "svc.yaml": SERVICE},
        {"svc.yaml": SERVICE},
        "--context",
        "merged",
    )
    assert rc == 1 and data["verdict"] == "block", (data, stderr)
    assert found(data) == [("NOT_RETIRED", kind, name)]
    (finding,) = data["findings"]
    said = " ".join(finding["evidence"])
    assert operator in said and "claims" not in finding["message"], finding
    assert any("ownerReference" in e or "PVC" in e for e in finding["evidence"]), finding


def test_replacing_every_crunchy_cluster_with_another_operator_blocks(tmp_path: Path) -> None:
    """The shape of a migration: Crunchy's PostgresCluster goes, a CNPG Cluster comes in the
    same commit. The new cluster is empty; the old one's claims die with it."""
    rc, data, stderr = check(
        tmp_path, {"db.yaml": CRUNCHY}, {"db.yaml": CNPG}, "--context", "merged"
    )
    assert rc == 1, (data, stderr)
    assert found(data) == [("NOT_RETIRED", "PostgresCluster", "immich")]


def test_in_the_merge_queue_it_defers_once_retired(tmp_path: Path) -> None:
    retired = CNPG.replace(
        "  namespace: database\n",
        '  namespace: database\n  annotations: {prune-gate.io/retire: "moved to postgres17"}\n',
    )
    rc, data, stderr = check(tmp_path, {"db.yaml": retired}, {}, "--context", "speculative")
    assert rc == 1 and data["verdict"] == "defer", (data, stderr)
    assert found(data) == [("SPECULATIVE_PRUNE", "Cluster", "postgres16")]
    rc, data, stderr = check(tmp_path / "x", {"db.yaml": retired}, {}, "--context", "merged")
    assert rc == 0 and data["verdict"] == "allow", (data, stderr)


def test_a_policy_may_name_a_catalogued_kind_without_its_crd(tmp_path: Path) -> None:
    """`guardedKinds` names kinds; one that nothing declares is refused (a typo guards nothing),
    but a catalogued kind is known without its CRD. A list that leaves the catalogue out
    guards only what it names."""
    write(
        tmp_path / "only-cnpg.yaml",
        "guardedKinds: [PersistentVolumeClaim, Cluster.postgresql.cnpg.io]\n",
    )
    rc, data, stderr = check(
        tmp_path,
        {"a.yaml": CNPG, "b.yaml": CRUNCHY},
        {},
        "--config",
        str(tmp_path / "only-cnpg.yaml"),
    )
    assert rc == 1 and found(data) == [("NOT_RETIRED", "Cluster", "postgres16")], (data, stderr)
    write(tmp_path / "typo.yaml", "guardedKinds: [Clusters.postgresql.cnpg.io]\n")
    rc, _, stderr = check(tmp_path, {"a.yaml": CNPG}, {}, "--config", str(tmp_path / "typo.yaml"))
    assert rc == 2 and "did you mean Cluster.postgresql.cnpg.io" in stderr, stderr


def test_gate_codes_lists_the_catalogue() -> None:
    result = gate("codes")
    assert result.returncode == 0, result.stderr
    for kind in CATALOGUE:
        assert kind.name in result.stdout
    assert "CloudNativePG: each instance's PVCs carry a controller ownerReference" in result.stdout


def test_the_docs_name_every_catalogued_kind() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    missing = [k.name for k in CATALOGUE if f"`{k.name}`" not in page.read_text(encoding="utf-8")]
    assert missing == [], f"docs/configuration.md lacks {missing}"
