"""`gate heal`: get out of a wedge without losing data. Dry run by default; `--apply` acts."""

from __future__ import annotations

import sys

import click

from gate.cli.common import fail, policy_for_files
from gate.cli.doctor import (
    declared_lookup,
    describe_target,
    make_scope,
    read_cluster,
    scope_options,
    select,
)
from gate.engine.doctor import Doctor
from gate.engine.heal import Healer, HealOptions
from gate.engine.verdict import EXIT_UNDECIDED
from gate.model.errors import GateError

#: Exit codes: every action done (or nothing to do), something stuck left alone.
EXIT_HEALED, EXIT_LEFT = 0, 1


@click.command("heal")
@scope_options
@click.option(
    "--rescue",
    is_flag=True,
    help="Keep the data: set a stuck claim's volume to Retain before releasing the claim, and "
    "once the claim is gone, reserve the volume for the claim git recreates.",
)
@click.option("--apply", "apply", is_flag=True, help="Act (default: a dry run).")
@click.option("--yes", is_flag=True, help="With --apply, do not ask (CI, a heal job).")
def heal_command(
    target: str | None,
    namespace: str | None,
    all_namespaces: bool,
    older_than: str,
    deadline_slack: str,
    node_dead_after: str,
    manifests: str | None,
    rev: str | None,
    repo: str,
    paths: tuple[str, ...],
    render: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    config_path: str | None,
    fmt: str,
    rescue: bool,
    apply: bool,
    yes: bool,
) -> None:
    """Get out of a wedge without losing data: dry run by default, --apply acts.

    It acts on evidence only and records a Warning Event for each action.

    A claim pinned by pods: with its data marked disposable (annotation prune-gate.io/data:
    disposable, or heal.disposableClaims in the policy), delete those pods; with --rescue, first
    set its volume to Retain. A pod on a dead node (past its deadline plus --deadline-slack, no
    finalizers, node Ready not True for --node-dead-after with the unreachable taint):
    force-delete it. Never strips a finalizer. Exit 0 done (or nothing to do), 1 something stuck
    was left alone, 2 could not read or an action failed.
    """
    from gate.kube.heal import HEAL_HINT, carry_out
    from gate.kube.snapshot import ApiLister
    from gate.report.doctor import heal_json, heal_text
    from gate.sources.clock import utc_now

    try:
        scope = make_scope(
            target,
            namespace,
            all_namespaces,
            (older_than, deadline_slack, node_dead_after),
            kubeconfig,
            kube_context,
        )
        policy = policy_for_files(config_path)
        declared = declared_lookup(manifests, rev, repo, paths, render)
        ledger = read_cluster(scope, policy, kubeconfig, kube_context, HEAL_HINT)
    except GateError as exc:
        fail(str(exc))
    now = utc_now()
    doctor = Doctor(ledger, now, scope.thresholds, declared)
    roots, meta = select(doctor, scope)
    if scope.target is not None and scope.target[1] != "PersistentVolumeClaim" and meta is None:
        fail(f"no {describe_target(scope)} exists in the cluster")

    def reserve(ns: str, claim: str) -> bool:
        """Whose volumes a rescue reserves: the target claim's (it may be gone already), or
        those of the namespace in scope, or all."""
        if scope.target is not None:
            return scope.target[1] == "PersistentVolumeClaim" and (ns, claim) == (
                scope.namespace,
                scope.target[2],
            )
        return scope.namespace is None or ns == scope.namespace

    disposable = frozenset(
        key for key, c in ledger.claims.items() if policy.heal_disposable(c.meta.ref, c.meta.labels)
    )
    healer = Healer(doctor, HealOptions(rescue=rescue, disposable=disposable))
    plan = healer.plan(roots, reserve)
    if apply and plan.actions and not yes:
        if not sys.stdin.isatty():
            fail("--apply without --yes needs a terminal to confirm; add --yes to act unasked")
        click.echo(heal_text(plan, [], apply=True), err=True)
        click.confirm(f"carry out these {len(plan.actions)} action(s)?", abort=True, err=True)
    try:
        with ApiLister.from_kubeconfig(
            kubeconfig, kube_context, policy.live_timeout_seconds, hint=HEAL_HINT
        ) as client:
            outcomes = carry_out(client, plan, utc_now(), apply=apply)
    except GateError as exc:
        fail(str(exc))
    if fmt == "json":
        click.echo(heal_json(plan, outcomes, apply, now))
    else:
        click.echo(heal_text(plan, outcomes, apply))
    if any(o.result == "failed" for o in outcomes):
        sys.exit(EXIT_UNDECIDED)
    sys.exit(EXIT_LEFT if plan.skipped else EXIT_HEALED)
