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
    PROTECTED_LABEL,
    RETIRE,
    Webhook,
    claim_terminating,
    deny,
    events,
    put_fence,
    refusal_reason,
    wait_refused,
)

pytestmark = pytest.mark.e2e

GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"

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


def _patch_claim(api: Any, ns: str, name: str, meta: dict[str, Any], dry_run: bool = False) -> Any:
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    return lambda: k.core(api).patch_namespaced_persistent_volume_claim(
        name, ns, {"metadata": meta}, **kwargs
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


def test_deployer_creating_a_claim_with_the_override_and_an_owner_is_refused(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    """The UPDATE bypass split in two calls: create the claim already carrying the override and
    an owner, then delete the owner; the garbage collector's DELETE would honour the override."""
    ns = clean
    owner = k.core(kube.client).create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=k.unique("owner")))
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name}
    ref["uid"] = owner.metadata.uid
    deployer = kube.impersonating(DEPLOYER)
    name = k.unique("claim")

    def create(annotations: dict[str, str], owners: list[dict[str, Any]]) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": annotations, "ownerReferences": owners},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        return lambda: k.core(deployer).create_namespaced_persistent_volume_claim(ns, body)

    refused = deny(create({ALLOW_DELETE: "slipped in"}, [ref]))
    assert refused is not None, "the deployer created a claim the garbage collector may delete"
    reason, message = refusal_reason(refused)
    assert reason in {"OWNER_REFERENCE_ADDED", "OVERRIDE_IN_MANIFEST"}, message
    assert deny(create({ALLOW_DELETE: "slipped in"}, [])) is not None
    assert name not in _claims(kube, ns)
    # A plain CREATE never reaches the webhook's judgement (matchConditions) and goes through.
    assert deny(create({}, [])) is None
    assert name in _claims(kube, ns)


def test_deployer_relabelling_a_claim_out_of_the_object_selector_is_refused(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    """Labels come from the deployer's manifests: with a webhook objectSelector, one UPDATE that
    drops the label would hide the claim from every later DELETE. The real API server runs the
    matchCondition that lets the relabel through to be refused."""
    ns = clean
    claim = k.make_claim(kube.client, ns, labels={PROTECTED_LABEL: "true"}).metadata.name
    deployer = kube.impersonating(DEPLOYER)

    refused = deny(_patch_claim(deployer, ns, claim, {"labels": {PROTECTED_LABEL: None}}))
    assert refused is not None, "the deployer relabelled a claim out of the webhook's sight"
    reason, message = refusal_reason(refused)
    assert reason == "GUARD_TAMPERED", message
    assert PROTECTED_LABEL in message
    live = k.core(kube.client).read_namespaced_persistent_volume_claim(claim, ns)
    assert live.metadata.labels[PROTECTED_LABEL] == "true"
    assert deny(_patch_claim(deployer, ns, claim, {"labels": {"tier": "db"}})) is None
    assert deny(_patch_claim(kube.client, ns, claim, {"labels": {PROTECTED_LABEL: None}})) is None


def _make_retained_volume(v1: Any) -> str:
    """A hostPath PersistentVolume with reclaim Retain; its name."""
    name = k.unique("pv")
    v1.create_persistent_volume(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": f"/tmp/{name}"},
                "persistentVolumeReclaimPolicy": "Retain",
            },
        }
    )
    return name


