"""Custom resources are opaque past their metadata; the fields the rules read keep `file:line`.

A Flux root holding kro's ResourceGraphDefinition (`spec.resources` is a list, where a claim's is
a map) made every `gate check` exit 2: the shape checks applied to every kind. They apply now to
the fields the rules read, on the kinds they read them from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.helpers import claim, doc
from tests.unit.test_cli import gate, write
from webhook.review import ReviewError, parse_review

RGD = """\
apiVersion: kro.run/v1alpha1
kind: ResourceGraphDefinition
metadata:
  name: webapp
spec:
  schema:
    apiVersion: v1alpha1
    kind: WebApp
  resources:
    - id: deployment
      template:
        apiVersion: apps/v1
        kind: Deployment
    - id: service
      template: {apiVersion: v1, kind: Service}
"""
#: Other shapes real custom resources have: a spec that is a string, a template that is a list,
#: volumes that are a map, a status that is a list, and a kind called PersistentVolumeClaim in a
#: group that is not the core one.
ODD_CUSTOM = """\
apiVersion: example.com/v1
kind: Note
metadata: {name: n, namespace: app}
spec: just a string
status: [a, b]
---
apiVersion: example.com/v1
kind: Blueprint
metadata: {name: b, namespace: app}
spec:
  template: [one, two]
  volumes: {data: 1Gi}
  claimRef: somewhere
  versions: v1
---
apiVersion: example.com/v1
kind: PersistentVolumeClaim
metadata: {name: fake, namespace: app}
spec:
  resources: [{requests: 1Gi}]
"""


def _tree(root: Path, *docs: str) -> Path:
    write(root / "custom.yaml", doc(RGD, ODD_CUSTOM))
    write(root / "app.yaml", doc(*docs))
    return root


def _check(base: Path, head: Path) -> tuple[int, dict[str, object], str]:
    result = gate(
        "check", "--base-manifests", str(base), "--head-manifests", str(head), "-o", "json"
    )
    report = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, report, result.stderr


def test_custom_resources_of_any_shape_pass_through_and_the_gate_decides(tmp_path: Path) -> None:
    base = _tree(tmp_path / "base", claim())
    same = _tree(tmp_path / "same", claim())
    code, report, err = _check(base, same)
    assert (code, report.get("verdict")) == (0, "allow"), err
    # The same roots still decide: the claim leaving is blocked, the custom resources are inert.
    gone = _tree(tmp_path / "gone", RGD.replace("webapp", "other"))
    code, report, err = _check(base, gone)
    assert (code, report.get("verdict")) == (1, "block"), err
    assert "NOT_RETIRED" in json.dumps(report)


def test_a_custom_resource_leaving_is_not_an_error(tmp_path: Path) -> None:
    base = _tree(tmp_path / "base", claim())
    head = tmp_path / "head"
    write(head / "app.yaml", claim())
    code, report, err = _check(base, head)
    assert (code, report.get("verdict")) == (0, "allow"), err


def test_odd_shapes_the_rules_read_are_still_file_line_errors(tmp_path: Path) -> None:
    base = _tree(tmp_path / "base", claim())
    bad_claim = claim().replace("    requests:\n      storage: 10Gi\n", "    requests: [10Gi]\n")
    head = _tree(tmp_path / "head", RGD.replace("webapp", "other"), bad_claim)
    code, _, err = _check(base, head)
    assert code == 2
    assert err.startswith(
        f"error: {head}/app.yaml:17: PersistentVolumeClaim data: spec.resources.requests must "
        "be an object, not list"
    ), err
    assert "Traceback" not in err


def test_a_volume_whose_claim_name_is_not_a_string_is_an_error_not_a_lost_consumer(
    tmp_path: Path,
) -> None:
    deployment = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: app}
spec:
  template:
    spec:
      volumes:
        - name: d
          persistentVolumeClaim: {claimName: 7}
"""
    base = _tree(tmp_path / "base", claim(), deployment)
    code, _, err = _check(base, base)
    assert code == 2
    assert err.startswith(
        f"error: {base}/app.yaml:12: Deployment web: spec.template.spec.volumes[0]."
        "persistentVolumeClaim.claimName must be a string, not int"
    ), err


def _review(kind: dict[str, str], old: dict[str, Any]) -> bytes:
    request = {
        "uid": "u1",
        "kind": kind,
        "operation": "DELETE",
        "name": "x",
        "userInfo": {"username": "someone"},
        "oldObject": old,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def test_the_webhook_takes_custom_resources_and_checks_by_the_request_kind() -> None:
    rgd: dict[str, Any] = {
        "apiVersion": "kro.run/v1alpha1",
        "kind": "ResourceGraphDefinition",
        "metadata": {"name": "x"},
        "spec": {"resources": [{"id": "a"}]},
    }
    kro = {"group": "kro.run", "version": "v1alpha1", "kind": "ResourceGraphDefinition"}
    assert parse_review(_review(kro, rgd)).old_object == rgd
    # A volume that calls itself something else is still read as the volume the request names.
    volume: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Other",
        "metadata": {"name": "x"},
        "spec": {"claimRef": "app/data"},
    }
    pv = {"group": "", "version": "v1", "kind": "PersistentVolume"}
    with pytest.raises(ReviewError) as err:
        parse_review(_review(pv, volume))
    assert str(err.value) == "request.oldObject.spec.claimRef must be an object, not str"
