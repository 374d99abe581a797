"""`gate audit`: which guarded claims a deletion would cost their data (the pure judgement, the
reader against a fake API, the report, and the command's refusals); against the real API server
in tests/e2e/test_audit.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gate.cli import main
from gate.engine.audit import Standing, audit_claims
from gate.kube.audit import read_audit
from gate.kube.client import ForbiddenError, NotFoundError
from gate.model.errors import ClusterError
from gate.report.audit import audit_json, audit_text
from tests.unit.helpers import cli_runner


def claim(name: str, volume: str = "", ns: str = "app", cls: str | None = "fast") -> dict[str, Any]:
    spec: dict[str, Any] = {"volumeName": volume} if volume else {}
    if cls is not None:
        spec["storageClassName"] = cls
    status = {"capacity": {"storage": "10Gi"}} if volume else {}
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": spec,
        "status": status,
    }


def volume(name: str, claim_name: str, policy: str, ns: str = "app") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "persistentVolumeReclaimPolicy": policy,
            "storageClassName": "fast",
            "capacity": {"storage": "10Gi"},
            "claimRef": {"namespace": ns, "name": claim_name, "uid": f"uid-{claim_name}"},
        },
    }


def snapshot(name: str, claim_name: str, ready: bool, ns: str = "app") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"source": {"persistentVolumeClaimName": claim_name}},
        "status": {"readyToUse": ready},
    }


CLAIMS = [
    claim("db", "pv-db"),
    claim("media", "pv-media"),
    claim("cache", "pv-cache"),
    claim("new"),  # Pending: no volume yet
    claim("logs", "pv-logs"),
]
VOLUMES = [
    volume("pv-db", "db", "Delete"),
    volume("pv-media", "media", "Retain"),
    volume("pv-cache", "cache", "Delete"),
    volume("pv-logs", "logs", "Delete"),
]
SNAPSHOTS = [snapshot("cache-nightly", "cache", True), snapshot("logs-now", "logs", False)]


def test_each_claim_stands_where_its_volume_and_snapshots_put_it() -> None:
    audit = audit_claims(CLAIMS, VOLUMES, SNAPSHOTS, "app")
    standing = {c.name: c.standing for c in audit.claims}
    assert standing == {
        "cache": Standing.SNAPSHOTTED,
        "db": Standing.AT_RISK,
        "logs": Standing.AT_RISK,  # its snapshot is not ready: nothing to restore yet
        "media": Standing.RETAINED,
        "new": Standing.UNBOUND,
    }
    assert [c.name for c in audit.at_risk] == ["db", "logs"]


def test_without_the_snapshot_api_no_claim_is_snapshotted() -> None:
    audit = audit_claims(CLAIMS, VOLUMES, None, "app")
    assert {c.name for c in audit.at_risk} == {"cache", "db", "logs"}
    text = audit_text(audit)
    assert "VolumeSnapshots (snapshot.storage.k8s.io) are not served" in text
    assert "<no API>" in text


def test_a_volume_bound_to_another_claim_is_not_this_ones() -> None:
    reused = volume("pv-db", "db", "Delete")
    reused["spec"]["claimRef"]["uid"] = "uid-of-an-older-db"  # Released from a previous claim
    audit = audit_claims([claim("db", "pv-db")], [reused], [], "app")
    assert audit.claims[0].standing is Standing.UNBOUND


def test_recycle_loses_the_data_too() -> None:
    audit = audit_claims([claim("db", "pv-db")], [volume("pv-db", "db", "Recycle")], [], "app")
    assert audit.claims[0].standing is Standing.AT_RISK


def test_claims_the_policy_does_not_guard_are_not_audited() -> None:
    audit = audit_claims(CLAIMS, VOLUMES, SNAPSHOTS, "app", claims_guarded=False)
    assert audit.claims == ()
    assert "not a guarded kind" in audit_text(audit)


def test_text_is_a_kubectl_table_then_the_summary_and_what_to_do() -> None:
    text = audit_text(audit_claims(CLAIMS, VOLUMES, SNAPSHOTS, "app"))
    lines = text.splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "NAME",
        "VOLUME",
        "RECLAIM",
        "STORAGECLASS",
        "CAPACITY",
        "SNAPSHOT",
    ]
    assert lines[1].split() == ["app", "db", "pv-db", "Delete", "fast", "10Gi", "<none>"]
    assert lines[2].split() == [
        "app",
        "logs",
        "pv-logs",
        "Delete",
        "fast",
        "10Gi",
        "not",
        "ready:",
        "logs-now",
    ]
    assert lines[0].index("VOLUME") == lines[1].index("pv-db")  # columns line up
    assert (
        "2 guarded claim(s) in namespace app whose data a deletion would destroy; 2 safe "
        "(1 on a Retain volume, 1 with a ready VolumeSnapshot); 1 bound to no volume"
    ) in lines
    assert lines[-1].startswith("to keep a claim's data whatever deletes it: set its volume to")
    assert "kubectl patch pv pv-db -p" in lines[-1]


def test_nothing_at_risk_says_so() -> None:
    text = audit_text(audit_claims([claim("media", "pv-media")], VOLUMES, [], None))
    assert (
        text.splitlines()[0]
        == "No guarded claim in any namespace would lose its data to a deletion."
    )


def test_json_lists_every_claim_by_standing() -> None:
    doc = json.loads(audit_json(audit_claims(CLAIMS, VOLUMES, SNAPSHOTS, "app")))
    assert doc["counts"] == {"at-risk": 2, "retained": 1, "snapshotted": 1, "unbound": 1}
    assert doc["volumeSnapshotApi"] is True
    assert doc["atRisk"][0] == {
        "namespace": "app",
        "name": "db",
        "standing": "at-risk",
        "volume": "pv-db",
        "reclaimPolicy": "Delete",
        "storageClassName": "fast",
        "capacity": "10Gi",
        "snapshots": [],
    }
    assert [c["name"] for c in doc["safe"]] == ["media", "cache"]
    assert doc["safe"][1]["snapshots"] == ["cache-nightly"]


def test_a_class_less_claim_shows_none_as_kubectl_does() -> None:
    c = claim("db", "pv-db", cls=None)
    line = audit_text(audit_claims([c], VOLUMES, [], "app")).splitlines()[1]
    assert line.split()[4] == "<none>"


# ------------------------------------------------------------------------------ reading


class FakeLister:
    """Serves each list path from memory in one page; an absent path is a 404, a listed
    exception is raised."""

    def __init__(self, lists: dict[str, Any]) -> None:
        self.lists = lists
        self.paths: list[str] = []

    def get_json(self, path: str, query: list[tuple[str, str]], what: str) -> dict[str, Any]:
        self.paths.append(path)
        found = self.lists.get(path)
        if found is None:
            raise NotFoundError(404, f"{what}: not served (404)")
        if isinstance(found, Exception):
            raise found
        return {"kind": "List", "metadata": {}, "items": found}


NS_CLAIMS = "/api/v1/namespaces/app/persistentvolumeclaims"
VOLUMES_PATH = "/api/v1/persistentvolumes"
NS_SNAPSHOTS = "/apis/snapshot.storage.k8s.io/v1/namespaces/app/volumesnapshots"


def test_read_lists_the_namespace_and_every_volume() -> None:
    lister = FakeLister({NS_CLAIMS: CLAIMS, VOLUMES_PATH: VOLUMES, NS_SNAPSHOTS: SNAPSHOTS})
    read = read_audit(lister, 500, "app")
    assert lister.paths == [NS_CLAIMS, VOLUMES_PATH, NS_SNAPSHOTS]
    assert (len(read.claims), len(read.volumes), read.snapshots) == (5, 4, SNAPSHOTS)


def test_read_without_the_snapshot_api_says_none() -> None:
    read = read_audit(FakeLister({NS_CLAIMS: CLAIMS, VOLUMES_PATH: VOLUMES}), 500, "app")
    assert read.snapshots is None


def test_a_core_list_that_fails_is_an_error_never_an_empty_audit() -> None:
    with pytest.raises(ClusterError):
        read_audit(FakeLister({NS_CLAIMS: CLAIMS}), 500, "app")  # volumes 404: not optional
    forbidden = ForbiddenError(403, "list persistentvolumes: forbidden (403)")
    with pytest.raises(ForbiddenError):
        read_audit(FakeLister({NS_CLAIMS: CLAIMS, VOLUMES_PATH: forbidden}), 500, "app")


# ------------------------------------------------------------------------------ the command


def test_audit_without_live_is_exit_2_saying_what_to_give() -> None:
    result = cli_runner().invoke(main, ["audit"])
    assert result.exit_code == 2
    assert "give --live" in result.stderr


def test_namespace_and_all_namespaces_together_is_a_usage_error() -> None:
    result = cli_runner().invoke(main, ["audit", "--live", "-n", "app", "-A"])
    assert result.exit_code == 2
    assert "give -n NAMESPACE or -A, not both" in result.stderr


def test_an_unreadable_kubeconfig_is_exit_2(tmp_path: Any) -> None:
    missing = tmp_path / "nope"
    result = cli_runner().invoke(main, ["audit", "--live", "-A", f"--kubeconfig={missing}"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert result.stdout == ""
