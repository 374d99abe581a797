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

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The node the holder pod is bound to: `.invalid` is reserved (RFC 2606), so no node has it and
#: no kubelet ever runs the pod.
NO_NODE = "prune-gate-verify.invalid"
#: Labels on what verify makes, so a leftover is easy to find (`kubectl get ns -l ...`).
LABELS = {"app.kubernetes.io/managed-by": "prune-gate-verify"}
CLAIM, POD = "verify-data", "verify-holder"
CODE = "CLAIM_MOUNTED"


class VerifyError(Exception):
    """verify could not decide (exit 2): the API server refused a request it needs."""


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


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def _message(exc: Exception) -> str:
    """The API server's message in an error (its Status body), else the error as text."""
    body = getattr(exc, "body", None)
    try:
        return str(json.loads(str(body))["message"])
    except (TypeError, ValueError, KeyError):
        return str(body or exc)


def _failure_policies(admission: Any, name: str) -> list[tuple[str, str]]:
    try:
        config = admission.read_validating_webhook_configuration(name)
    except Exception as exc:
        if _status(exc) == 404:
            return []
        raise VerifyError(f"cannot read ValidatingWebhookConfiguration {name}: {exc}") from exc
    return [(w.name, w.failure_policy or "Fail") for w in (config.webhooks or [])]


def wait_armed(
    admission: Any, name: str, deadline: float, clock: Clock, expected: str = "Fail"
) -> Outcome:
    """Every webhook of the configuration `name` has failurePolicy `expected` (Fail: armed),
    waiting until `deadline` (a pod arms it once Ready)."""
    while True:
        policies = _failure_policies(admission, name)
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


def _make(core: Any, namespace_prefix: str) -> str:
    from kubernetes import client

    meta = client.V1ObjectMeta(generate_name=f"{namespace_prefix}-", labels=LABELS)
    ns = core.create_namespace(client.V1Namespace(metadata=meta)).metadata.name
    core.create_namespaced_persistent_volume_claim(
        ns,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=CLAIM, labels=LABELS),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Mi"}),
                storage_class_name="",  # never provisioned: nothing is stored, nothing is lost
            ),
        ),
    )
    volume = client.V1Volume(
        name="data",
        persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=CLAIM),
    )
    container = client.V1Container(
        name="never-runs",
        image="registry.k8s.io/pause:3.10",
        volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")],
    )
    core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=POD, labels=LABELS),
            spec=client.V1PodSpec(node_name=NO_NODE, containers=[container], volumes=[volume]),
        ),
    )
    return str(ns)


def _refusal(core: Any, ns: str, webhooks: list[str]) -> tuple[bool, str]:
    """Ask for the claim's deletion as a dry run: (refused with CODE by one of `webhooks`, the
    configuration's, not another that happens to guard claims too; the answer)."""
    try:
        core.delete_namespaced_persistent_volume_claim(CLAIM, ns, dry_run="All")
    except Exception as exc:
        message = _message(exc)
        ours = any(f'admission webhook "{w}" denied' in message for w in webhooks)
        return _status(exc) == 403 and CODE in message and ours, message
    return False, "allowed (deleted, as a dry run)"


def _remove(core: Any, ns: str, deadline: float, clock: Clock) -> list[str]:
    """Remove the pod (at once), then the claim and the namespace: the webhook refuses both
    while the claim is mounted (and a namespace that holds a claim), so each is asked again until
    the webhook has seen the one before go. What is left is said, with the command to remove it."""
    steps: list[tuple[str, Callable[[], Any]]] = [
        (f"pod {ns}/{POD}", lambda: core.delete_namespaced_pod(POD, ns, grace_period_seconds=0)),
        (f"claim {ns}/{CLAIM}", lambda: core.delete_namespaced_persistent_volume_claim(CLAIM, ns)),
        (f"namespace {ns}", lambda: core.delete_namespace(ns)),
    ]
    for what, delete in steps:
        while True:
            try:
                delete()
                break
            except Exception as exc:
                if _status(exc) == 404:
                    break
                last = _message(exc)
            if clock.now() >= deadline:
                return [f"left behind: {what} ({last}); delete it: kubectl delete ns {ns} "
                        "(a pod with --grace-period=0 --force: no kubelet runs it)"]  # fmt: skip
            clock.pause(1.0)
    return []


def verify(
    api: Any,
    configuration: str,
    *,
    timeout: float,
    namespace_prefix: str = "prune-gate-verify",
    failure_policy: str = "Fail",
    clock: Clock | None = None,
) -> Outcome:
    """Armed, then refusing a mounted claim's deletion through the API server, within `timeout`
    seconds (each half of it; the removal after has its own)."""
    from kubernetes import client

    clock = clock or Clock()
    admission = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    armed = wait_armed(admission, configuration, clock.now() + timeout, clock, failure_policy)
    if not armed.ok:
        return armed
    webhooks = [name for name, _ in _failure_policies(admission, configuration)]
    try:
        ns = _make(core, namespace_prefix)
    except Exception as exc:
        raise VerifyError(f"cannot make the claim and pod to test with: {exc}") from exc
    try:
        deadline = clock.now() + timeout
        while True:  # the webhook's cache sees the new pod within moments
            refused, answer = _refusal(core, ns, webhooks)
            if refused or clock.now() >= deadline:
                break
            clock.pause(1.0)
    finally:
        left = _remove(core, ns, clock.now() + timeout, clock)
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
