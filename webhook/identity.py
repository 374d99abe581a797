"""Who is asking: the identities the webhook's decisions turn on.

A review carries the requester as the API server authenticated them (`UserInfo`); the decisions
of `webhook.decide` (guarded deletions and changes) and `webhook.guards` (the fence Lease) ask
the same questions of it: is it a configured deployer, is it one of the API server's own
controllers whose deletions cascade from someone else's, is it in a break-glass group. One module
answers them, below both, so neither imports the other for them.
"""

from __future__ import annotations

from gate.engine.policy import Policy
from webhook.review import AdmissionRequest

#: The garbage collector: deletes objects whose owners are gone (cascades, ownerReferences).
GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
#: The StatefulSet controller: manages claims of `volumeClaimTemplates` by their retention policy.
STATEFULSET_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
#: Controllers whose DELETEs of guarded objects are decided like a deployer's.
CASCADE_CONTROLLERS = frozenset({GARBAGE_COLLECTOR, STATEFULSET_CONTROLLER})


def is_deployer(req: AdmissionRequest, policy: Policy) -> bool:
    """True when the requester is one of the configured deployer identities."""
    return req.user.username in policy.webhook.deployers


def is_cascade_controller(req: AdmissionRequest) -> bool:
    """True for the garbage collector and the StatefulSet controller.

    Their DELETEs of guarded objects are decided like a deployer's (retired and unused, no held
    fence), because the API server does not say who caused them: a GC delete may come from an
    owner a deployer deleted, or from an ownerReference a deployer (or an operator) added. Being
    strict here is the honest choice: a claim that was never retired is refused, the cascade stays
    pending and visible (the GC retries it), and a person retires the claim or overrides with the
    allow-delete annotation. In v1.34 the StatefulSet controller deletes no claim itself: for
    `whenScaled: Delete` it adds a controller ownerReference from the claim to the condemned Pod
    (for `whenDeleted: Delete`, to the StatefulSet) and the GC deletes the claim once the owner is
    gone (pkg/controller/statefulset, `updateClaimOwnerRefForSetAndPod`). That UPDATE is allowed
    and logged: refusing it would wedge the StatefulSet, and the DELETE it leads to is decided.
    """
    return req.user.username in CASCADE_CONTROLLERS


def break_glass_group(req: AdmissionRequest, policy: Policy) -> str | None:
    """The first break-glass group the requester is in, if any."""
    return next((g for g in req.user.groups if g in policy.webhook.break_glass_groups), None)


def cause(req: AdmissionRequest) -> str:
    """Who made the request, and why when the API server's own controller did (for findings)."""
    who = req.user.username or "an unknown user"
    why = {
        GARBAGE_COLLECTOR: " (a cascade: its owner is gone or being deleted)",
        STATEFULSET_CONTROLLER: " (the StatefulSet's claim retention policy)",
    }
    return f"{req.operation} by {who}{why.get(who, '') if req.operation == 'DELETE' else ''}"
