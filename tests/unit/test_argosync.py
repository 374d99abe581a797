"""`gate argocd sync`: the artifact's parts, the operation asked of each Application, the marks
its objects carry and how its end is read (the real controller runs it in
tests/e2e/test_argocd_prune.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.engine.argosync import (
    AppPart,
    Tracking,
    busy_reason,
    forget_manifests,
    outcome,
    replaced,
    skip_reason,
    sync_patch,
)
from gate.engine.deployers.argocd import instance_name
from gate.model.errors import InputError
from gate.sources.deferral import argocd_parts, record_path

CLAIM = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}}
DEPLOY = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop", "annotations": {"a": "b"}},
}


def app(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "shop", "namespace": "argocd", "resourceVersion": "7"},
        "spec": {"destination": {"namespace": "shop"}, **spec},
    }


def part(*objects: dict[str, Any]) -> AppPart:
    return AppPart("argocd", "shop", "argocd/argocd/shop.yaml", objects)


def test_objects_carry_the_marks_argo_cd_tracks_them_by() -> None:
    annotation = Tracking()
    marked = annotation.mark(CLAIM, "shop", "shop")
    assert marked["metadata"]["annotations"] == {
        "argocd.argoproj.io/tracking-id": "shop:/PersistentVolumeClaim:shop/data"
    }
    assert "labels" not in marked["metadata"] and "annotations" not in CLAIM["metadata"]
    assert annotation.mark(DEPLOY, "team_shop", "other")["metadata"]["annotations"] == {
        "a": "b",
        "argocd.argoproj.io/tracking-id": "team_shop:apps/Deployment:shop/web",
    }
    label = Tracking.from_settings(
        {"application.resourceTrackingMethod": "label", "application.instanceLabelKey": "k"}
    )
    assert label.mark(CLAIM, "shop", "shop")["metadata"] == {
        "name": "data",
        "labels": {"k": "shop"},
    }
    both = Tracking.from_settings(
        {"application.resourceTrackingMethod": "annotation+label", "installationID": "i1"}
    )
    long = "x" * 62 + "-yz"
    meta = both.mark(CLAIM, long, "shop")["metadata"]
    assert meta["labels"] == {"app.kubernetes.io/instance": "x" * 62}  # cut to 63, no `-` end
    assert meta["annotations"]["argocd.argoproj.io/installation-id"] == "i1"
    assert Tracking.from_settings(None) == Tracking()


def test_an_application_outside_argo_cds_namespace_is_tracked_as_namespace_name() -> None:
    assert instance_name("argocd", "shop", "argocd") == "shop"
    assert instance_name("team", "shop", "argocd") == "team_shop"


def test_the_operation_is_a_local_sync_without_prune_over_a_cleared_record() -> None:
    live = app(syncPolicy={"syncOptions": ["ServerSideApply=true"], "retry": {"limit": 2}})
    live["status"] = {"operationState": {"phase": "Succeeded"}}
    patch = sync_patch(live, part(CLAIM), "n1", "why", Tracking(), "argocd")
    assert patch["metadata"] == {"resourceVersion": "7"}
    operation = patch["operation"]
    assert operation["initiatedBy"] == {"username": "prune-gate"}
    assert {"name": "prune-gate-sync", "value": "n1"} in operation["info"]
    assert operation["retry"] == {"limit": 2}
    sync = operation["sync"]
    assert sync["prune"] is False and sync["syncOptions"] == ["ServerSideApply=true"]
    (manifest,) = (json.loads(m) for m in sync["manifests"])
    tracking = manifest["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"]
    assert tracking == "shop:/PersistentVolumeClaim:shop/data"
    # the last operation's record loses its sync first: the controller merges the new one in
    assert patch["status"] == {"operationState": {"operation": {"sync": None}}}
    assert "status" not in sync_patch(app(), part(CLAIM), "n1", "why", Tracking(), "argocd")


def test_which_applications_are_skipped_or_must_wait() -> None:
    assert "not in the cluster" in (skip_reason(None) or "")
    automated = skip_reason(app(syncPolicy={"automated": {}}))
    assert automated is not None and "automated sync" in automated
    assert skip_reason(app(syncPolicy={"automated": {"enabled": False}})) is None
    assert skip_reason(app()) is None
    assert busy_reason({**app(), "operation": {"sync": {}}}) is not None
    deleting = app()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    assert busy_reason(deleting) == "is being deleted"
    assert busy_reason(app()) is None


def state(phase: str, nonce: str) -> dict[str, Any]:
    info = [{"name": "prune-gate-sync", "value": nonce}]
    return {
        "status": {"operationState": {"phase": phase, "message": "m", "operation": {"info": info}}}
    }


def test_only_this_syncs_end_is_read() -> None:
    ended = outcome(state("Failed", "n1"), "n1")
    assert ended is not None and ended.phase == "Failed" and not ended.succeeded
    assert outcome(state("Succeeded", "n1"), "n1") is not None
    assert outcome(state("Running", "n1"), "n1") is None
    assert outcome(state("Succeeded", "old"), "n1") is None  # the last operation's record
    ours = {"operation": {"info": [{"name": "prune-gate-sync", "value": "n1"}]}}
    assert not replaced(ours, "n1") and replaced({"operation": {"info": []}}, "n1")
    assert not replaced({}, "n1")
    info = [{"name": "prune-gate-sync", "value": "n1"}]
    assert forget_manifests(info)[0] == {
        "op": "test",
        "path": "/status/operationState/operation/info",
        "value": info,
    }


def artifact(tmp_path: Path, files: dict[str, str], record: Any = None) -> str:
    out = tmp_path / "speculative"
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text, encoding="utf-8")
    body = {"schemaVersion": 1, "head": "c0ffee", "files": sorted(files)}
    record_path(str(out)).write_text(json.dumps(record or body), encoding="utf-8")
    return str(out)


def test_the_parts_are_the_artifacts_argocd_files(tmp_path: Path) -> None:
    out = artifact(
        tmp_path,
        {
            "argocd/team/shop.yaml": "---\nkind: A\n---\n",
            "argocd/_/root.yaml": "kind: B\n",
            "flux/ns/apps.yaml": "kind: C\n",
        },
    )
    record, parts = argocd_parts(out, "argocd")
    assert record["head"] == "c0ffee"
    assert [(p.namespace, p.name, p.objects) for p in parts] == [
        ("argocd", "root", ({"kind": "B"},)),
        ("team", "shop", ({"kind": "A"},)),
    ]


@pytest.mark.parametrize(
    ("files", "record", "said"),
    [
        ({"argocd/a.yaml": "kind: A\n"}, None, "is not an Application's part"),
        ({"argocd/../x.yaml": "kind: A\n"}, None, "is not an Application's part"),
        ({"argocd/ns/Bad_Name.yaml": "kind: A\n"}, None, "is not an Application's part"),
        ({"argocd/ns/a.yaml": "- 1\n"}, None, "not an object"),
        ({"argocd/ns/a.yaml": "kind: [\n"}, None, "cannot read the artifact"),
        ({}, {"schemaVersion": 99}, "not a record of this version"),
    ],
)
def test_what_is_not_an_artifact_is_refused(
    tmp_path: Path, files: dict[str, str], record: Any, said: str
) -> None:
    out = artifact(tmp_path, files, record)
    with pytest.raises(InputError, match=said):
        argocd_parts(out, "argocd")


def test_a_directory_without_its_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(InputError, match="no record beside it"):
        argocd_parts(str(tmp_path / "dir"), "argocd")
