"""The control plane of scripts/dev-cluster is real: its controllers do what prune-gate relies on.

These reproduce the incident prune-gate exists for (a pruned claim stuck Terminating behind
``kubernetes.io/pvc-protection`` while a pod mounts it) and check the other controllers the later
e2e tests lean on: namespace deletion, garbage collection, node lifecycle, impersonation.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import kube as k
from .kube import Cluster

pytestmark = pytest.mark.e2e

PVC_PROTECTION = "kubernetes.io/pvc-protection"


def test_new_claim_carries_pvc_protection_finalizer(kube: Cluster, namespace: str) -> None:
    claim = k.make_claim(kube.client, namespace, "data")

    assert PVC_PROTECTION in (claim.metadata.finalizers or [])


def test_deleting_a_mounted_claim_sticks_until_the_pod_goes(
    kube: Cluster, namespace: str, node: str
) -> None:
    core = k.core(kube.client)
    k.make_claim(kube.client, namespace, "data")
    pod = k.make_pod(kube.client, namespace, node, claims=["data"], name="app-0")
    assert pod.spec.node_name == node

    core.delete_namespaced_persistent_volume_claim("data", namespace)  # the prune

    # The incident: the claim is Terminating, held by pvc-protection, and stays so.
    stuck = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert stuck.metadata.deletion_timestamp is not None
    assert PVC_PROTECTION in stuck.metadata.finalizers
    time.sleep(3)  # give the pvc-protection controller time to (wrongly) let go
    still = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert PVC_PROTECTION in still.metadata.finalizers

    # A kubelet finishing the pod's shutdown releases the claim.
    k.force_delete_pod(kube.client, namespace, "app-0")
    k.wait_for(
        lambda: k.gone(core.read_namespaced_persistent_volume_claim, "data", namespace),
        timeout=30,
        what="the claim to go once its pod is gone",
    )


def test_an_unscheduled_pod_does_not_hold_a_claim(kube: Cluster, namespace: str) -> None:
    core = k.core(kube.client)
    k.make_claim(kube.client, namespace, "data")
    k.make_pod(kube.client, namespace, None, claims=["data"])

    core.delete_namespaced_persistent_volume_claim("data", namespace)

    k.wait_for(
        lambda: k.gone(core.read_namespaced_persistent_volume_claim, "data", namespace),
        timeout=30,
        what="the claim of a pod without spec.nodeName to go",
    )


def test_namespace_deletion_completes_through_the_namespace_controller(kube: Cluster) -> None:
    core = k.core(kube.client)
    name = k.unique("e2e-ns-delete")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(
        name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"a": "1"})
    )
    k.make_claim(kube.client, name, "data")  # unmounted: pvc-protection lets it go

    core.delete_namespace(name)

    assert core.read_namespace(name).status.phase == "Terminating"
    k.wait_for(
        lambda: k.gone(core.read_namespace, name),
        timeout=60,
        what=f"namespace {name} to be emptied and removed",
    )


def _owned_by(items: list[Any], uid: str) -> list[Any]:
    return [o for o in items if any(ref.uid == uid for ref in (o.metadata.owner_references or []))]


@pytest.mark.parametrize("when_deleted", ["Retain", "Delete"])
def test_statefulset_owned_objects_are_garbage_collected(
    kube: Cluster, namespace: str, when_deleted: str
) -> None:
    apps = k.apps(kube.client)
    core = k.core(kube.client)
    labels = {"app": "db"}
    container = client.V1Container(
        name="db",
        image=k.PAUSE_IMAGE,
        volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")],
    )
    sts = apps.create_namespaced_stateful_set(
        namespace,
        client.V1StatefulSet(
            metadata=client.V1ObjectMeta(name="db"),
            spec=client.V1StatefulSetSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                service_name="db",
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[container]),
                ),
                volume_claim_templates=[
                    client.V1PersistentVolumeClaim(
                        metadata=client.V1ObjectMeta(name="data"),
                        spec=client.V1PersistentVolumeClaimSpec(
                            access_modes=["ReadWriteOnce"],
                            resources=client.V1VolumeResourceRequirements(
                                requests={"storage": "1Gi"}
                            ),
                        ),
                    )
                ],
                persistent_volume_claim_retention_policy=(
                    client.V1StatefulSetPersistentVolumeClaimRetentionPolicy(
                        when_deleted=when_deleted, when_scaled="Retain"
                    )
                ),
            ),
        ),
    )
    uid = sts.metadata.uid

    # The statefulset controller makes the revision, the claim and the pod (left Pending).
    k.wait_for(
        lambda: _owned_by(apps.list_namespaced_controller_revision(namespace).items, uid),
        what="the StatefulSet's ControllerRevision",
    )
    k.wait_for(
        lambda: _owned_by(core.list_namespaced_pod(namespace).items, uid),
        what="the StatefulSet's pod db-0",
    )
    k.wait_for(
        lambda: not k.gone(core.read_namespaced_persistent_volume_claim, "data-db-0", namespace),
        what="claim data-db-0 from the claim template",
    )

    apps.delete_namespaced_stateful_set("db", namespace, propagation_policy="Background")

    k.wait_for(
        lambda: (
            not _owned_by(apps.list_namespaced_controller_revision(namespace).items, uid)
            and not _owned_by(core.list_namespaced_pod(namespace).items, uid)
        ),
        timeout=60,
        what="the garbage collector to remove the StatefulSet's revisions and pods",
    )
    if when_deleted == "Delete":
        k.wait_for(
            lambda: k.gone(core.read_namespaced_persistent_volume_claim, "data-db-0", namespace),
            timeout=60,
            what="the claim of a StatefulSet with whenDeleted: Delete to be collected",
        )
    else:
        # The garbage collector has collected the pods above; it never will the claim, which
        # Retain leaves without an owner (no wait for something not to happen).
        claim = core.read_namespaced_persistent_volume_claim("data-db-0", namespace)
        assert claim.metadata.deletion_timestamp is None
        assert not claim.metadata.owner_references


def test_a_silent_node_turns_unknown_and_gets_the_unreachable_taint(kube: Cluster) -> None:
    core = k.core(kube.client)
    name = k.make_node(kube.client).metadata.name
    try:

        def unreachable() -> bool:
            n = core.read_node(name)
            ready = [c for c in n.status.conditions or [] if c.type == "Ready"]
            taints = {t.key for t in n.spec.taints or []}
            return (
                bool(ready)
                and ready[0].status == "Unknown"
                and ("node.kubernetes.io/unreachable" in taints)
            )

        # node-monitor-grace-period is 50s by default
        k.wait_for(unreachable, timeout=120, interval=1, what=f"node {name} to turn Unknown")
    finally:
        k.delete_node(kube.client, name)


def test_impersonation_acts_as_a_service_account(kube: Cluster, namespace: str) -> None:
    flux = "system:serviceaccount:flux-system:kustomize-controller"
    k.make_claim(kube.client, namespace, "data")

    review = k.authentication(kube.impersonating(flux)).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    assert review.status.user_info.username == flux
    assert "system:serviceaccounts:flux-system" in review.status.user_info.groups

    as_group = kube.impersonating("someone", groups=["team-a", "team-b"])
    info = (
        k.authentication(as_group)
        .create_self_subject_review(client.V1SelfSubjectReview())
        .status.user_info
    )
    assert info.username == "someone"
    assert {"team-a", "team-b"} <= set(info.groups)

    # Impersonated requests are authorized as that identity: RBAC gives it nothing here.
    with pytest.raises(ApiException) as denied:
        k.core(kube.impersonating(flux)).delete_namespaced_persistent_volume_claim(
            "data", namespace
        )
    assert denied.value.status == 403
