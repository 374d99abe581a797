"""Every resource the webhook can register for is one the real API server serves (issue 9: one
resource table, never a guessed plural).

A rule naming a resource the server does not have is accepted by the API server and matches
nothing: the kind goes unguarded with no error anywhere. So the table (gate/kube/resources.py), as
the chart and `gate webhook serve --register` name it, is checked against the real discovery.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gate.kube.resources import RESOURCES
from gate.model.stateful import CATALOGUE
from gate.sources.policyfile import policy_from_dict
from tests.unit.test_chart import render, webhook_of
from webhook.register import rules_for

from . import kube as k
from .kube import Cluster
from .webhookserver import free_port, serve_and_fail, serve_webhook

pytestmark = pytest.mark.e2e


def _served(kube: Cluster) -> set[tuple[str, str]]:
    """(group, plural) of every resource the API server serves, from `kubectl api-resources`."""
    out = kube.kubectl("api-resources", "--no-headers", "-o", "name").stdout.split()
    return {(group, plural) for plural, _, group in (n.partition(".") for n in out)}


def _served_with_subresources(kube: Cluster) -> set[tuple[str, str]]:
    """(group, resource) of every resource and subresource (`namespaces/finalize`) the API
    server serves, from its discovery documents (`kubectl api-resources` lists no
    subresources)."""

    def listed(path: str) -> list[dict[str, Any]]:
        return list(json.loads(kube.kubectl("get", "--raw", path).stdout).get("resources") or [])

    found = {("", str(r["name"])) for r in listed("/api/v1")}
    groups = json.loads(kube.kubectl("get", "--raw", "/apis").stdout)["groups"]
    for group in groups:
        for version in group["versions"]:
            found |= {
                (str(group["name"]), str(r["name"]))
                for r in listed(f"/apis/{version['groupVersion']}")
            }
    return found


def test_every_registered_resource_is_served_by_the_real_api_server(kube: Cluster) -> None:
    """Subresources too: the rules name each guarded kind's `status`, and a Namespace's
    `finalize`, whose UPDATEs change metadata as the object's own would."""
    served = _served_with_subresources(kube)
    assert ("", "namespaces/finalize") in served
    # Optional APIs are served only where their CRDs are installed (VolumeSnapshots come with
    # the external snapshotter): the webhook watches them once their CRD appears.
    kinds = [f"{r.kind}.{r.group}" if r.group else r.kind for r in RESOURCES if not r.optional]
    policy = {"webhook": {"guardedKinds": kinds}}
    for rules in (
        rules_for(policy_from_dict(policy)),
        webhook_of(render({"policy": policy}))["rules"],
    ):
        named = {(g, res) for rule in rules for g in rule["apiGroups"] for res in rule["resources"]}
        assert named, rules
        assert named <= served, sorted(named - served)
    # The default rules name the stateful catalogue too, whose CRDs come with their operators:
    # inert until one is installed (tests/e2e/test_stateful_webhook.py installs one).
    # So do VolumeSnapshots (guarded by default at both doors), served once the external
    # snapshotter's CRDs are installed.
    catalogued = {k.group for k in CATALOGUE}
    optional = {
        (r.group, res) for r in RESOURCES if r.optional for res in (r.plural, f"{r.plural}/status")
    }
    defaults = webhook_of(render())["rules"]
    named = {(g, res) for rule in defaults for g in rule["apiGroups"] for res in rule["resources"]}
    builtin = {(g, res) for g, res in named if g not in catalogued} - optional
    assert builtin and builtin <= served, sorted(builtin - served)
    assert ("snapshot.storage.k8s.io", "volumesnapshots") in named
    assert named - builtin - optional == {
        (k.group, res) for k in CATALOGUE for res in (k.plural, f"{k.plural}/status")
    }


def test_register_names_a_guarded_custom_kind_by_discovery(kube: Cluster, tmp_path: Path) -> None:
    group = f"e2e{uuid.uuid4().hex[:6]}.prune-gate.io"
    ext: Any = client.ApiextensionsV1Api(kube.client)
    # Its plural is no kind + "s": a guess (`mouses`) would match nothing.
    ext.create_custom_resource_definition(k.crd_body(group, "Mouse", "mice"))
    try:
        k.wait_for(lambda: (group, "mice") in _served(kube), what="mice served")
        guarded = {"webhook": {"guardedKinds": ["PersistentVolumeClaim", f"Mouse.{group}"]}}
        with serve_webhook(kube, tmp_path, guarded) as hook:
            config = json.loads(
                kube.kubectl(
                    "get", "validatingwebhookconfiguration", hook.registration, "-o", "json"
                ).stdout
            )
        rules = config["webhooks"][0]["rules"]
        named = {(g, res) for rule in rules for g in rule["apiGroups"] for res in rule["resources"]}
        assert (group, "mice") in named, rules
    finally:
        k.delete_if_present(ext.delete_custom_resource_definition, f"mice.{group}")


def test_register_refuses_a_guarded_kind_the_server_does_not_serve(
    kube: Cluster, tmp_path: Path
) -> None:
    policy = tmp_path / "prune-gate.yaml"
    policy.write_text(json.dumps({"webhook": {"guardedKinds": ["Mouse.absent.prune-gate.io"]}}))
    result = serve_and_fail(
        kube,
        f"prune-gate-e2e-{uuid.uuid4().hex[:6]}",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--config",
        str(policy),
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "Mouse.absent.prune-gate.io has no known resource name" in result.stderr
    assert "install its CRD first" in result.stderr
