"""`gate webhook verify`: is the installed webhook armed, and does the API server refuse through it?

The chart's `helm test` runs it. Registered is not enough: the configuration is created with
failurePolicy Ignore and a webhook pod arms it (webhook.arm) once Ready, so until then a
deletion the webhook cannot answer goes through. This asks the API server itself: in a namespace
of its own it makes a claim and a pod that mounts it (bound to a node that cannot exist, so
nothing ever runs it: pvc-protection counts a scheduled pod in any phase), asks for the claim's
deletion as a dry run, and passes only when the answer is the webhook's CLAIM_MOUNTED refusal.
It then removes what it made (the pod at once: no kubelet would finish it; then the claim and
the namespace, which the webhook allows once it has seen the pod go).

Exit codes as everywhere: 0 armed and refusing, 1 not (what is missing and the fix), 2 could not
decide (the API server refused what verify needs: RBAC, or unreachable).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gate.kube.client import ApiStatusError, KubeClient, NotFoundError
from gate.model.errors import ClusterError

#: The node the holder pod is bound to: `.invalid` is reserved (RFC 2606), so no node has it and
#: no kubelet ever runs the pod.
NO_NODE = "prune-gate-verify.invalid"
#: Labels on what verify makes, so a leftover is easy to find (`kubectl get ns -l ...`).
LABELS = {"app.kubernetes.io/managed-by": "prune-gate-verify"}
CLAIM, POD = "verify-data", "verify-holder"
CODE = "CLAIM_MOUNTED"
#: The least time the removal gets, whatever `timeout` says: the webhook allows the claim's and
#: the namespace's deletion only once its cache has seen the pod go, which a loaded cluster may
#: take seconds to do, and a short `timeout` must not leave the test's objects behind.
REMOVAL_SECONDS = 120.0
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@dataclass(frozen=True)
class Outcome:
    """What verify found: `ok`, and the lines that say why (evidence first, then the fix)."""

    ok: bool
    lines: tuple[str, ...]


@dataclass
class Clock:
    """Time and waiting, injectable; verify waits only for the cluster to catch up."""

    now: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep


def _failure_policies(kube: KubeClient, name: str) -> list[tuple[str, str]]:
    """(webhook name, failurePolicy) of each entry of the configuration; [] when there is none.
    An absent failurePolicy is the API server's default, Fail."""
    config = kube.get(f"{CONFIGURATIONS}/{name}", f"read ValidatingWebhookConfiguration {name}")
    hooks = [h for h in (config or {}).get("webhooks") or [] if isinstance(h, dict)]
    return [(str(h.get("name")), str(h.get("failurePolicy") or "Fail")) for h in hooks]


def wait_armed(
    kube: KubeClient, name: str, deadline: float, clock: Clock, expected: str = "Fail"
) -> Outcome:
    """Every webhook of the configuration `name` has failurePolicy `expected` (Fail: armed),
    waiting until `deadline` (a pod arms it once Ready)."""
    while True:
        policies = _failure_policies(kube, name)
        unarmed = [w for w, policy in policies if policy != expected]
        if policies and not unarmed:
            state = "armed" if expected == "Fail" else "registered, as asked"
            return Outcome(True, (f"{state}: ValidatingWebhookConfiguration {name}, "
                                  f"failurePolicy {expected} on every webhook",))  # fmt: skip
        if clock.now() >= deadline:
            break
        clock.pause(1.0)
    if not policies:
        return Outcome(False, (
            f"not installed: no ValidatingWebhookConfiguration {name}",
            "fix: install the chart (helm upgrade --install), or name the configuration with "
            "--configuration",
        ))  # fmt: skip
    return Outcome(False, (
        f"not armed: failurePolicy of {', '.join(unarmed)} is not {expected} in "
        f"ValidatingWebhookConfiguration {name}, so a deletion the webhook cannot answer goes "
        "through",
        "why: a webhook pod arms it once Ready and serving a certificate the caBundle verifies",
        "fix: kubectl -n NAMESPACE rollout status deployment/FULLNAME; its logs say why it is not "
        "Ready (see `kubectl get validatingwebhookconfiguration "
        f"{name} -o jsonpath='{{.webhooks[*].failurePolicy}}'`)",
    ))  # fmt: skip


