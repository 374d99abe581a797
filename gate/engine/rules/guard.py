"""Rules that keep the guards on: a deploy may not switch off what checks its own prunes.

Pure. The candidate may not delete or rewrite prune-gate's webhook configuration, fence Lease or
Deployment, nor have its deployer apply as an identity the webhook's guards do not bind; at the
API server, a deployer's guarded deletion waits while a speculative deploy holds the fence.
"""

from __future__ import annotations

from collections.abc import Iterator

from gate.engine.deployers import IMPERSONATING
from gate.engine.fence import FenceState, iso_time
from gate.engine.plan import Action, Change
from gate.engine.rules.common import finding
from gate.engine.rules.world import NAMESPACE, World, is_guarded, kind_of
from gate.model.findings import DOCS_SITE, Code, Finding, Severity, edit
from gate.model.objects import Inventory, Manifest
from gate.model.webhooks import GUARD_WEBHOOKS

#: The labels of the chart's webhook Deployment.
GUARD_LABELS = {"app.kubernetes.io/part-of": "prune-gate"}
_VWC = ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")
_LEASE = ("coordination.k8s.io", "Lease")
_DEPLOYMENT = ("apps", "Deployment")
_GUARD_KINDS = (_VWC, _LEASE, _DEPLOYMENT)


def _is_guard(m: Manifest, world: World) -> bool:
    """prune-gate's own guards: its webhook configuration, the fence Lease, its Deployment."""
    key = kind_of(m.ref)
    if key == _VWC:
        hooks = m.body.get("webhooks")
        return isinstance(hooks, list) and any(
            isinstance(h, dict) and h.get("name") in GUARD_WEBHOOKS for h in hooks
        )
    if key == _LEASE:
        return (m.ref.namespace, m.ref.name) == world.policy.webhook.fence
    if key == _DEPLOYMENT:
        return GUARD_LABELS.items() <= m.labels.items()
    return False


def _guards(side: Inventory, world: World) -> list[Manifest]:
    """The guards one side declares: only objects of the guards' kinds are looked at."""
    return [m for k in _GUARD_KINDS for m in side.of_kind(*k) if _is_guard(m, world)]


def check_guard_tampered(world: World) -> Iterator[Finding]:
    """GUARD_TAMPERED: the candidate deletes or rewrites prune-gate's own guards.

    A deploy that removes the webhook configuration, weakens it, takes the fence, or removes the
    webhook's Deployment or its namespace switches prune-gate off for every later prune. The
    webhook cannot refuse a change to its own configuration (the API server exempts it), so
    this is the door that must see it.
    """
    base_guards = _guards(world.base, world)
    guard_namespaces = {m.ref.namespace for m in base_guards if kind_of(m.ref) == _DEPLOYMENT}
    for m in world.base.of_kind(*NAMESPACE):
        if m.ref.name in guard_namespaces and world.head.get(m.ref) is None:
            yield _guard_finding(
                Change(m.ref, Action.DELETE, m, None, "removed from the manifests"),
                "deletes the namespace of prune-gate's webhook",
            )
    for ref in sorted({m.ref for m in (*base_guards, *_guards(world.head, world))}):
        base, head = world.base.get(ref), world.head.get(ref)
        if head is None:
            yield _guard_finding(
                Change(ref, Action.DELETE, base, None, "removed from the manifests"), "deletes it"
            )
        elif base is None or base.body != head.body:
            what = "declares it" if base is None else "changes it"
            yield _guard_finding(
                Change(ref, Action.UPDATE, base, head, "changed by the candidate"), what
            )


def _service_account(m: Manifest | None) -> str | None:
    name = m.spec.get("serviceAccountName") if m is not None else None
    return name if isinstance(name, str) and name else None


