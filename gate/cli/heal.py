"""`gate heal`: get out of a wedge without losing data. Dry run by default; `--apply` acts."""

from __future__ import annotations

import datetime as dt
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from gate.cli.common import EXIT_UNDECIDED, fail
from gate.cli.doctor import (
    Inputs,
    Scope,
    describe_target,
    duration_option,
    scope_options,
    select,
)
from gate.model.errors import GateError, InputError

# The engine and the client are imported where a pass uses them (kubernetes is slow to import),
# as in `gate.cli.doctor`: `gate heal --help` costs click and the option table (test_startup).
if TYPE_CHECKING:
    from gate.engine.heal import HealOptions, HealPlan, Outcome
    from gate.engine.policy import Policy
    from gate.kube.snapshot import ApiLister
    from gate.model.refs import ObjectRef

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
@click.option(
    "--yes",
    is_flag=True,
    help="With --apply, do not ask (CI, a heal job): unattended, so only marks a person's hand "
    "wrote count.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="Keep healing, a pass every --interval, until SIGTERM: only the actions heal.watch in "
    "the policy enables (with --apply; without, it logs what it would do).",
)
@click.option("--interval", metavar="DURATION", help="Time between --watch passes (default 1m).")
def heal_command(
    inputs: Inputs,
    fmt: str,
    rescue: bool,
    apply: bool,
    yes: bool,
    watch: bool,
    interval: str | None,
) -> None:
    """Get out of a wedge without losing data: dry run by default, --apply acts.

    It acts on evidence only and records a Warning Event for each action.

    A claim pinned by pods: with its data marked disposable (annotation prune-gate.io/data:
    disposable, or heal.disposableClaims in the policy), delete those pods; with --rescue, first
    set its volume to Retain. With --yes or --watch (nobody confirms), a label or the annotation
    counts only where managedFields show a person's hand wrote it (heal.trustedManagers); names
    and namespaces in heal.disposableClaims always count. A pod on a dead node (past its
    deadline plus --deadline-slack, no finalizers, node Ready not True for --node-dead-after
    with the unreachable taint): force-delete it. Never strips a finalizer. Exit 0 done (or
    nothing to do), 1 something stuck was left alone, 2 could not read or an action failed.
    """
    from gate.report.doctor import heal_json, heal_text

    try:
        scope, policy, declared = inputs.resolve()
        if interval is not None and not watch:
            raise click.UsageError("--interval goes with --watch")
        every = duration_option("--interval", interval or "1m", minimum=1.0)
    except GateError as exc:
        fail(str(exc))
    # `--yes` or `--watch`: no person confirms the plan, so heal takes only marks a person's
    # hand wrote (gate.engine.marks).
    run = _Pass(scope, policy, declared, inputs.cluster, rescue, unattended=yes or watch)
    if watch:
        if scope.target is not None:
            raise click.UsageError(
                "--watch heals what is stuck in -n NAMESPACE or -A, not one object"
            )
        sys.exit(_watch(run, every, apply))
    try:
        with run.client() as client:
            plan, now = run.plan(client)
            if apply and plan.actions and not yes:
                if not sys.stdin.isatty():
                    fail(
                        "--apply without --yes needs a terminal to confirm; add --yes to act "
                        "unasked"
                    )
                click.echo(heal_text(plan, [], apply=True), err=True)
                click.confirm(
                    f"carry out these {len(plan.actions)} action(s)?", abort=True, err=True
                )
            outcomes = run.carry_out(client, plan, apply)
    except GateError as exc:
        fail(str(exc))
    if fmt == "json":
        click.echo(heal_json(plan, outcomes, apply, now))
    else:
        click.echo(heal_text(plan, outcomes, apply))
    if any(o.result == "failed" for o in outcomes):
        sys.exit(EXIT_UNDECIDED)
    sys.exit(EXIT_LEFT if plan.skipped else EXIT_HEALED)


