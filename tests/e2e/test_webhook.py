"""The admission webhook against the real control plane: real deletions through the API server.

The webhook is the real server, served and registered by the `webhook` fixture (conftest, one per
module; see `webhookserver`).

Before a refusal is asserted, the test waits until a server-side dry-run delete is refused: the
dry run is decided exactly like the real one, so that wait only lets the watch cache catch up with
the objects the test just made, and a real delete is never sent to a cache that has not seen them.
"""

from __future__ import annotations

import datetime as dt
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook import tls

from . import kube as k
from .kube import Cluster
from .webhookserver import (
    DEPLOYER,
    EXEMPT_LABEL,
    EXEMPT_REASON,
    RETIRE,
    Webhook,
    claim_terminating,
    delete_claim,
    deny,
    events,
    has_event,
    put_fence,
    refusal_reason,
    wait_refused,
)

pytestmark = pytest.mark.e2e


def test_mounted_claim_is_refused_then_deleted_once_retired_and_unmounted(
    kube: Cluster, clean: str, node: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    pod = k.make_pod(kube.client, ns, node, [claim]).metadata.name
    wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "cache sees the pod")

    refused = deny(delete_claim(kube.client, ns, claim))
    assert refused is not None, "a mounted claim was deleted"
    reason, message = refusal_reason(refused)
    assert reason == "CLAIM_MOUNTED"
    assert f"pod {pod} on node {node}" in message
    assert "fix:" in message
    assert not claim_terminating(kube, ns, claim), "a deletionTimestamp appeared"
    k.wait_for(lambda: events(kube, ns, claim, "PruneBlocked"), what="a PruneBlocked event")

    k.force_delete_pod(kube.client, ns, pod)
    k.core(kube.client).patch_namespaced_persistent_volume_claim(
        claim, ns, {"metadata": {"annotations": {RETIRE: "e2e: data moved"}}}
    )
    deployer = kube.impersonating(DEPLOYER)
    k.wait_for(
        lambda: deny(delete_claim(deployer, ns, claim, dry_run=True)) is None,
        what="the retired, unmounted claim to be allowed",
    )
    assert deny(delete_claim(deployer, ns, claim)) is None
    k.wait_for(
        lambda: k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, claim, ns),
        what=f"claim {claim} gone",
    )


def test_deployer_needs_retirement_a_person_does_not(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    deployer = kube.impersonating(DEPLOYER)
    refused = wait_refused(
        delete_claim(deployer, ns, claim, dry_run=True), "the deployer to be refused"
    )
    assert refusal_reason(refused)[0] == "NOT_RETIRED"
    again = deny(delete_claim(deployer, ns, claim))
    assert again is not None and refusal_reason(again)[0] == "NOT_RETIRED"
    assert not claim_terminating(kube, ns, claim)

    assert deny(delete_claim(kube.client, ns, claim)) is None  # a person, by hand
    k.wait_for(
        lambda: k.gone(k.core(kube.client).read_namespaced_persistent_volume_claim, claim, ns),
        what=f"claim {claim} gone",
    )


def test_held_fence_refuses_the_deployer_an_expired_one_does_not(
    kube: Cluster, clean: str, webhook: Webhook
) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns, annotations={RETIRE: "e2e"}).metadata.name
    deployer = kube.impersonating(DEPLOYER)
    sha = "3f2c9a1b7e4d"
    put_fence(kube, webhook, sha, k.now())
    try:
        refused = wait_refused(
            delete_claim(deployer, ns, claim, dry_run=True), "the fence to be obeyed"
        )
        reason, message = refusal_reason(refused)
        assert reason == "SPECULATION_FENCE"
        assert sha in message
        assert deny(delete_claim(kube.client, ns, claim, dry_run=True)) is None  # a person

        put_fence(kube, webhook, sha, k.now() - dt.timedelta(hours=1))
        k.wait_for(
            lambda: deny(delete_claim(deployer, ns, claim, dry_run=True)) is None,
            what="the expired fence to be ignored",
        )
        assert deny(delete_claim(deployer, ns, claim)) is None
        k.wait_for(lambda: events(kube, ns, claim, "FenceExpired"), what="a FenceExpired event")
    finally:
        k.coordination(kube.client).delete_namespaced_lease(
            webhook.fence_name, webhook.fence_namespace
        )


def test_dry_run_is_decided_without_events(kube: Cluster, clean: str, node: str) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    refused = wait_refused(delete_claim(kube.client, ns, claim, dry_run=True), "refusal")
    assert refusal_reason(refused)[0] == "CLAIM_MOUNTED"
    for _ in range(3):
        assert deny(delete_claim(kube.client, ns, claim, dry_run=True)) is not None
    time.sleep(1.0)  # the Event queue would have sent by now
    assert events(kube, ns, claim, "PruneBlocked") == []
    assert not claim_terminating(kube, ns, claim)


def test_namespace_with_a_mounted_claim_is_refused(kube: Cluster, clean: str, node: str) -> None:
    ns = clean
    claim = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [claim])
    v1 = k.core(kube.client)
    refused = wait_refused(lambda: v1.delete_namespace(ns, dry_run="All"), "namespace refusal")
    reason, message = refusal_reason(refused)
    assert reason == "NAMESPACE_HOLDS_CLAIMS"
    assert claim in message
    assert deny(lambda: v1.delete_namespace(ns)) is not None
    assert v1.read_namespace(ns).metadata.deletion_timestamp is None


