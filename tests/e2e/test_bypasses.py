"""The bypasses of issue 8 that the webhook decides, against the real API server.

A collection DELETE (the API server calls the webhook once per item, `request.name` empty), and
the deployer UPDATEs that would make a controller delete a guarded claim: an ownerReference, a
StatefulSet's claim retention switched to Delete, the retire mark applied under a held fence, the
allow-delete override in a manifest. Each refusal also proves the registered CEL matchCondition
compiles in the real API server and lets that UPDATE through.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .webhookserver import (
    DEPLOYER,
    RETIRE,
    Webhook,
    claim_terminating,
    deny,
    refusal_reason,
    wait_refused,
)

pytestmark = pytest.mark.e2e

ALLOW_DELETE = "prune-gate.io/allow-delete"


def _delete_all_claims(api: Any, ns: str, dry_run: bool = False) -> Any:
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    return lambda: k.core(api).delete_collection_namespaced_persistent_volume_claim(ns, **kwargs)


def test_collection_delete_of_a_mounted_claim_is_refused(
    kube: Cluster, clean: str, node: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    pod = k.make_pod(kube.client, ns, node, [claim]).metadata.name
    wait_refused(_delete_all_claims(kube.client, ns, dry_run=True), "cache sees the pod")

    refused = deny(_delete_all_claims(kube.client, ns))
    assert refused is not None, "a collection DELETE deleted a mounted claim"
    reason, message = refusal_reason(refused)
    assert reason == "CLAIM_MOUNTED", message
    assert f"pod {pod}" in message
    assert not claim_terminating(kube, ns, claim), "the mounted claim went Terminating"

    raw = kube.kubectl(
        "delete", "--raw", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", check=False
    )
    assert raw.returncode != 0 and "CLAIM_MOUNTED" in raw.stderr, raw.stderr
    assert not claim_terminating(kube, ns, claim)


def _patch_claim(api: Any, ns: str, name: str, meta: dict[str, Any]) -> Any:
    return lambda: k.core(api).patch_namespaced_persistent_volume_claim(
        name, ns, {"metadata": meta}
    )


def test_deployer_adding_an_owner_reference_to_a_claim_is_refused(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    owner = k.core(kube.client).create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=k.unique("owner")))
    )
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
    }
    deployer = kube.impersonating(DEPLOYER)

    refused = deny(_patch_claim(deployer, ns, claim, {"ownerReferences": [ref]}))
    assert refused is not None, "the deployer handed an unretired claim to the garbage collector"
    reason, message = refusal_reason(refused)
    assert reason == "OWNER_REFERENCE_ADDED", message
    assert f"ConfigMap {owner.metadata.name}" in message
    live = k.core(kube.client).read_namespaced_persistent_volume_claim(claim, ns)
    assert not live.metadata.owner_references

    # An UPDATE that touches nothing the webhook judges still goes through (matchConditions).
    assert deny(_patch_claim(deployer, ns, claim, {"labels": {"tier": "db"}})) is None


def test_deployer_retire_mark_under_a_held_fence_and_override_are_refused(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    deployer = kube.impersonating(DEPLOYER)

    override = deny(_patch_claim(deployer, ns, claim, {"annotations": {ALLOW_DELETE: "ci"}}))
    assert override is not None and refusal_reason(override)[0] == "OVERRIDE_IN_MANIFEST"

    lease = {
        "metadata": {"name": webhook.fence_name},
        "spec": {
            "holderIdentity": "3f2c9a1b7e4d",
            "leaseDurationSeconds": 300,
            "renewTime": k.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    leases = k.coordination(kube.client)
    leases.create_namespaced_lease(webhook.fence_namespace, lease)
    try:
        mark = _patch_claim(deployer, ns, claim, {"annotations": {RETIRE: "speculative"}})
        refused = k.wait_for(lambda: deny(mark), timeout=30, what="the cache to see the fence")
        reason, message = refusal_reason(refused)
        assert reason == "SPECULATION_FENCE", message
    finally:
        leases.delete_namespaced_lease(webhook.fence_name, webhook.fence_namespace)
    live = k.core(kube.client).read_namespaced_persistent_volume_claim(claim, ns)
    assert RETIRE not in (live.metadata.annotations or {})


@pytest.fixture
def statefulset(kube: Cluster, clean: str) -> Iterator[tuple[str, str]]:
    """A StatefulSet with a claim template and no replicas (no pods, no claims)."""
    ns = clean
    name = k.unique("db")
    labels = {"app": name}
    template = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="data"),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )
    container = client.V1Container(name="db", image="registry.invalid/db:1")
    apps = k.apps(kube.client)
    apps.create_namespaced_stateful_set(
        ns,
        client.V1StatefulSet(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1StatefulSetSpec(
                replicas=0,
                service_name=name,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[container]),
                ),
                volume_claim_templates=[template],
            ),
        ),
    )
    try:
        yield ns, name
    finally:
        k.delete_if_present(apps.delete_namespaced_stateful_set, name, ns)


@pytest.mark.parametrize("field", ["whenScaled", "whenDeleted"])
def test_deployer_switching_claim_retention_to_delete_is_refused(
    kube: Cluster, statefulset: tuple[str, str], webhook: Webhook, field: str
) -> None:
    ns, name = statefulset
    deployer = k.apps(kube.impersonating(DEPLOYER))
    patch = {"spec": {"persistentVolumeClaimRetentionPolicy": {field: "Delete"}}}

    refused = deny(lambda: deployer.patch_namespaced_stateful_set(name, ns, patch))
    assert refused is not None, f"the deployer switched {field} to Delete"
    reason, message = refusal_reason(refused)
    assert reason == "RETENTION_DELETES_CLAIMS", message
    assert f"{field} from Retain to Delete" in message
    live = k.apps(kube.client).read_namespaced_stateful_set(name, ns)
    policy = live.spec.persistent_volume_claim_retention_policy
    assert getattr(policy, "when_scaled" if field == "whenScaled" else "when_deleted") == "Retain"
