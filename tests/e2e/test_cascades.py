"""Deletions by a controller, against the real kube-controller-manager of the dev cluster.

The StatefulSet controller with `whenScaled: Delete` gives the claim of an ordinal scaled away an
ownerReference to its condemned Pod; once the Pod is gone the garbage collector deletes the claim.
The API server does not say who caused that DELETE, so the webhook decides it like a deployer's:
a claim that was never retired is refused (a PruneBlocked Event, the claim stays, the GC retries),
a retired and unused one goes. No kubelet or scheduler runs: the Pods stay unscheduled, so the API
server removes a deleted one at once, which is all the controller needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .webhookserver import RETIRE, Webhook, events

GC = "system:serviceaccount:kube-system:generic-garbage-collector"


def _statefulset(name: str) -> client.V1StatefulSet:
    labels = {"app": name}
    template = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="data"),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )
    container = client.V1Container(
        name="app",
        image="registry.invalid/app:1",
        volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")],
    )
    return client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1StatefulSetSpec(
            replicas=2,
            service_name=name,
            pod_management_policy="Parallel",
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[container]),
            ),
            volume_claim_templates=[template],
            persistent_volume_claim_retention_policy=(
                client.V1StatefulSetPersistentVolumeClaimRetentionPolicy(
                    when_scaled="Delete", when_deleted="Retain"
                )
            ),
        ),
    )


@pytest.fixture
def scaled_set(kube: Cluster, clean: str) -> Iterator[tuple[str, str]]:
    """A StatefulSet (whenScaled: Delete, two replicas, two claims); deleted before `clean`
    empties the namespace, so that it recreates nothing."""
    ns = clean
    apps = k.apps(kube.client)
    name = k.unique("sts")
    apps.create_namespaced_stateful_set(ns, _statefulset(name))
    v1 = k.core(kube.client)
    claims = {f"data-{name}-0", f"data-{name}-1"}
    k.wait_for(
        lambda: (
            claims
            <= {c.metadata.name for c in v1.list_namespaced_persistent_volume_claim(ns).items}
        ),
        timeout=60,
        what="the StatefulSet controller to create both claims",
    )
    try:
        yield ns, name
    finally:
        k.delete_if_present(apps.delete_namespaced_stateful_set, name, ns)


def _claim(kube: Cluster, ns: str, name: str) -> Any:
    return k.core(kube.client).read_namespaced_persistent_volume_claim(name, ns)


def _scale_to_one(kube: Cluster, ns: str, name: str) -> None:
    k.apps(kube.client).patch_namespaced_stateful_set_scale(name, ns, {"spec": {"replicas": 1}})


def test_scale_down_with_when_scaled_delete_keeps_an_unretired_claim(
    kube: Cluster, scaled_set: tuple[str, str], webhook: Webhook
) -> None:
    ns, name = scaled_set
    claim = f"data-{name}-1"
    _scale_to_one(kube, ns, name)

    blocked = k.wait_for(
        lambda: events(kube, ns, claim, "PruneBlocked"),
        timeout=90,
        what="the garbage collector's DELETE of the scaled-away claim to be refused",
    )
    message = blocked[0].message
    assert GC in message, message
    assert "NOT_RETIRED" in message or "retire" in message, message
    obj = _claim(kube, ns, claim)
    assert obj.metadata.deletion_timestamp is None, "the unretired claim went Terminating"
    owners = [o.kind for o in obj.metadata.owner_references or []]
    assert "Pod" in owners, "the StatefulSet controller did not hand the claim to the GC"
    assert _claim(kube, ns, f"data-{name}-0").metadata.deletion_timestamp is None


def test_scale_down_with_when_scaled_delete_removes_a_retired_claim(
    kube: Cluster, scaled_set: tuple[str, str], webhook: Webhook
) -> None:
    ns, name = scaled_set
    claim = f"data-{name}-1"
    k.core(kube.client).patch_namespaced_persistent_volume_claim(
        claim, ns, {"metadata": {"annotations": {RETIRE: "e2e: ordinal 1 scaled away"}}}
    )
    _scale_to_one(kube, ns, name)

    v1 = k.core(kube.client)
    k.wait_for(
        lambda: k.gone(v1.read_namespaced_persistent_volume_claim, claim, ns),
        timeout=90,
        what=f"the retired, unused claim {claim} to be deleted by the garbage collector",
    )
    assert _claim(kube, ns, f"data-{name}-0").metadata.deletion_timestamp is None