def check_deployer_identities(world: World) -> Iterator[Finding]:
    """GUARD_TAMPERED: the candidate has a Flux Kustomization or HelmRelease apply as a service
    account that `webhook.deployers` does not list.

    kustomize-controller and helm-controller impersonate `spec.serviceAccountName` to apply and
    prune (Flux multi-tenancy), and the webhook's guards (the fence, NOT_RETIRED for deployers,
    the marks a deployer may not write, the fence Lease itself) bind only the listed identities:
    a candidate that ships a ServiceAccount and points its Kustomization at it would prune and
    write past them. Only a new or changed name is judged (base's is merged), and only when the
    policy lists deployers at all."""
    deployers = set(world.policy.webhook.deployers)
    if not deployers:
        return
    # The parents whose controller impersonates `spec.serviceAccountName` to apply and prune
    # (kustomize-controller, helm-controller, flux-operator's ResourceSet, kapp-controller's
    # App), and whose `spec.kubeConfig` (Flux) swaps in a Secret's credentials.
    for group, kind in IMPERSONATING:
        for head in world.head.of_kind(group, kind):
            base = world.base.get(head.ref)
            kubeconfig = head.spec.get("kubeConfig")
            if kubeconfig is not None and kubeconfig != (base.spec if base else {}).get(
                "kubeConfig"
            ):
                yield _kubeconfig_finding(Change(head.ref, Action.UPDATE, base, head, "changed"))
            name = _service_account(head)
            if name is None or name == _service_account(base):
                continue
            user = f"system:serviceaccount:{head.ref.namespace}:{name}"
            if user in deployers:
                continue
            change = Change(head.ref, Action.UPDATE, base, head, "changed by the candidate")
            yield finding(
                Code.GUARD_TAMPERED,
                change,
                f"{head.ref.display()} would apply and prune as {user} (spec.serviceAccountName: "
                f"{name}), which webhook.deployers does not list: the webhook's guards bind only "
                "the listed deployers, so its prunes and writes would pass them",
                [
                    f"serviceAccountName: {_service_account(base) or 'none'} -> {name}",
                    f"webhook.deployers: {', '.join(sorted(deployers))}",
                ],
                f"keep spec.serviceAccountName as base has it; to deploy as {user}, a person "
                "first adds it to webhook.deployers (the chart's values and prune-gate.yaml, a "
                f"guard setting: {DOCS_SITE}merge-queue/#the-speculation-fence), then this "
                "change passes",
                [
                    edit(f"keep spec.serviceAccountName of {head.ref.display()} as base has it"),
                    edit(f"or: add {user} to webhook.deployers first, on its own"),
                ],
            )


def _kubeconfig_finding(change: Change) -> Finding:
    """GUARD_TAMPERED for a new or changed `spec.kubeConfig`: the controller applies and prunes
    with whatever identity the Secret's credentials are, which no policy can name."""
    return finding(
        Code.GUARD_TAMPERED,
        change,
        f"{change.ref.display()} would apply and prune with the credentials of a kubeconfig "
        "Secret (spec.kubeConfig, new or changed by the candidate): an identity webhook.deployers "
        "cannot name, so the webhook's guards would not bind its prunes",
        ["spec.kubeConfig: new or changed by the candidate"],
        "keep spec.kubeConfig as base has it; a person changes it outside the merge queue, once "
        "the identity it carries is listed in webhook.deployers",
        [edit(f"keep spec.kubeConfig of {change.ref.display()} as base has it")],
    )


def _guard_finding(change: Change, what: str) -> Finding:
    return finding(
        Code.GUARD_TAMPERED,
        change,
        f"{change.ref.display()} is one of prune-gate's own guards and the candidate {what}: "
        "a deploy may not switch off the guards that check its own prunes",
        [f"cause: {change.cause}"],
        "change prune-gate's webhook, fence or Deployment outside the guarded deploy (a "
        "person with `helm upgrade`), or exempt this object in prune-gate.yaml `exemptions` "
        "with a reason and an expiry",
        [
            edit(f"leave {change.ref.display()} out of this deploy; change it with helm upgrade"),
            edit("or: exempt it in prune-gate.yaml with a reason and an expiry"),
        ],
    )


def check_speculation_fence(change: Change, world: World) -> Iterator[Finding]:
    """SPECULATION_FENCE: a guarded deletion while a speculative deploy holds the fence.

    It runs only for requests by a deployer identity (its door is `deployer`), on the fence the
    webhook read (`World.fence`). A held fence blocks; an expired fence gives a warning that says
    it was not obeyed.
    """
    fence = world.fence
    if fence is None or not change.deletes or fence.lease is None:
        return
    if fence.state is FenceState.FREE:
        return
    if not is_guarded(change, world):
        return
    m = change.base or change.head
    lease = f"{fence.lease.namespace}/{fence.lease.name}"
    release = fence.lease.release_command()
    if fence.state is FenceState.HELD:
        yield Finding(
            code=Code.SPECULATION_FENCE,
            ref=change.ref,
            message=f"{change.ref.display()} may not be deleted by a deployer while the "
            f"speculation fence is held by candidate {fence.holder}: the candidate may be "
            "evicted and never merge",
            evidence=(fence.describe(), f"cause: {change.cause}"),
            remediation="let the deletion happen on the merged deploy (the deployer retries it "
            f"after Lease {lease} is released or expires); if candidate {fence.holder} is gone, "
            f"release the fence: {release.text}",
            actions=(
                edit("nothing to change: the merged deploy deletes it once the fence is free"),
                release,
            ),
            api_version=m.api_version if m else "",
        )
        return
    yield Finding(
        code=Code.SPECULATION_FENCE,
        ref=change.ref,
        message=f"the speculation fence held by {fence.holder} expired at "
        f"{iso_time(fence.expires)} and was not obeyed for {change.ref.display()}",
        evidence=(fence.describe(), f"cause: {change.cause}"),
        remediation="check the CI job that holds the fence: it should renew the Lease while it "
        f"deploys and release it after; remove a stale one: {release.text}",
        actions=(
            edit("make the job that holds the fence renew it while it deploys, release it after"),
            release,
        ),
        api_version=m.api_version if m else "",
        suggested=Severity.WARN,
    )
