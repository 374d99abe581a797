"""`gate fence hold|release|status`: the Lease CI holds while a speculative deploy is in flight.

Which Lease is the fence is base's word, never the candidate's: `webhook.fence` is read from the
policy file at the base revision (`--base`, by default the GitHub event's, as `gate check` reads
its policy), or from a `--config` outside the repository, or given with `--lease`. The working
tree is a merge-group job's candidate, and a candidate that names another Lease would have CI
hold one the webhook does not watch.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from gate.cli.common import POLICY_FILE, F, fail, kube_options, say
from gate.model.errors import GateError, InputError

if TYPE_CHECKING:
    from gate.engine.fence import FenceStatus
    from gate.engine.policy import Policy

# The policy, the engine and the client are imported when a fence command runs: `gate fence
# --help` costs click and the option table (test_startup).

#: Where the policy naming the fence is read: (--repo, --base, --config).
Where = tuple[str, str | None, str | None]


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
        help=f"Policy whose webhook.fence names the Lease (default: {POLICY_FILE} at the "
        "repository root). Inside the repository it is read at the base revision; outside, "
        "from disk.",
    )(f)
    f = click.option(
        "--repo",
        default=".",
        show_default=True,
        type=click.Path(file_okay=False),
        help="Git repository the policy is read from.",
    )(f)
    f = click.option(
        "--base",
        "base_rev",
        metavar="REV",
        help="Base revision whose policy names the fence (default: the GitHub event's, as for "
        "gate check). Never the working tree: in the merge queue it is the candidate's.",
    )(f)
    f = click.option(
        "--lease",
        metavar="NAMESPACE/NAME",
        help="The fence Lease (default: webhook.fence of the policy).",
    )(f)
    return kube_options(f)


def _fence_policy(where: Where) -> tuple[Policy, str | None]:
    """The policy that names the fence, and the base revision it was read at (None: not from
    git). A `--config` outside the repository is read from disk; otherwise the policy file at
    the base revision. Without a base revision no policy file is read (the defaults: no fence),
    so that `--lease` or `--base` must say it. A `--config` in a checkout with a base revision
    but no repository to read it at is refused: it may be the candidate's checkout."""
    from gate.app.policy import in_a_checkout, policy_at, policy_in_repository
    from gate.engine.policy import Policy
    from gate.sources import gitsource  # git only
    from gate.sources.github import detect_ci_context
    from gate.sources.policyfile import load_policy

    repo, base_rev, config_path = where
    base_rev = base_rev or detect_ci_context(os.environ).base
    if (
        config_path is not None
        and base_rev
        and not gitsource.is_repository(repo)
        and in_a_checkout(config_path)
    ):
        raise InputError(
            f"--config {config_path}: there is a base revision ({base_rev}) to read the policy "
            f"at, but {repo} is not a git repository, and the file is in a checkout, so it may "
            "be the candidate's; run "
            "in the repository's clone (or give it with --repo), or leave out --config and name "
            "the fence with --lease"
        )
    in_repo = policy_in_repository(repo, config_path)
    if in_repo is None:
        assert config_path is not None  # only a --config can be outside the repository
        return load_policy(config_path), None
    if not base_rev:
        return Policy(), None

    base_sha = gitsource.resolve_revision(repo, base_rev)
    return policy_at(repo, base_sha, config_path, say), base_sha


def _fence_target(lease: str | None, where: Where) -> tuple[str, str, float]:
    policy, base_sha = _fence_policy(where)
    if lease:
        namespace, _, name = lease.partition("/")
        if not namespace or not name:
            fail(f"--lease {lease!r}: write NAMESPACE/NAME")
        return namespace, name, policy.live_timeout_seconds
    if policy.webhook.fence is None:
        if base_sha is not None:
            at = f"{POLICY_FILE if where[2] is None else where[2]} at {base_sha[:12]}"
            fail(f"no fence: pass --lease NAMESPACE/NAME, or set webhook.fence in {at}")
        fail(
            "no fence: pass --lease NAMESPACE/NAME, or --base REV to read webhook.fence of "
            f"{POLICY_FILE} at the base revision (the working tree is never read: in the merge "
            "queue it is the candidate's), or --config with a file outside the repository"
        )
    namespace, name = policy.webhook.fence
    return namespace, name, policy.live_timeout_seconds


def _on_fence(
    lease: str | None,
    where: Where,
    kubeconfig: str | None,
    kube_context: str | None,
    act: Callable[[Any, str, str, dt.datetime], FenceStatus],
) -> FenceStatus:
    """Run `act(api, namespace, name, now)` on the fence Lease, with a client that is closed."""
    from gate.kube.client import KubeClient
    from gate.kube.lease import LEASE_HINT

    namespace, name, timeout = _fence_target(lease, where)
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
    repo: str,
    base_rev: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Take or renew the fence. Exit 1 while another candidate holds it (wait and retry)."""
    from gate.engine.fence import MAX_HOLD_SECONDS
    from gate.engine.policy import parse_duration
    from gate.engine.verdict import EXIT_POLICY
    from gate.kube.lease import FenceHeldError, hold_fence

    try:
        seconds = int(parse_duration(duration))
    except ValueError as exc:
        fail(f"--duration: {exc}")
    if seconds > MAX_HOLD_SECONDS:
        fail(
            f"--duration {duration}: a fence holds at most {MAX_HOLD_SECONDS // 3600}h without "
            "renewal (the webhook refuses a longer one); hold it for less and run hold again "
            "to renew it while the deploy runs"
        )
    try:
        status = _on_fence(
            lease,
            (repo, base_rev, config_path),
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
    repo: str,
    base_rev: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Release the fence if HOLDER holds it; another holder's fence is left alone."""
    from gate.kube.lease import release_fence

    try:
        status = _on_fence(
            lease,
            (repo, base_rev, config_path),
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
    config_path: str | None,
    lease: str | None,
    repo: str,
    base_rev: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Say whether the fence is held, by whom, and until when."""
    from gate.kube.lease import read_fence

    try:
        where = (repo, base_rev, config_path)
        status = _on_fence(lease, where, kubeconfig, kube_context, read_fence)
    except GateError as exc:
        fail(str(exc))
    click.echo(f"{status.state}: {status.describe()}")
