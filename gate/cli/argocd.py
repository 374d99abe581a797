"""`gate argocd sync DIR`: the speculative deploy of a deferred artifact, by Argo CD itself."""

from __future__ import annotations

import sys
import uuid

import click

from gate.cli.common import fail, kube_options, say
from gate.model.errors import GateError

# The sources, the engine and the client are imported when `sync` runs: `gate argocd --help`
# costs click and the option table (test_startup).


@click.group("argocd")
def argocd_group() -> None:
    """Argo CD: deploy a deferred artifact through its application controller."""


@argocd_group.command("sync")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--argocd-namespace",
    default="argocd",
    show_default=True,
    help="Argo CD's own namespace: where its argocd-cm settings are, and the namespace of the "
    "Applications the repository declares without one (argocd/_/ in DIR).",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds to wait for the syncs to end (exit 2 past it).",
)
@kube_options
def argocd_sync_command(
    directory: str,
    argocd_namespace: str,
    timeout: float,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Sync each Application's part of DIR, the artifact `gate check --argocd-root ...
    --defer-to DIR` wrote: Argo CD's local sync (the operation `argocd app sync --local`
    starts), applied by its application controller, without pruning. An Application with
    automated sync, or not in the cluster, is skipped, and says so.

    Exit 0 when every sync succeeded, 1 when one failed (the message says why: a refusal by
    the webhook names its code), 2 when it could not be asked or did not end in time.
    """
    from gate.engine.verdict import EXIT_PASS, EXIT_POLICY
    from gate.kube.argosync import SYNC_HINT, start_syncs, wait_syncs
    from gate.kube.client import KubeClient
    from gate.sources.deferral import argocd_parts

    try:
        record, parts = argocd_parts(directory, argocd_namespace)
        if not parts:
            fail(
                f"{directory}: no Application's part (argocd/NAMESPACE/NAME.yaml): the artifact "
                "was not written with --argocd-root"
            )
        head = str(record.get("head") or "the candidate")
        reason = f"prune-gate: speculative deploy of {head}, deferred deletions kept"
        nonce = uuid.uuid4().hex
        with KubeClient.from_kubeconfig(kubeconfig, kube_context, 30.0, SYNC_HINT) as api:
            plan = start_syncs(api, parts, nonce, reason, argocd_namespace)
            for part, why in plan.skipped:
                say(f"skipped {part.display()}: {why}")
            ended = wait_syncs(api, plan.synced, nonce, timeout)
    except GateError as exc:
        fail(str(exc))
    for part in plan.synced:
        done = ended[part]
        click.echo(f"{part.display()}: {done.phase}: {done.message} ({part.file})")
    failed = [p for p in plan.synced if not ended[p].succeeded]
    synced = len(plan.synced) - len(failed)
    click.echo(
        f"{synced} synced, {len(failed)} failed, {len(plan.skipped)} skipped "
        f"(artifact {directory}, {head})"
    )
    sys.exit(EXIT_POLICY if failed else EXIT_PASS)
