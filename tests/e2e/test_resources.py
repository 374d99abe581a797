"""Every resource the webhook can register for is one the real API server serves (issue 9: one
resource table, never a guessed plural).

A rule naming a resource the server does not have is accepted by the API server and matches
nothing: the kind goes unguarded with no error anywhere. So the table (gate/resources.py), as
the chart and `gate webhook serve --register` name it, is checked against the real discovery.
"""

from __future__ import annotations

import pytest

from gate.policy import policy_from_dict
from gate.resources import RESOURCES
from tests.unit.test_chart import render, webhook_of
from webhook.register import rules_for

from .kube import Cluster

pytestmark = pytest.mark.e2e


def _served(kube: Cluster) -> set[tuple[str, str]]:
    """(group, plural) of every resource the API server serves, from `kubectl api-resources`."""
    out = kube.kubectl("api-resources", "--no-headers", "-o", "name").stdout.split()
    return {(group, plural) for plural, _, group in (n.partition(".") for n in out)}


def test_every_registered_resource_is_served_by_the_real_api_server(kube: Cluster) -> None:
    served = _served(kube)
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
    defaults = webhook_of(render())["rules"]
    named = {(g, res) for rule in defaults for g in rule["apiGroups"] for res in rule["resources"]}
    assert named <= served, sorted(named - served)