def _make(kube: KubeClient, namespace_prefix: str) -> str:
    """A namespace of its own, a claim that is never provisioned (nothing is stored, nothing is
    lost) and a pod bound to NO_NODE that mounts it."""
    meta = {"generateName": f"{namespace_prefix}-", "labels": LABELS}
    made = kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": meta}, "create a namespace")  # fmt: skip
    ns = str(made["metadata"]["name"])
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "labels": LABELS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Mi"}},
            "storageClassName": "",
        },
    }
    kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim, f"create claim {CLAIM}")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "labels": LABELS},
        "spec": {
            "nodeName": NO_NODE,
            "containers": [{
                "name": "never-runs",
                "image": "registry.k8s.io/pause:3.10",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}],
        },
    }  # fmt: skip
    kube.create(f"/api/v1/namespaces/{ns}/pods", pod, f"create pod {POD}")
    return ns


def _refusal(kube: KubeClient, ns: str, webhooks: list[str]) -> tuple[bool, str]:
    """Ask for the claim's deletion as a dry run: (refused with CODE by one of `webhooks`, the
    configuration's, not another that happens to guard claims too; the answer)."""
    path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}"
    try:
        kube.delete(path, f"delete claim {ns}/{CLAIM} (dry run)", dry_run=True)
    except ApiStatusError as exc:
        message = str(exc)
        ours = any(f'admission webhook "{w}" denied' in message for w in webhooks)
        return exc.status == 403 and CODE in message and ours, message
    return False, "allowed (deleted, as a dry run)"


def _remove(kube: KubeClient, ns: str, deadline: float, clock: Clock) -> list[str]:
    """Remove the pod (at once), then the claim and the namespace: the webhook refuses both
    while the claim is mounted (and a namespace that holds a claim), so each is asked again until
    the webhook has seen the one before go. What is left is said, with the command to remove it."""
    steps: list[tuple[str, Callable[[], Any]]] = [
        (f"pod {ns}/{POD}", lambda: kube.delete(f"/api/v1/namespaces/{ns}/pods/{POD}",
                                                f"delete pod {POD}", grace_period=0)),
        (f"claim {ns}/{CLAIM}", lambda: kube.delete(
            f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}", f"delete claim {CLAIM}")),
        (f"namespace {ns}", lambda: kube.delete(f"/api/v1/namespaces/{ns}",
                                                f"delete namespace {ns}")),
    ]  # fmt: skip
    for what, delete in steps:
        while True:
            try:
                delete()
                break
            except NotFoundError:
                break
            except ClusterError as exc:
                last = str(exc)
            if clock.now() >= deadline:
                return [f"left behind: {what} ({last}); delete it: kubectl delete ns {ns} "
                        "(a pod with --grace-period=0 --force: no kubelet runs it)"]  # fmt: skip
            clock.pause(1.0)
    return []


def verify(
    kube: KubeClient,
    configuration: str,
    *,
    timeout: float,
    namespace_prefix: str = "prune-gate-verify",
    failure_policy: str = "Fail",
    clock: Clock | None = None,
) -> Outcome:
    """Armed, then refusing a mounted claim's deletion through the API server, within `timeout`
    seconds each (the removal after gets at least REMOVAL_SECONDS). A request verify needs that the
    API server refuses (RBAC, unreachable) raises ClusterError: could not decide."""
    clock = clock or Clock()
    armed = wait_armed(kube, configuration, clock.now() + timeout, clock, failure_policy)
    if not armed.ok:
        return armed
    webhooks = [name for name, _ in _failure_policies(kube, configuration)]
    ns = _make(kube, namespace_prefix)
    try:
        deadline = clock.now() + timeout
        while True:  # the webhook's cache sees the new pod within moments
            refused, answer = _refusal(kube, ns, webhooks)
            if refused or clock.now() >= deadline:
                break
            clock.pause(1.0)
    finally:
        left = _remove(kube, ns, clock.now() + max(timeout, REMOVAL_SECONDS), clock)
    if refused:
        lines = (*armed.lines, f"refusing: the dry-run deletion of mounted claim {ns}/{CLAIM} "
                 f"was refused with {CODE}", *left)  # fmt: skip
        return Outcome(True, lines)
    return Outcome(False, (
        *armed.lines,
        f"not refusing: the dry-run deletion of claim {ns}/{CLAIM}, mounted by pod {POD}, was "
        f"answered: {answer}",
        f"why: the API server did not call {', '.join(webhooks)} for it (its rules, "
        "namespaceSelector or objectSelector leave it out), or it allowed it (a refusal by "
        "another webhook does not count)",
        "fix: kubectl get validatingwebhookconfiguration "
        f"{configuration} -o yaml; the webhook's logs show each review it answered",
        *left,
    ))  # fmt: skip