class _Pass:
    """One heal pass: read the ledger, diagnose, plan; then carry the plan out. `--watch`
    repeats it on a timer (watches are fast, lists are complete: a reconciler lists)."""

    def __init__(
        self,
        scope: Scope,
        policy: Policy,
        declared: Callable[[ObjectRef], str | None],
        cluster: tuple[str | None, str | None],
        rescue: bool,
        unattended: bool,
    ) -> None:
        self.scope = scope
        self.policy = policy
        self.declared = declared
        self.cluster = cluster
        self.rescue = rescue
        self.unattended = unattended

    def options(self, watching: bool) -> HealOptions:
        from gate.engine.heal import HealOptions
        from gate.engine.marks import MarkReader

        marks = MarkReader.of(self.policy)
        if not watching:
            return HealOptions(rescue=self.rescue, unattended=self.unattended, marks=marks)
        w = self.policy.heal_watch
        return HealOptions(
            rescue=w.rescue_volumes,
            release=w.release_disposable_claims,
            force=w.force_delete_pods_on_dead_nodes,
            off_because="heal.watch",
            unattended=True,
            marks=marks,
        )

    def client(self) -> ApiLister:
        """The one client of a pass: it lists the ledger and carries the plan out."""
        from gate.kube.heal import HEAL_HINT
        from gate.kube.snapshot import ApiLister

        return ApiLister.from_kubeconfig(
            *self.cluster, self.policy.live_timeout_seconds, hint=HEAL_HINT
        )

    def plan(self, client: ApiLister, watching: bool = False) -> tuple[HealPlan, dt.datetime]:
        from gate.engine.doctor import Doctor
        from gate.engine.heal import Healer
        from gate.engine.marks import MarkReader
        from gate.kube.ledger import read_ledger
        from gate.sources.clock import utc_now

        scope, policy = self.scope, self.policy
        ledger = read_ledger(client, policy.live_page_size, scope.namespace, policy.guarded_kinds)
        now = utc_now()
        doctor = Doctor(ledger, now, scope.thresholds, self.declared, MarkReader.of(policy))
        roots, meta = select(doctor, scope)
        target = scope.target
        if target is not None and target[1] != "PersistentVolumeClaim" and meta is None:
            raise InputError(f"no {describe_target(scope)} exists in the cluster")

        def reserve(ns: str, claim: str) -> bool:
            """Whose volumes a rescue reserves: the target claim's (it may be gone already), or
            those of the namespace in scope, or all."""
            if target is not None:
                return target[1] == "PersistentVolumeClaim" and (ns, claim) == (
                    scope.namespace,
                    target[2],
                )
            return scope.namespace is None or ns == scope.namespace

        return Healer(doctor, self.options(watching)).plan(roots, reserve), now

    @staticmethod
    def carry_out(client: ApiLister, plan: HealPlan, apply: bool) -> list[Outcome]:
        from gate.kube.heal import carry_out
        from gate.sources.clock import utc_now

        return carry_out(client, plan, utc_now(), apply=apply)


def _watch(run: _Pass, every: float, apply: bool) -> int:
    """Heal on a timer until SIGTERM or SIGINT; one JSON log line per action, per object left
    alone (when its reason changes) and per failed pass. A failed pass (the API server away)
    is logged and retried at the next tick: a reconciler outlives a blip."""
    from gate.report.doctor import log_line
    from gate.sources.clock import utc_now

    def log(msg: str, **fields: object) -> None:
        click.echo(log_line(msg, utc_now(), **fields), err=True)  # type: ignore[arg-type]

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    said: dict[str, str] = {}
    log("heal watch started", interval=every, apply=apply)
    while not stop.is_set():
        try:
            with run.client() as client:
                plan, _ = run.plan(client, watching=True)
                outcomes = run.carry_out(client, plan, apply)
        except GateError as exc:
            log("heal pass failed", level="error", error=str(exc))
        else:
            for o in outcomes:
                log(
                    "heal action",
                    action=o.action.kind.value,
                    object=o.action.target.display(),
                    heals=o.action.heals.display(),
                    result=o.result,
                    detail=o.detail,
                    event=o.action.event.message,
                )
            now_said = {s.ref.display(): f"{s.state.value}: {s.why}" for s in plan.skipped}
            for obj, why in now_said.items():
                if said.get(obj) != why:
                    log("left alone", object=obj, why=why)
            said = now_said
        stop.wait(every)
    log("heal watch stopped")
    return EXIT_HEALED
