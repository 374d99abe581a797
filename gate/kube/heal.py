"""Carry out a heal plan (`gate.engine.heal`): each action with its preconditions, in order, and
an Event for each one done. A dry run sends every action with `dryRun=All`, so the API server
checks permissions, preconditions and admission without changing anything."""

from __future__ import annotations

import datetime as dt
import socket

from gate.engine.heal import Action, ActionKind, HealPlan, Outcome
from gate.engine.ledger import HEAL_FIELD_MANAGER
from gate.kube.client import ApiStatusError, ConflictError, KubeClient, NotFoundError
from gate.kube.events import event_body
from gate.kube.resources import resource_for
from gate.model.errors import ClusterError
from gate.model.refs import api_path

#: What `gate heal` needs beyond listing (a 403 names it).
HEAL_HINT = (
    "gate heal needs, besides list on pods, persistentvolumeclaims, persistentvolumes, nodes and "
    "namespaces: delete on pods, patch on persistentvolumes, create on events"
)


def _path(action: Action) -> str:
    ref = action.target
    resource = resource_for(ref.group, ref.kind)
    assert resource is not None, ref  # heal acts on pods and volumes only
    return f"{api_path(resource.api_version, resource.plural, ref.namespace)}/{ref.name}"


def _do(client: KubeClient, action: Action, dry_run: bool) -> None:
    what = f"{action.kind.value} {action.target.display()}"
    if action.kind is ActionKind.DELETE_POD:
        client.delete(
            _path(action), what, uid=action.uid, dry_run=dry_run, propagation="Background"
        )
    elif action.kind is ActionKind.FORCE_DELETE_POD:
        client.delete(
            _path(action),
            what,
            uid=action.uid,
            resource_version=action.resource_version or None,
            dry_run=dry_run,
            propagation="Background",
            grace_period=0,
        )
    else:
        client.patch(
            _path(action),
            list(action.patch),
            what,
            json_patch=True,
            dry_run=dry_run,
            field_manager=HEAL_FIELD_MANAGER,
        )


def carry_out(
    client: KubeClient, plan: HealPlan, now: dt.datetime, *, apply: bool
) -> list[Outcome]:
    """Each action in order; one whose `requires` did not succeed is skipped. A precondition
    that no longer holds (the object changed or was replaced since it was read) skips that
    action and says so: heal never acts on what it did not see."""
    instance = f"gate-heal@{socket.gethostname()}"
    outcomes: list[Outcome] = []
    for action in plan.actions:
        if action.requires is not None and outcomes[action.requires].result not in {
            "done",
            "would do",
        }:
            first = plan.actions[action.requires]
            outcomes.append(
                Outcome(
                    action, "skipped", f"{first.kind.value} {first.target.name} did not succeed"
                )
            )
            continue
        try:
            _do(client, action, dry_run=not apply)
        except (ConflictError, NotFoundError) as exc:
            outcomes.append(Outcome(action, "skipped", f"changed or gone since read: {exc}"))
            continue
        except ApiStatusError as exc:
            if exc.status == 422 and action.patch:  # a JSON patch `test` that failed
                outcomes.append(Outcome(action, "skipped", f"changed since read: {exc}"))
                continue
            outcomes.append(Outcome(action, "failed", str(exc)))
            continue
        except ClusterError as exc:
            outcomes.append(Outcome(action, "failed", str(exc)))
            continue
        if not apply:
            outcomes.append(Outcome(action, "would do", "the API server accepted it as a dry run"))
            continue
        body = event_body(action.event, now, instance)
        try:
            client.create(
                f"/api/v1/namespaces/{body['metadata']['namespace']}/events",
                body,
                f"record Event {action.event.reason}",
            )
        except ClusterError as exc:
            outcomes.append(Outcome(action, "done", f"but its Event was not recorded: {exc}"))
            continue
        outcomes.append(Outcome(action, "done", f"Event {action.event.reason} recorded"))
    return outcomes
