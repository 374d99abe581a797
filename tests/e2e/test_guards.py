"""The deployer cannot switch prune-gate's own guards off: the fence Lease, the registration.

Against the real API server and the real webhook (`serve_webhook`): the fence Lease is held with
`gate fence hold` (which records the Kubernetes user holding it), then a deployer and another user
try to delete, clear, backdate and shorten it, and the holder renews and releases it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gate.engine.fence import HOLDER_USER

from . import kube as k
from .kube import Cluster
from .test_live import run_gate
from .webhookserver import DEPLOYER, Webhook, deny, events, refusal_reason, registered

pytestmark = pytest.mark.e2e


def _fence(kube: Cluster, hook: Webhook, tmp: Path, *args: str) -> Any:
    lease = f"{hook.fence_namespace}/{hook.fence_name}"
    return run_gate(tmp, "fence", *args, "--lease", lease, f"--kubeconfig={kube.kubeconfig}")


def _read(kube: Cluster, hook: Webhook) -> Any:
    return k.coordination(kube.client).read_namespaced_lease(hook.fence_name, hook.fence_namespace)


def _patch(api: Any, hook: Webhook, spec: dict[str, Any]) -> Callable[[], Any]:
    return lambda: k.coordination(api).patch_namespaced_lease(
        hook.fence_name, hook.fence_namespace, {"spec": spec}
    )


def _delete(api: Any, hook: Webhook, dry_run: bool = False) -> Callable[[], Any]:
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    return lambda: k.coordination(api).delete_namespaced_lease(
        hook.fence_name, hook.fence_namespace, **kwargs
    )


def _tampered(call: Callable[[], Any]) -> str:
    exc = deny(call)
    assert exc is not None, "allowed"
    reason, message = refusal_reason(exc)
    assert reason == "GUARD_TAMPERED", message
    return message


def test_the_fence_lease_is_guarded(kube: Cluster, webhook: Webhook, tmp_path: Path) -> None:
    held = _fence(kube, webhook, tmp_path, "hold", "--holder", "aaa111")
    assert held.returncode == 0, held.stderr
    me = k.authentication(kube.client).create_self_subject_review({}).status.user_info.username
    lease = _read(kube, webhook)
    assert lease.metadata.annotations[HOLDER_USER] == me
    before = (lease.spec.holder_identity, lease.spec.lease_duration_seconds, lease.spec.renew_time)

    deployer = kube.impersonating(DEPLOYER)
    first = k.wait_for(lambda: deny(_delete(deployer, webhook, dry_run=True)), what="a refusal")
    assert refusal_reason(first)[0] == "GUARD_TAMPERED"
    assert f"by deployer {DEPLOYER} refused" in _tampered(_delete(deployer, webhook))
    assert "by deployer" in _tampered(_patch(deployer, webhook, {"holderIdentity": None}))

    eve = kube.impersonating("eve", ["system:masters"])
    assert "clears its holderIdentity" in _tampered(_patch(eve, webhook, {"holderIdentity": None}))
    assert "moves renewTime/acquireTime back" in _tampered(
        _patch(eve, webhook, {"renewTime": "2020-01-01T00:00:00.000000Z"})
    )
    assert "shortens leaseDurationSeconds from 1800 to 1" in _tampered(
        _patch(eve, webhook, {"leaseDurationSeconds": 1})
    )
    assert "deletes it" in _tampered(_delete(eve, webhook))
    lease = _read(kube, webhook)
    assert (lease.spec.holder_identity, lease.spec.lease_duration_seconds) == before[:2]
    assert lease.spec.renew_time == before[2]

    def tampered_events() -> list[Any]:
        return events(kube, webhook.fence_namespace, webhook.fence_name, "GuardTampered")

    k.wait_for(lambda: len(tampered_events()) >= 6, what="six GuardTampered Events")
    found = tampered_events()
    assert any("by deployer" in e.message for e in found)
    assert any("eve" in e.message for e in found)

    renewed = _fence(kube, webhook, tmp_path, "hold", "--holder", "aaa111")  # the holder renews
    assert renewed.returncode == 0, renewed.stderr
    released = _fence(kube, webhook, tmp_path, "release", "--holder", "aaa111")
    assert released.returncode == 0, released.stderr
    assert released.stdout.endswith("is not held\n")
    assert _read(kube, webhook).spec.holder_identity is None
    # A free fence may be removed by anyone but a deployer.
    assert "by deployer" in _tampered(_delete(deployer, webhook))
    assert deny(_delete(eve, webhook)) is None


def test_break_glass_removes_a_held_fence_with_an_event(
    kube: Cluster, webhook: Webhook, tmp_path: Path
) -> None:
    held = _fence(kube, webhook, tmp_path, "hold", "--holder", "bbb222")
    assert held.returncode == 0, held.stderr
    sre = kube.impersonating("alice", ["sre-oncall", "system:masters"])
    k.wait_for(lambda: deny(_delete(sre, webhook, dry_run=True)) is None, what="break-glass")
    assert deny(_delete(sre, webhook)) is None
    found = k.wait_for(
        lambda: events(kube, webhook.fence_namespace, webhook.fence_name, "GuardOverridden"),
        what="a GuardOverridden Event",
    )
    assert found[0].message.startswith("allowed by break-glass group sre-oncall")
    assert "alice" in found[0].message


#: Every webhook-configuration and policy resource, and (the control) ConfigMaps.
RULES = [
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "apiVersions": ["*"],
        "operations": ["*"],
        "resources": ["*"],
    },
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["configmaps"],
    },
]


def _vwc(name: str, namespace: str) -> dict[str, Any]:
    """A fail-closed webhook at an address nobody serves, over webhook configurations and over
    the ConfigMaps of one namespace (the control: it shows the webhook is in force)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "nobody.prune-gate.io",
                "clientConfig": {"url": "https://127.0.0.1:9/validate"},
                "rules": RULES,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 2,
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": [namespace],
                        }
                    ]
                },
            }
        ],
    }