def test_deployer_switching_a_volume_to_reclaim_delete_is_refused(
    kube: Cluster, webhook: Webhook
) -> None:
    """A volume switched to reclaim Delete loses its data with its claim, a retired claim's
    stage 2 included. The real API server runs the matchCondition branch for the field."""
    v1 = k.core(kube.client)
    name = _make_retained_volume(v1)
    try:
        deployer = k.core(kube.impersonating(DEPLOYER))

        def switch(api: Any, policy: str) -> Any:
            patch = {"spec": {"persistentVolumeReclaimPolicy": policy}}
            return lambda: api.patch_persistent_volume(name, patch)

        refused = deny(switch(deployer, "Delete"))
        assert refused is not None, "the deployer switched a volume to reclaim Delete"
        reason, message = refusal_reason(refused)
        assert reason == "RECLAIM_SWITCHED_TO_DELETE", message
        live = v1.read_persistent_volume(name)
        assert live.spec.persistent_volume_reclaim_policy == "Retain"
        assert deny(switch(v1, "Delete")) is None  # a person may, after a snapshot
        assert deny(switch(deployer, "Retain")) is None  # towards keeping the data
    finally:
        k.delete_if_present(v1.delete_persistent_volume, name)


def test_deployer_retire_mark_under_a_held_fence_and_override_are_refused(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    deployer = kube.impersonating(DEPLOYER)

    override = deny(_patch_claim(deployer, ns, claim, {"annotations": {ALLOW_DELETE: "ci"}}))
    assert override is not None and refusal_reason(override)[0] == "OVERRIDE_IN_MANIFEST"

    put_fence(kube, webhook, "3f2c9a1b7e4d", k.now())
    leases = k.coordination(kube.client)
    try:
        mark = {"annotations": {RETIRE: "speculative"}}
        # A dry run first: a real mark let through before the cache sees the fence would stay.
        wait_refused(_patch_claim(deployer, ns, claim, mark, dry_run=True), "cache sees the fence")
        refused = deny(_patch_claim(deployer, ns, claim, mark))
        assert refused is not None, "a deployer applied the retire mark under a held fence"
        reason, message = refusal_reason(refused)
        assert reason == "SPECULATION_FENCE", message
    finally:
        leases.delete_namespaced_lease(webhook.fence_name, webhook.fence_namespace)
    live = k.core(kube.client).read_namespaced_persistent_volume_claim(claim, ns)
    assert RETIRE not in (live.metadata.annotations or {})


def _make_statefulset(kube: Cluster, ns: str, replicas: int, when_scaled: str | None = None) -> str:
    """A StatefulSet with the claim template `data`; Parallel, so a scale-down does not wait for
    Pods to be Ready (no kubelet runs: they stay unscheduled)."""
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
    k.apps(kube.client).create_namespaced_stateful_set(
        ns,
        client.V1StatefulSet(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1StatefulSetSpec(
                replicas=replicas,
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
                        when_scaled=when_scaled, when_deleted="Retain"
                    )
                    if when_scaled
                    else None
                ),
            ),
        ),
    )
    return name


@pytest.fixture
def statefulsets(kube: Cluster, clean: str) -> Iterator[list[str]]:
    """Names of the StatefulSets a test makes in `clean`; deleted before `clean` empties the
    namespace, so that they recreate nothing."""
    made: list[str] = []
    try:
        yield made
    finally:
        for name in made:
            k.delete_if_present(k.apps(kube.client).delete_namespaced_stateful_set, name, clean)


@pytest.mark.parametrize("field", ["whenScaled", "whenDeleted"])
def test_deployer_switching_claim_retention_to_delete_is_refused(
    kube: Cluster, clean: str, statefulsets: list[str], webhook: Webhook, field: str
) -> None:
    ns = clean
    name = _make_statefulset(kube, ns, replicas=0)  # no pods, no claims
    statefulsets.append(name)
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


def _claims(kube: Cluster, ns: str) -> set[str]:
    return {
        c.metadata.name
        for c in k.core(kube.client).list_namespaced_persistent_volume_claim(ns).items
    }


