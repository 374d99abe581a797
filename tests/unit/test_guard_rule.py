"""`gate check` flags a candidate that deletes or rewrites prune-gate's own guards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_cli import gate, write

VWC = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: prune-gate}}
webhooks:
  - name: prune-gate.prune-gate.io
    failurePolicy: {policy}
    rules:
      - {{apiGroups: [""], apiVersions: ["*"], operations: [DELETE], resources: [pods]}}
"""
OTHER_VWC = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: cert-manager}
webhooks: [{name: webhook.cert-manager.io, failurePolicy: Fail}]
"""
DEPLOYMENT = """\
apiVersion: v1
kind: Namespace
metadata: {name: prune-gate}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prune-gate
  namespace: prune-gate
  labels: {app.kubernetes.io/part-of: prune-gate, app.kubernetes.io/component: admission-webhook}
spec: {replicas: 2}
"""
LEASE = """\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: speculation-fence, namespace: prune-gate}
spec: {holderIdentity: evil, leaseDurationSeconds: 1}
"""
POLICY = "webhook:\n  fence: {namespace: prune-gate, name: speculation-fence}\n"


def check(tmp: Path, base: str, head: str) -> tuple[int, list[tuple[str, str]]]:
    b = write(tmp / "base.yaml", base)
    h = write(tmp / "head.yaml", head)
    p = write(tmp / "prune-gate.yaml", POLICY)
    out = gate(
        "check",
        "--base-manifests",
        str(b),
        "--head-manifests",
        str(h),
        "--config",
        str(p),
        "-o",
        "json",
    )
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    found = [(f["code"], f["object"]["kind"]) for f in report["findings"]]
    return out.returncode, found


@pytest.mark.parametrize(
    ("base", "head", "kinds"),
    [
        (VWC.format(policy="Fail"), "", ["ValidatingWebhookConfiguration"]),
        (
            VWC.format(policy="Fail"),
            VWC.format(policy="Ignore"),
            ["ValidatingWebhookConfiguration"],
        ),
        (DEPLOYMENT, "", ["Namespace", "Deployment"]),
        ("", LEASE, ["Lease"]),
    ],
)
def test_deleting_or_weakening_a_guard_is_blocked(
    tmp_path: Path, base: str, head: str, kinds: list[str]
) -> None:
    code, found = check(tmp_path, base, head)
    assert code == 1
    tampered = [kind for c, kind in found if c == "GUARD_TAMPERED"]
    assert sorted(tampered) == sorted(kinds)


def test_other_webhooks_and_an_unchanged_guard_pass(tmp_path: Path) -> None:
    same = VWC.format(policy="Fail") + "---\n" + DEPLOYMENT
    code, found = check(tmp_path, same + "---\n" + OTHER_VWC, same)
    assert code == 0, found
    assert not [c for c, _ in found if c == "GUARD_TAMPERED"]