def _configmap_refused(kube: Cluster, namespace: str) -> bool:
    body = {"metadata": {"generateName": "probe-"}, "data": {}}
    try:
        k.core(kube.client).create_namespaced_config_map(namespace, body, dry_run="All")
    except ApiException as exc:
        return exc.status in (403, 422, 500)
    return False


def test_platform_limit_no_admission_guards_webhook_configurations(
    kube: Cluster, namespace: str
) -> None:
    """The API server calls no webhook for ValidatingWebhookConfiguration objects (exempt, so a
    broken webhook cannot lock its own configuration): the webhook cannot refuse its own deletion.
    A ValidatingAdmissionPolicy does apply to them, but not to its own binding, so it only moves
    the problem. prune-gate therefore detects a deleted or rewritten registration."""
    adm = kube.client
    name = k.unique("e2e-nobody")
    victim = k.unique("e2e-victim")
    api: Any = client.AdmissionregistrationV1Api(adm)
    api.create_validating_webhook_configuration(_vwc(victim, "no-such-namespace"))
    api.create_validating_webhook_configuration(_vwc(name, namespace))
    try:
        k.wait_for(lambda: _configmap_refused(kube, namespace), what="the webhook in force")
        # The same fail-closed webhook matches every admissionregistration resource, yet:
        api.patch_validating_webhook_configuration(victim, {"metadata": {"labels": {"x": "y"}}})
        api.delete_validating_webhook_configuration(victim)
        assert k.gone(api.read_validating_webhook_configuration, victim)
    finally:
        k.delete_if_present(api.delete_validating_webhook_configuration, name)
        k.delete_if_present(api.delete_validating_webhook_configuration, victim)

    policy, binding = k.unique("e2e-deny-all"), k.unique("e2e-deny-all")
    victim = k.unique("e2e-victim")
    api.create_validating_webhook_configuration(_vwc(victim, "no-such-namespace"))
    api.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": RULES},
                "validations": [{"expression": "false", "message": "e2e: deny everything"}],
            },
        }
    )
    api.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": binding},
            "spec": {
                "policyName": policy,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "In",
                                "values": [namespace],
                            }
                        ]
                    }
                },
            },
        }
    )
    try:
        k.wait_for(lambda: _configmap_refused(kube, namespace), what="the policy in force")
        # A ValidatingAdmissionPolicy, unlike a webhook, IS applied to webhook configurations
        # (kube-apiserver v1.34): it refuses the delete ...
        try:
            api.delete_validating_webhook_configuration(victim)
        except ApiException as exc:
            assert "e2e: deny everything" in str(exc.body)
        else:
            raise AssertionError("the policy did not guard the webhook configuration")
        # ... but not its own binding: whoever may delete bindings switches it off.
        api.delete_validating_admission_policy_binding(binding)
        k.wait_for(lambda: not _configmap_refused(kube, namespace), what="the policy gone")
    finally:
        k.delete_if_present(api.delete_validating_admission_policy_binding, binding)
        k.delete_if_present(api.delete_validating_admission_policy, policy)
        k.delete_if_present(api.delete_validating_webhook_configuration, victim)


