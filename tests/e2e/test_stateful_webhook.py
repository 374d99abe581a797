"""A database operator's cluster guarded at the webhook door, against the real control plane.

The webhook (the `webhook` fixture: served and registered with the default guarded kinds) was
registered before any CloudNativePG CRD existed: its rules name `clusters.postgresql.cnpg.io`
from the stateful catalogue, and the API server took them. Once a CRD serves the kind, a
deployer's prune of an unretired `Cluster` is refused with NOT_RETIRED, as a claim's is, and
allowed once the live object carries the retire annotation. A minimal CRD stands in for the
operator's (schemaless: the webhook reads only metadata); no operator runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import kube as k
from .kube import Cluster
from .webhookserver import DEPLOYER, RETIRE, Webhook, deny, refusal_reason

pytestmark = pytest.mark.e2e

GROUP, KIND, PLURAL = "postgresql.cnpg.io", "Cluster", "clusters"
CRD = f"{PLURAL}.{GROUP}"


def _registered_resources(kube: Cluster, hook: Webhook) -> set[tuple[str, str]]:
    """(group, resource) of every rule the API server holds for the webhook."""
    admission: Any = client.AdmissionregistrationV1Api(kube.client)
    config = admission.read_validating_webhook_configuration(hook.registration)
    return {
        (group, resource)
        for entry in config.webhooks
        for rule in entry.rules or []
        for group in rule.api_groups
        for resource in rule.resources
    }


def _served(create: Callable[[], Any]) -> bool:
    """Create the object; False while the new CRD is not served yet (404)."""
    try:
        create()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _decided(call: Callable[[], Any]) -> ApiException | None:
    """The webhook's refusal of a call, or None. A webhook that answers nothing yet (its cache
    lists the kind the new CRD serves, and it says 503 until the list is in: the API server
    reports a failed call) counts as undecided, so a wait retries it."""
    try:
        return deny(call)
    except ApiException as exc:
        if exc.status == 500 and "failed calling webhook" in str(exc.body):
            return None
        raise


@contextlib.contextmanager
def _cnpg_crd(kube: Cluster) -> Iterator[Any]:
    """The CRD, installed for the test; on the way out its Clusters are deleted by a person (no
    prune: allowed), and the CRD once the webhook lets it go (no custom resource left), each
    waited for on the API server's state."""
    ext: Any = client.ApiextensionsV1Api(kube.client)
    custom: Any = client.CustomObjectsApi(kube.client)
    assert k.gone(ext.read_custom_resource_definition, CRD), f"{CRD} exists: a leftover?"
    ext.create_custom_resource_definition(k.crd_body(GROUP, KIND, PLURAL, "Namespaced"))
    try:
        yield custom
    finally:
        for item in custom.list_cluster_custom_object(GROUP, "v1", PLURAL)["items"]:
            meta = item["metadata"]
            k.delete_if_present(
                custom.delete_namespaced_custom_object,
                GROUP,
                "v1",
                meta["namespace"],
                PLURAL,
                meta["name"],
            )
        k.wait_for(
            lambda: not custom.list_cluster_custom_object(GROUP, "v1", PLURAL)["items"],
            what="no Cluster left",
        )
        k.wait_for(
            lambda: deny(lambda: ext.delete_custom_resource_definition(CRD, dry_run="All")) is None,
            what=f"CRD {CRD} deletable",
        )
        k.delete_if_present(ext.delete_custom_resource_definition, CRD)
        k.wait_for(lambda: k.gone(ext.read_custom_resource_definition, CRD), what=f"{CRD} gone")


def test_a_deployers_prune_of_an_unretired_cnpg_cluster_is_refused_until_it_is_retired(
    kube: Cluster, namespace: str, webhook: Webhook
) -> None:
    ext: Any = client.ApiextensionsV1Api(kube.client)
    assert k.gone(ext.read_custom_resource_definition, CRD)
    # Registered with no CRD serving the kind: the API server accepted a rule naming it.
    assert (GROUP, PLURAL) in _registered_resources(kube, webhook)
    assert (GROUP, f"{PLURAL}/status") in _registered_resources(kube, webhook)

    with _cnpg_crd(kube) as custom:
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": KIND,
            "metadata": {"name": "pg"},
            "spec": {"instances": 3, "storage": {"size": "10Gi"}},
        }
        create = lambda: custom.create_namespaced_custom_object(  # noqa: E731
            GROUP, "v1", namespace, PLURAL, body
        )
        k.wait_for(lambda: _served(create), what=f"{CRD} served")
        deployer: Any = client.CustomObjectsApi(kube.impersonating(DEPLOYER))

        def prune(dry_run: bool) -> Callable[[], Any]:
            kwargs = {"dry_run": "All"} if dry_run else {}
            return lambda: deployer.delete_namespaced_custom_object(
                GROUP, "v1", namespace, PLURAL, "pg", **kwargs
            )

        refused = k.wait_for(lambda: _decided(prune(True)), what="the dry-run prune decided")
        assert refusal_reason(refused)[0] == "NOT_RETIRED"
        again = deny(prune(False))
        assert again is not None, "the deployer deleted an unretired Cluster"
        reason, message = refusal_reason(again)
        assert reason == "NOT_RETIRED"
        assert "Cluster" in message and "CloudNativePG" in message and RETIRE in message, message
        live = custom.get_namespaced_custom_object(GROUP, "v1", namespace, PLURAL, "pg")
        assert "deletionTimestamp" not in live["metadata"]

        custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            namespace,
            PLURAL,
            "pg",
            {"metadata": {"annotations": {RETIRE: "e2e: data moved to pg-next"}}},
        )
        assert deny(prune(False)) is None
        read = custom.get_namespaced_custom_object
        k.wait_for(
            lambda: k.gone(read, GROUP, "v1", namespace, PLURAL, "pg"), what="Cluster pg gone"
        )
