"""The webhook killed outright, as a node failure would (issue 13): what the API server does then.

With `failurePolicy: Fail` every guarded DELETE is refused, by the API server, with a message
that names the webhook and why it could not be called, and nothing else is touched: an unguarded
DELETE, a CREATE, an UPDATE go through. With `Ignore` guarded DELETEs go through unchecked, and
the merge queue's gate, which needs no server, still blocks the candidate that would prune the
claim. Each case first shows the webhook deciding (a mounted claim refused), then kills it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import kube as k
from .kube import Cluster
from .webhookserver import (
    REPO,
    cleanup_claims,
    delete_claim,
    refusal_reason,
    serve_webhook,
    wait_refused,
)

pytestmark = pytest.mark.e2e


def _claim_manifest(ns: str, name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )


def _others_unaffected(kube: Cluster, ns: str) -> None:
    """An unguarded CREATE, UPDATE and DELETE, and a guarded kind's CREATE, all answered."""
    v1 = k.core(kube.client)
    name = k.unique("cm")
    v1.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"a": "1"})
    )
    v1.patch_namespaced_config_map(name, ns, {"data": {"a": "2"}})
    v1.delete_namespaced_config_map(name, ns)
    k.make_claim(kube.client, ns)  # a guarded kind, but CREATEs without owners skip the webhook


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_killed_webhook(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, policy: str
) -> None:
    ns = namespace
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    try:
        with serve_webhook(kube, tmp_path, args=["--failure-policy", policy]) as hook:
            refused = wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "decided")
            assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
            hook.kill()

            try:
                delete_claim(kube.client, ns, claim, dry_run=True)()
            except ApiException as exc:
                outcome: ApiException | None = exc
            else:
                outcome = None
            if policy == "Fail":
                assert outcome is not None, "a guarded DELETE passed with the webhook down"
                message = json.loads(outcome.body or "{}")["message"]
                assert 'failed calling webhook "prune-gate.prune-gate.io"' in message, message
                # The URL it could not reach; how it failed varies (refused for a new connection,
                # reset or EOF for one the API server kept alive).
                assert f"{hook.url}/validate" in message, message
            else:
                assert outcome is None, outcome
            _others_unaffected(kube, ns)
    finally:
        cleanup_claims(kube, ns)

    if policy == "Ignore":  # the door that needs no server still stops the prune
        base, head = tmp_path / "base", tmp_path / "head"
        base.mkdir()
        head.mkdir()
        (base / "claim.yaml").write_text(_claim_manifest(ns, claim))
        (head / "other.yaml").write_text(
            json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
        )
        result = subprocess.run(
            [
                *(sys.executable, "-m", "gate", "check", "--context", "speculative", "-o", "json"),
                *("--base-manifests", str(base), "--head-manifests", str(head)),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["verdict"] == "block", report
        assert any(f["object"]["name"] == claim for f in report["findings"]), report