def _tampered_count(hook: Webhook) -> float:
    status, text = hook.get("/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith("prune_gate_webhook_configuration_tampered_total "):
            return float(line.split()[1])
    raise AssertionError("no prune_gate_webhook_configuration_tampered_total on /metrics")


def test_a_deleted_or_weakened_registration_is_noticed_and_restored(
    kube: Cluster, webhook: Webhook
) -> None:
    api: Any = client.AdmissionregistrationV1Api(kube.client)
    name = webhook.registration
    before = _tampered_count(webhook)
    api.delete_validating_webhook_configuration(name)
    k.wait_for(lambda: _tampered_count(webhook) > before, what="the deletion counted")
    k.wait_for(lambda: registered(kube, name), what="the registration restored")

    counted = _tampered_count(webhook)
    api.patch_validating_webhook_configuration(
        name,
        [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}],
    )
    k.wait_for(lambda: _tampered_count(webhook) > counted, what="the patch counted")
    k.wait_for(
        lambda: (
            api.read_validating_webhook_configuration(name).webhooks[0].failure_policy == "Fail"
        ),
        what="failurePolicy restored to Fail",
    )
    found = k.wait_for(
        lambda: events(kube, "default", name, "ConfigurationTampered"), what="Events"
    )
    text = " ".join(e.message for e in found)
    assert "the configuration was deleted" in text
    assert "failurePolicy changed" in text
    assert "registering it again" in text


def test_the_charts_selfwatch_rbac_reads_only_its_registration(
    kube: Cluster, webhook: Webhook
) -> None:
    """The chart grants get/list/watch on one configuration by resourceName: a list or watch
    works with a metadata.name field selector (what the self-watch sends), and only then."""
    from tests.unit.test_chart import one, render

    role = one(render(), "ClusterRole", "pg-prune-gate-selfwatch")
    role["metadata"] = {"name": k.unique("e2e-selfwatch")}
    role["rules"][0]["resourceNames"] = [webhook.registration]
    rbac: Any = client.RbacAuthorizationV1Api(kube.client)
    rbac.create_cluster_role(role)
    sa = "system:serviceaccount:prune-gate:selfwatch-e2e"
    binding: dict[str, Any] = {
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "User", "name": sa}],
    }
    rbac.create_cluster_role_binding(binding)
    try:
        api: Any = client.AdmissionregistrationV1Api(kube.impersonating(sa))
        selector = f"metadata.name={webhook.registration}"
        listed = k.wait_for(
            lambda: _try(
                lambda: api.list_validating_webhook_configuration(field_selector=selector)
            ),
            what="the role in force",
        )
        assert [i.metadata.name for i in listed.items] == [webhook.registration]
        with pytest.raises(ApiException) as denied:
            api.list_validating_webhook_configuration()
        assert denied.value.status == 403
    finally:
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        rbac.delete_cluster_role(role["metadata"]["name"])


def _try(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ApiException as exc:
        if exc.status != 403:
            raise
        return None


def test_nobody_takes_the_fence_first(kube: Cluster, webhook: Webhook, tmp_path: Path) -> None:
    """Issue 32, item 2: a deployer with Lease create rights created the fence held for a year in
    its own name (the fence entry did not cover CREATE), wedging every deployer prune and CI's
    `gate fence hold`. Against the real API server calling the webhook: the deployer's CREATE is
    refused, and so is a CREATE by another user that records CI's user as the holder or holds
    for a year; CI's `gate fence hold` then creates it."""
    leases = k.coordination(kube.client)
    ns, name = webhook.fence_namespace, webhook.fence_name
    k.delete_if_present(leases.delete_namespaced_lease, name, ns)  # free here: anyone may
    k.wait_for(lambda: k.gone(leases.read_namespaced_lease, name, ns), what="no fence Lease")
    ci = k.authentication(kube.client).create_self_subject_review({}).status.user_info.username
    stamp = k.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def wedge(user: str, seconds: int) -> dict[str, Any]:
        spec = {"holderIdentity": "mine", "leaseDurationSeconds": seconds, "renewTime": stamp}
        return {"metadata": {"name": name, "annotations": {HOLDER_USER: user}}, "spec": spec}

    def create(api: Any, body: dict[str, Any], dry_run: bool = False) -> Callable[[], Any]:
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return lambda: k.coordination(api).create_namespaced_lease(ns, body, **kwargs)

    deployer = kube.impersonating(DEPLOYER)
    a_year = wedge(DEPLOYER, 365 * 24 * 3600)
    k.wait_for(lambda: deny(create(deployer, a_year, dry_run=True)), what="a refusal")
    assert f"CREATE of the speculation fence Lease {ns}/{name} by deployer" in _tampered(
        create(deployer, a_year)
    )
    assert k.gone(leases.read_namespaced_lease, name, ns)

    eve = kube.impersonating("eve", ["system:masters"])
    assert f"records {ci} as the fence's holder user" in _tampered(create(eve, wedge(ci, 1800)))
    assert "more than 24h from now" in _tampered(create(eve, wedge("eve", 365 * 24 * 3600)))
    assert k.gone(leases.read_namespaced_lease, name, ns)

    held = _fence(kube, webhook, tmp_path, "hold", "--holder", "ccc333")
    assert held.returncode == 0, held.stderr
    assert _read(kube, webhook).metadata.annotations[HOLDER_USER] == ci
    released = _fence(kube, webhook, tmp_path, "release", "--holder", "ccc333")
    assert released.returncode == 0, released.stderr