@pytest.mark.parametrize("retired", [False, True])
def test_scale_down_with_when_scaled_delete_deletes_only_a_retired_claim(
    kube: Cluster, clean: str, statefulsets: list[str], webhook: Webhook, retired: bool
) -> None:
    """The real StatefulSet controller gives the scaled-away ordinal's claim an ownerReference to
    its condemned Pod (allowed: a controller's UPDATE); the garbage collector's DELETE that follows
    is decided like a deployer's."""
    ns = clean
    name = _make_statefulset(kube, ns, replicas=2, when_scaled="Delete")
    statefulsets.append(name)
    keep, away = f"data-{name}-0", f"data-{name}-1"
    k.wait_for(lambda: {keep, away} <= _claims(kube, ns), timeout=120, what="both claims")
    if retired:
        _patch_claim(kube.client, ns, away, {"annotations": {RETIRE: "e2e: ordinal 1 goes"}})()
    k.apps(kube.client).patch_namespaced_stateful_set_scale(name, ns, {"spec": {"replicas": 1}})

    v1 = k.core(kube.client)
    if retired:
        k.wait_for(
            lambda: k.gone(v1.read_namespaced_persistent_volume_claim, away, ns),
            timeout=180,
            what=f"the garbage collector to delete the retired claim {away}",
        )
    else:
        blocked = k.wait_for(
            lambda: events(kube, ns, away, "PruneBlocked"),
            timeout=180,
            what=f"the garbage collector's DELETE of {away} to be refused",
        )
        assert GARBAGE_COLLECTOR in blocked[0].message, blocked[0].message
        assert "NOT_RETIRED" in blocked[0].message, blocked[0].message
        live = v1.read_namespaced_persistent_volume_claim(away, ns)
        assert live.metadata.deletion_timestamp is None, "an unretired claim went Terminating"
        assert "Pod" in [o.kind for o in live.metadata.owner_references or []]
    assert not claim_terminating(kube, ns, keep)


def test_deployer_override_through_a_status_or_finalize_subresource_is_refused(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    """A /status write may change an object's labels and annotations (the API server keeps only
    its spec): a deployer that put the allow-delete override on a volume, a namespace or a
    StatefulSet through it would then delete it past the webhook. Its UPDATEs through `status`
    are judged as the UPDATEs they are; an ordinary status write still goes through."""
    ns = clean
    v1 = k.core(kube.client)
    name = _make_retained_volume(v1)
    sts = _make_statefulset(kube, ns, replicas=0)
    try:
        core, apps = k.core(kube.impersonating(DEPLOYER)), k.apps(kube.impersonating(DEPLOYER))
        override = {"metadata": {"annotations": {ALLOW_DELETE: "ci"}}}

        def finalize() -> Any:
            """A Namespace's /finalize keeps metadata changes too (a PUT of the whole object)."""
            live_ns = v1.read_namespace(ns)
            live_ns.metadata.annotations = {
                **(live_ns.metadata.annotations or {}),
                ALLOW_DELETE: "ci",
            }
            return core.replace_namespace_finalize(ns, live_ns)

        writes = {
            "volume": lambda: core.patch_persistent_volume_status(name, override),
            "namespace": lambda: core.patch_namespace_status(ns, override),
            "namespace finalize": finalize,
            "statefulset": lambda: apps.patch_namespaced_stateful_set_status(sts, ns, override),
        }
        reasons = {}
        for what, write in writes.items():
            refused = deny(write)
            reasons[what] = refusal_reason(refused)[0] if refused is not None else "allowed"
        assert reasons == dict.fromkeys(writes, "OVERRIDE_IN_MANIFEST")
        assert ALLOW_DELETE not in (v1.read_persistent_volume(name).metadata.annotations or {})
        assert ALLOW_DELETE not in (v1.read_namespace(ns).metadata.annotations or {})
        live = k.apps(kube.client).read_namespaced_stateful_set(sts, ns)
        assert ALLOW_DELETE not in (live.metadata.annotations or {})
        # The deployer's status write that touches no guard is not the webhook's business.
        assert (
            deny(lambda: core.patch_persistent_volume_status(name, {"status": {"message": "ok"}}))
            is None
        )
    finally:
        k.delete_if_present(v1.delete_persistent_volume, name)
