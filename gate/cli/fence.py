"""`gate fence hold|release|status`: the Lease CI holds while a speculative deploy is in flight."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from typing import Any

import click

from gate.cli.common import F, fail, kube_options, policy_for_files
from gate.engine.fence import FenceStatus
from gate.engine.verdict import EXIT_POLICY
from gate.model.errors import GateError
from gate.sources.policyfile import (
    POLICY_FILE,
)


@click.group("fence")
def fence_group() -> None:
    """The speculation fence: the Lease CI holds while a speculative deploy is in flight.

    While it is held (and not expired), the webhook refuses guarded deletions by the deployers.
    """


def fence_options(f: F) -> F:
    """Where the fence is, and how to reach the cluster."""
    f = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        help=f"Policy whose webhook.fence names the Lease (default: ./{POLICY_FILE} if present).",
    )(f)
    f = click.option(
        "--lease",
        metavar="NAMESPACE/NAME",
        help="The fence Lease (default: webhook.fence of the policy).",
    )(f)
    return kube_options(f)


def _fence_target(lease: str | None, config_path: str | None) -> tuple[str, str, float]:
    policy = policy_for_files(config_path)
    if lease:
        namespace, _, name = lease.partition("/")
        if not namespace or not name:
            fail(f"--lease {lease!r}: write NAMESPACE/NAME")
        return namespace, name, policy.live_timeout_seconds
    if policy.webhook.fence is None:
        fail(f"no fence: pass --lease NAMESPACE/NAME, or set webhook.fence in {POLICY_FILE}")
    namespace, name = policy.webhook.fence
    return namespace, name, policy.live_timeout_seconds


def _on_fence(
    lease: str | None,
    config_path: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    act: Callable[[Any, str, str, dt.datetime], FenceStatus],
) -> FenceStatus:
    """Run `act(api, namespace, name, now)` on the fence Lease, with a client that is closed."""
    from gate.kube.client import KubeClient
    from gate.kube.lease import LEASE_HINT

    namespace, name, timeout = _fence_target(lease, config_path)
    with KubeClient.from_kubeconfig(kubeconfig, kube_context, timeout, LEASE_HINT) as api:
        return act(api, namespace, name, dt.datetime.now(dt.UTC))


@fence_group.command("hold")
@click.option(
    "--holder",
    envvar="GITHUB_SHA",
    required=True,
    help="Who holds it: the candidate SHA (default: $GITHUB_SHA).",
)
@click.option(
    "--duration",
    default="30m",
    show_default=True,
    help="How long it holds without renewal (with units: 30m, 1h); run hold again to renew.",
)
@fence_options
def fence_hold_command(
    holder: str,
    duration: str,
    config_path: str | None,
    lease: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Take or renew the fence. Exit 1 while another candidate holds it (wait and retry)."""
    from gate.engine.policy import parse_duration
    from gate.kube.lease import FenceHeldError, hold_fence

    try:
        seconds = int(parse_duration(duration))
    except ValueError as exc:
        fail(f"--duration: {exc}")
    try:
        status = _on_fence(
            lease,
            config_path,
            kubeconfig,
            kube_context,
            lambda api, ns, lease_name, now: hold_fence(api, ns, lease_name, holder, seconds, now),
        )
    except FenceHeldError as exc:
        click.echo(f"waiting: {exc}; hold again once it is released or expires", err=True)
        sys.exit(EXIT_POLICY)
    except GateError as exc:
        fail(str(exc))
    click.echo(status.describe())


@fence_group.command("release")
@click.option(
    "--holder",
    envvar="GITHUB_SHA",
    required=True,
    help="Release only if this holder holds it (default: $GITHUB_SHA).",
)
@fence_options
def fence_release_command(
    holder: str,
    config_path: str | None,
    lease: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Release the fence if HOLDER holds it; another holder's fence is left alone."""
    from gate.kube.lease import release_fence

    try:
        status = _on_fence(
            lease,
            config_path,
            kubeconfig,
            kube_context,
            lambda api, ns, lease_name, now: release_fence(api, ns, lease_name, holder, now),
        )
    except GateError as exc:
        fail(str(exc))
    click.echo(status.describe())


@fence_group.command("status")
@fence_options
def fence_status_command(
    config_path: str | None, lease: str | None, kubeconfig: str | None, kube_context: str | None
) -> None:
    """Say whether the fence is held, by whom, and until when."""
    from gate.kube.lease import read_fence

    try:
        status = _on_fence(lease, config_path, kubeconfig, kube_context, read_fence)
    except GateError as exc:
        fail(str(exc))
    click.echo(f"{status.state}: {status.describe()}")
