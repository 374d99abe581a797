"""A candidate may not have its deployer apply as an identity the webhook does not guard.

kustomize-controller and helm-controller impersonate `spec.serviceAccountName` (Flux
multi-tenancy). The webhook's guards (the speculation fence, NOT_RETIRED for deployers, the
disposable marks, the fence Lease) bind only the identities `webhook.deployers` lists, so a
candidate that ships a ServiceAccount and points its Kustomization at it would prune past them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gate.engine.policy import Policy
from gate.model.findings import Code, Severity
from tests.unit.helpers import run

FLUX = "system:serviceaccount:flux-system:kustomize-controller"
POLICY = replace(Policy(), webhook=replace(Policy().webhook, deployers=(FLUX,)))


def kustomization(kind: str = "Kustomization", account: str | None = None) -> str:
    group = (
        "kustomize.toolkit.fluxcd.io/v1" if kind == "Kustomization" else "helm.toolkit.fluxcd.io/v2"
    )
    spec = f"\n  serviceAccountName: {account}" if account else ""
    return f"""\
apiVersion: {group}
kind: {kind}
metadata: {{name: apps, namespace: tenant}}
spec:
  interval: 10m{spec}
"""


def tampered(base: str, head: str, policy: Policy = POLICY) -> list[str]:
    result = run(base, head, policy=policy)
    return [
        f.message
        for f in result.decision.findings
        if f.code is Code.GUARD_TAMPERED and f.severity is Severity.BLOCK
    ]


@pytest.mark.parametrize("kind", ["Kustomization", "HelmRelease"])
def test_a_candidate_that_points_its_deployer_at_an_unlisted_account_is_refused(kind: str) -> None:
    found = tampered(kustomization(kind), kustomization(kind, "sneaky"))
    assert len(found) == 1
    assert "system:serviceaccount:tenant:sneaky" in found[0]
    assert "webhook.deployers does not list" in found[0]


def test_a_new_kustomization_with_an_unlisted_account_is_refused() -> None:
    (message,) = tampered("", kustomization(account="sneaky"))
    assert "system:serviceaccount:tenant:sneaky" in message


def test_a_listed_account_or_base_s_own_passes() -> None:
    listed = replace(
        POLICY,
        webhook=replace(POLICY.webhook, deployers=(FLUX, "system:serviceaccount:tenant:team")),
    )
    assert tampered(kustomization(), kustomization(account="team"), listed) == []
    same = kustomization(account="legacy")
    assert tampered(same, same) == []  # base's account is merged: not the candidate's choice


def test_without_deployers_there_is_nothing_to_escape() -> None:
    assert tampered(kustomization(), kustomization(account="sneaky"), Policy()) == []


def test_a_kubeconfig_the_candidate_adds_is_refused() -> None:
    """`spec.kubeConfig` has the controller apply with a Secret's credentials: an identity no
    policy can name."""
    head = kustomization() + "  kubeConfig: {secretRef: {name: elsewhere}}\n"
    (message,) = tampered(kustomization(), head)
    assert "spec.kubeConfig" in message
    assert tampered(head, head) == []  # base's is merged


@pytest.mark.parametrize(
    ("api", "kind"),
    [("fluxcd.controlplane.io/v1", "ResourceSet"), ("kappctrl.k14s.io/v1alpha1", "App")],
)
def test_other_impersonating_kinds_are_judged_alike(api: str, kind: str) -> None:
    text = (
        kustomization(account="sneaky")
        .replace("kustomize.toolkit.fluxcd.io/v1", api)
        .replace("kind: Kustomization", f"kind: {kind}")
    )
    (message,) = tampered("", text)
    assert "system:serviceaccount:tenant:sneaky" in message