def test_metrics_and_rotated_certificate(kube: Cluster, webhook: Webhook) -> None:
    status, text = webhook.get("/metrics")
    assert status == 200
    assert 'prune_gate_webhook_decisions_total{code="CLAIM_MOUNTED",outcome="refused"}' in text
    assert "prune_gate_webhook_watch_restarts_total" in text

    crt, key = webhook.cert_dir / "tls.crt", webhook.cert_dir / "tls.key"
    original = tls.CertPair(crt.read_bytes(), key.read_bytes())
    host, port = webhook.url.removeprefix("https://").split(":")

    def served(pair: tls.CertPair) -> bool:
        pem = ssl.get_server_certificate((host, int(port)))
        return ssl.PEM_cert_to_DER_cert(pem) == ssl.PEM_cert_to_DER_cert(pair.cert_pem.decode())

    rotated = tls.make_serving_cert(tls.make_ca("rotated CA"), ["127.0.0.1"])
    tls.write_pair(rotated, crt, key)
    try:
        k.wait_for(lambda: served(rotated), timeout=10, what="the rotated certificate served")
    finally:  # back to the certificate the API server trusts
        tls.write_pair(original, crt, key)
    k.wait_for(lambda: served(original), timeout=10, what="the original certificate served")


def test_overrides_allow_with_an_event(kube: Cluster, clean: str, node: str) -> None:
    ns = clean
    annotated = k.make_claim(
        kube.client, ns, annotations={"prune-gate.io/allow-delete": "e2e: restored elsewhere"}
    ).metadata.name
    plain = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [annotated, plain])
    wait_refused(delete_claim(kube.client, ns, plain, dry_run=True), "cache sees the pod")

    assert deny(delete_claim(kube.client, ns, annotated)) is None
    sre = kube.impersonating("alice", ["sre-oncall", "system:masters"])
    assert deny(delete_claim(sre, ns, plain)) is None
    for claim in (annotated, plain):
        k.wait_for(
            has_event(kube, ns, claim, "PruneOverridden"), what=f"PruneOverridden on {claim}"
        )
    # Allowed, so pvc-protection now holds them Terminating until the pod goes.
    assert claim_terminating(kube, ns, annotated)


def test_an_exemption_allows_with_an_event_and_a_metric(
    kube: Cluster, clean: str, node: str, webhook: Webhook
) -> None:
    """A mounted claim the policy exempts is deleted, not silently: a PruneExempted Event on it
    (its message names the exemption) and an `exempted` decision in /metrics."""
    ns = clean
    exempt = k.make_claim(kube.client, ns, labels={EXEMPT_LABEL: "true"}).metadata.name
    plain = k.make_claim(kube.client, ns).metadata.name
    k.make_pod(kube.client, ns, node, [exempt, plain])
    wait_refused(delete_claim(kube.client, ns, plain, dry_run=True), "cache sees the pod")

    assert deny(delete_claim(kube.client, ns, exempt)) is None
    (event, *_) = k.wait_for(
        has_event(kube, ns, exempt, "PruneExempted"), what=f"PruneExempted on {exempt}"
    )
    assert EXEMPT_REASON in event.message and "CLAIM_MOUNTED" in event.message
    assert event.type == "Warning"
    _status, text = webhook.get("/metrics")
    assert 'prune_gate_webhook_decisions_total{code="CLAIM_MOUNTED",outcome="exempted"}' in text


def test_crd_with_custom_resources_is_refused(kube: Cluster, webhook: Webhook) -> None:
    group = f"e2e{uuid.uuid4().hex[:6]}.prune-gate.io"
    crd_name = f"backups.{group}"
    ext: Any = client.ApiextensionsV1Api(kube.client)
    ext.create_custom_resource_definition(k.crd_body(group, "Backup", "backups", "Cluster"))
    custom: Any = client.CustomObjectsApi(kube.client)
    try:
        body = {"apiVersion": f"{group}/v1", "kind": "Backup", "metadata": {"name": "nightly"}}
        create = lambda: custom.create_cluster_custom_object(group, "v1", "backups", body)  # noqa: E731
        k.wait_for(lambda: _created(create), timeout=30, what="the CRD to be served")
        refused = wait_refused(
            lambda: ext.delete_custom_resource_definition(crd_name, dry_run="All"),
            "the CRD deletion to be refused",
        )
        reason, message = refusal_reason(refused)
        assert reason == "CRD_HOLDS_RESOURCES"
        assert "1 custom resource" in message

        custom.delete_cluster_custom_object(group, "v1", "backups", "nightly")
        k.wait_for(
            lambda: (
                deny(lambda: ext.delete_custom_resource_definition(crd_name, dry_run="All")) is None
            ),
            what="the emptied CRD to be deletable",
        )
    finally:
        ext.delete_custom_resource_definition(crd_name)


def _created(create: Callable[[], Any]) -> bool:
    try:
        create()
    except ApiException as exc:
        if exc.status == 404:
            return False  # the CRD is not served yet
        raise
    return True
