"""The `gate` command: parse options, call the core, print. No decisions are made here.

Every `GateError` becomes `error: <what>` on stderr and exit code 2 ("could not decide");
click's own usage errors exit 2 as well. Exit codes come from `gate.verdict`.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from gate import __version__
from gate.check import CheckResult, build_sides, check_inventories, check_objects
from gate.clock import utc_today
from gate.context import Context, detect_ci_context
from gate.errors import ConfigError, GateError, InputError
from gate.fence import FenceStatus
from gate.findings import MEANING, Code
from gate.manifests import Inventory, RawObject, read_path
from gate.policy import (
    POLICY_FILE,
    Policy,
    decode_policy,
    load_policy,
    policy_from_text,
    require_regular_file,
)
from gate.report import FORMATS, inert, render_report, step_summary
from gate.scope import PruneScope, parse_scope
from gate.verdict import EXIT_BUG, EXIT_POLICY, EXIT_UNDECIDED

F = TypeVar("F", bound=Callable[..., Any])


def kube_options(f: F) -> F:
    """--kubeconfig and --kube-context, shared by every command that reads the cluster."""
    f = click.option(
        "--kube-context",
        metavar="NAME",
        help="Context in the kubeconfig (default: its current-context).",
    )(f)
    return click.option(
        "--kubeconfig",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        help="Kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).",
    )(f)


def fail(message: str) -> NoReturn:
    """Print `error: message` and exit 2."""
    click.echo(f"error: {inert(message)}", err=True)  # a file name may hold `\n::warning::`
    sys.exit(EXIT_UNDECIDED)


class _Gate(click.Group):
    """The `gate` group: loads `gate webhook` only when it runs, and turns a crash into exit 3.

    An exception no command expected is a bug, not a verdict: exit 1 would read as "blocked by
    policy" and exit 0 as a pass, so it gets its own code and asks to be reported.
    """

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is _webhook_door:
            return name, _load_webhook(), rest
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _CLICK_FLOW:
            raise
        except GateError as exc:  # a command that forgot to map it: still "could not decide"
            fail(str(exc))
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                raise  # a closed stdout (`gate codes | head`): click's own handling
            _crash(exc, debug=bool(ctx.params.get("debug")))


#: Exceptions click turns into its own exit codes and messages: not crashes.
_CLICK_FLOW = (
    click.exceptions.ClickException,
    click.exceptions.Exit,
    click.exceptions.Abort,
    EOFError,
)


def _report_url() -> str:
    """Where to report a bug: the package's `Issues` URL, else its home page."""
    from importlib import metadata

    try:
        urls = metadata.metadata("prune-gate").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        urls = []
    by_label: dict[str, str] = {
        label.strip().lower(): url.strip()
        for label, _, url in (str(entry).partition(",") for entry in urls)
    }
    for label in ("issues", "bug tracker", "source", "homepage"):
        if label in by_label:
            return by_label[label]
    return "the prune-gate issue tracker"


def _crash(exc: BaseException, *, debug: bool) -> NoReturn:
    """Say an internal error happened, whose bug it is and where to report it; exit EXIT_BUG.
    The traceback only with --debug: it is for the report, not for the operator."""
    if debug:
        click.echo("".join(traceback.format_exception(exc)).rstrip("\n"), err=True)
    detail = inert(f"{type(exc).__name__}: {exc}")
    hint = "" if debug else " (run `gate --debug ...` for the traceback)"
    click.echo(
        f"error: internal error: {detail} \u2014 this is a bug, please report it at "
        f"{_report_url()} with the command and its output{hint}",
        err=True,
    )
    sys.exit(EXIT_BUG)


@click.group(
    cls=_Gate,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="gate")
@click.option("--debug", is_flag=True, help="On an internal error, print its traceback.")
def main(debug: bool) -> None:
    """prune-gate: stop deletions that lose data or wedge a deploy.

    Exit codes: 0 pass (allow or warn), 1 blocked or deferred by policy, 2 could not decide,
    3 internal error (a bug: please report it).
    """


@main.command("check")
@click.option("--base-manifests", metavar="PATH", help="Rendered base: file, directory or -.")
@click.option("--head-manifests", metavar="PATH", help="Rendered candidate: file, directory or -.")
@click.option("--base", "base_rev", metavar="REV", help="Base git revision (git mode).")
@click.option("--head", "head_rev", metavar="REV", help="Candidate git revision (git mode).")
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="DIR",
    help="Directory in the repository to read (repeatable; default: the whole tree).",
)
@click.option(
    "--repo",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Git repository (git mode).",
)
@click.option(
    "--render",
    type=click.Choice(["none", "kustomize"]),
    default="none",
    show_default=True,
    help="Build each --path with kustomize at each revision.",
)
@click.option(
    "--context",
    "context_name",
    type=click.Choice(["auto", "speculative", "merged", "preview"]),
    default="auto",
    show_default=True,
    help="Deploy context; auto reads the GitHub Actions event.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help=f"Policy file (default: {POLICY_FILE} at the repository root, from the base revision "
    "in git mode).",
)
@click.option(
    "-n",
    "--namespace",
    default="default",
    show_default=True,
    help="Namespace of namespaced objects that declare none.",
)
@click.option(
    "--force",
    is_flag=True,
    help="The deployer force-replaces on immutable changes (Flux Kustomization spec.force: true).",
)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Report format.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Also read the cluster: mounted claims, live retire annotations, the prune set "
    "(--kubeconfig, --kube-context and --prune-scope imply it). Unreachable: exit 2.",
)
@kube_options
@click.option(
    "--prune-scope",
    "prune_scopes",
    multiple=True,
    metavar="SCOPE",
    help="Live objects the deployer owns, pruned when the candidate lacks them (implies --live; "
    "repeatable): flux:NAMESPACE/NAME, argocd:APP, helm:NAMESPACE/RELEASE, label:SELECTOR.",
)
def check_command(
    base_manifests: str | None,
    head_manifests: str | None,
    base_rev: str | None,
    head_rev: str | None,
    paths: Sequence[str],
    repo: str,
    render: str,
    context_name: str,
    config_path: str | None,
    namespace: str,
    force: bool,
    fmt: str,
    live: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    prune_scopes: Sequence[str],
) -> None:
    """Compare base and candidate manifests and say which deletions must not happen.

    Rendered mode: --base-manifests PATH --head-manifests PATH. Git mode: --base REV --head REV
    [--path DIR]... (in the merge queue, --base/--head default to the merge_group event's SHAs).
    """
    try:
        ci = detect_ci_context(os.environ)
        context = ci.context if context_name == "auto" else Context(context_name)
        rendered = base_manifests is not None or head_manifests is not None
        if rendered:
            if base_rev or head_rev or paths or render != "none":
                fail("use either --base-manifests/--head-manifests or --base/--head, not both")
            if base_manifests is None or head_manifests is None:
                fail("rendered mode needs both --base-manifests and --head-manifests")
            if base_manifests == "-" and head_manifests == "-":
                fail("only one side can be read from stdin (-)")
            policy = _policy_for_files(config_path)
            base_raw = read_path(_workspace_relative(base_manifests))
            head_raw = read_path(_workspace_relative(head_manifests))
            base_label, head_label = base_manifests, head_manifests
        else:
            base_rev = base_rev or ci.base
            head_rev = head_rev or ci.head
            if not base_rev or not head_rev:
                fail(
                    "nothing to compare: give --base-manifests and --head-manifests, or --base "
                    "and --head (in a merge_group, pull_request or push workflow they default "
                    "to the event's revisions)"
                )
            base_raw, head_raw, policy, base_label, head_label = _read_git(
                repo, base_rev, head_rev, paths, render, config_path
            )
        if not base_raw and not head_raw:
            raise InputError(
                f"no Kubernetes objects in base ({base_label}) nor candidate ({head_label}): "
                "check the paths; kustomizations need --render kustomize, and Helm charts must be "
                "rendered first (helm template ... > dir, then --base-manifests/--head-manifests)"
            )
        live = live or bool(prune_scopes) or kubeconfig is not None or kube_context is not None
        if live:
            result = _check_live(
                base_raw,
                head_raw,
                context=context,
                policy=policy,
                namespace=namespace,
                force=force,
                kubeconfig=kubeconfig,
                kube_context=kube_context,
                scopes=[parse_scope(s) for s in prune_scopes],
                quiet=fmt != "text",
            )
        else:
            result = check_objects(
                base_raw,
                head_raw,
                context=context,
                policy=policy,
                today=utc_today(),
                default_namespace=namespace,
                force=force,
            )
    except GateError as exc:
        fail(str(exc))
    _emit(result, fmt, context, base_label, head_label)
    sys.exit(result.decision.verdict.exit_code)


def _check_live(
    base_raw: Sequence[RawObject],
    head_raw: Sequence[RawObject],
    *,
    context: Context,
    policy: Policy,
    namespace: str,
    force: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    scopes: Sequence[PruneScope],
    quiet: bool,
) -> CheckResult:
    """`gate check --live`: the same check, with the cluster's truth and the prune set."""
    from gate.snapshot import ApiLister, read_live  # the kubernetes client is slow to import

    base, head = build_sides(base_raw, head_raw, namespace)
    timeout = policy.live_timeout_seconds
    with ApiLister.from_kubeconfig(kubeconfig, kube_context, timeout) as lister:
        read = read_live(lister, policy, base, head, scopes)
        if not quiet:
            pruned = f"; prune set: {len(read.prune_changes)} object(s)" if scopes else ""
            click.echo(f"live: {lister.host}: {read.snapshot.summary()}{pruned}", err=True)
    return check_inventories(
        base,
        head,
        context=context,
        policy=policy,
        today=utc_today(),
        force=force,
        live=read.snapshot.state,
        extra_changes=read.prune_changes,
    )


def _policy_for_files(config_path: str | None) -> Policy:
    if config_path:
        return load_policy(config_path)
    default = Path(POLICY_FILE)
    # lexists, not is_file: a symlink to /dev/null must be refused, not read as "no policy".
    return load_policy(default) if os.path.lexists(default) else Policy()


def _read_git(
    repo: str,
    base_rev: str,
    head_rev: str,
    paths: Sequence[str],
    render: str,
    config_path: str | None,
) -> tuple[list[RawObject], list[RawObject], Policy, str, str]:
    from gate import gitsource  # git mode only: GitPython is slow to import
    from gate import render as renderers

    base_sha = gitsource.resolve_revision(repo, base_rev)
    head_sha = gitsource.resolve_revision(repo, head_rev)
    policy = _base_policy(repo, base_sha, config_path)
    if render == "kustomize":
        if not paths:
            raise InputError("--render kustomize needs at least one --path to build")
        base_raw = renderers.render_kustomize_paths(repo, base_sha, paths)
        head_raw = renderers.render_kustomize_paths(repo, head_sha, paths)
    else:
        base_raw = gitsource.read_tree(repo, base_sha, paths)
        head_raw = gitsource.read_tree(repo, head_sha, paths)
    base_label, head_label = _rev_label(base_rev, base_sha), _rev_label(head_rev, head_sha)
    return base_raw, head_raw, policy, base_label, head_label


def _base_policy(repo: str, base_sha: str, config_path: str | None) -> Policy:
    """The policy as the base revision has it: a candidate must not switch its own gate off.

    A `--config` inside the repository is read at the base revision too (if the base lacks it,
    the defaults apply until it is merged); one outside the repository is read from disk. The
    path is never resolved through a symlink (a candidate's link to `/dev/null` or outside the
    tree would otherwise choose the policy), and a symlink is refused on disk and in the base.
    """
    from gate import gitsource

    if config_path is None:
        where = POLICY_FILE
    else:
        require_regular_file(config_path)
        try:
            with gitsource.open_repo(repo) as r:
                root = r.working_tree_dir
        except GateError:
            root = None
        where_in_repo = _inside(Path(root), config_path) if root is not None else None
        if where_in_repo is None:
            return load_policy(config_path)
        where = where_in_repo
    blob = gitsource.read_blob(repo, base_sha, where)
    label = f"{where} at {base_sha[:12]}"
    if blob is None:
        if config_path is not None:
            click.echo(
                f"note: {where} does not exist at the base revision {base_sha[:12]}: using the "
                "default policy (a candidate's policy takes effect once it is merged)",
                err=True,
            )
        return Policy()
    is_link, data = blob
    if is_link:
        raise ConfigError(
            f"{label}: the policy file is a symlink in the base revision (git mode 120000); a "
            "policy must be a regular file: commit the file itself"
        )
    return policy_from_text(decode_policy(data, label), label)


def _inside(root: Path, config_path: str) -> str | None:
    """`config_path` relative to the work tree `root` (posix), or None when it is outside.

    Lexical, with only the directory resolved: the file's own name is never followed.
    """
    target = Path(os.path.normpath(Path(config_path).absolute()))
    directory = target.parent.resolve()
    for base in (root.resolve(), Path(os.path.normpath(root.absolute()))):
        for candidate in (directory / target.name, target):
            if candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix()
    return None


def _workspace_relative(path: str) -> str:
    """An absolute path inside the working directory, made relative: annotations need that."""
    p = Path(path)
    if p.is_absolute() and p.is_relative_to(Path.cwd()):
        return p.relative_to(Path.cwd()).as_posix() or "."
    return path


def _rev_label(rev: str, sha: str) -> str:
    return sha if sha.startswith(rev) else f"{rev} ({sha[:12]})"


def _emit(result: CheckResult, fmt: str, context: Context, base: str, head: str) -> None:

    color = fmt == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    click.echo(render_report(result, fmt, context=context, base=base, head=head, color=color))
    if fmt != "github":
        return
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(step_summary(result, context=context, base=base, head=head))
    output = os.environ.get("GITHUB_OUTPUT")
    if output:  # the step's outputs, for later steps: `steps.<id>.outputs.verdict`
        with Path(output).open("a", encoding="utf-8") as fh:
            fh.write(f"verdict={result.decision.verdict}\n")


@main.command("codes")
def codes_command() -> None:
    """List every finding code and what it means."""
    width = max(len(c.value) for c in Code)
    for code in Code:
        click.echo(f"{code.value:<{width}}  {MEANING[code]}")


@main.group("retire")
def retire_group() -> None:
    """Two-stage retirement of claims: where each one stands."""


@retire_group.command("status")
@click.option("-n", "--namespace", help="Only claims in this namespace (default: all).")
@click.argument("name", required=False)
@kube_options
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help=f"Policy file, for the retire annotation's name (default: ./{POLICY_FILE} if present).",
)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--base",
    "base_rev",
    metavar="REV",
    help="The merged branch's revision: stage 1 counts only for claims it marks too, as in "
    "`gate check` (a mark only a speculative deploy applied is reported as unmerged).",
)
@click.option(
    "--repo",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Git repository of --base.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="DIR",
    help="Directory of --base to read (repeatable; default: the whole tree).",
)
def retire_status_command(
    namespace: str | None,
    name: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    config_path: str | None,
    fmt: str,
    base_rev: str | None,
    repo: str,
    paths: tuple[str, ...],
) -> None:
    """For every live claim marked for retirement: its stage, what it still waits on (which pod
    on which node, which workload), and whether removing its manifest is safe now.

    With NAME, that claim whether marked or not. With --base, a live mark the merged branch does
    not carry does not count. Exit 0 when it answered, 2 when it could not read the cluster or
    the base revision.
    """
    from gate import retire
    from gate.resources import RESOURCES
    from gate.snapshot import ApiLister, take_snapshot

    wanted = {"PersistentVolumeClaim", "PersistentVolume", "Pod", "VolumeSnapshot"}
    wanted |= {"StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
    try:
        policy = _policy_for_files(config_path)
        base = _base_inventory(repo, base_rev, paths) if base_rev else None
        with ApiLister.from_kubeconfig(
            kubeconfig, kube_context, policy.live_timeout_seconds
        ) as lister:
            snap = take_snapshot(
                lister,
                policy.guarded_kinds,
                policy.live_page_size,
                [r for r in RESOURCES if r.kind in wanted],
            )
    except GateError as exc:
        fail(str(exc))
    annotation = policy.retire_annotation
    state = snap.state
    statuses = retire.retire_statuses(
        state.objects.values(), state, annotation, namespace, name, base
    )
    if name and not statuses:
        where = f" in namespace {namespace}" if namespace else ""
        fail(
            f"no claim named {name}{where} exists in the cluster (kubectl get pvc -A | grep {name})"
        )
    if fmt == "json":
        click.echo(retire.render_json(statuses, annotation))
    elif statuses:
        click.echo(retire.render_text(statuses, annotation))
    else:
        where = f" in namespace {namespace}" if namespace else ""
        click.echo(f"no claim{where} is marked `{annotation}`: nothing is being retired")


def _base_inventory(repo: str, base_rev: str, paths: Sequence[str]) -> Inventory:
    """The objects the base revision declares (plain manifests), for `retire status --base`."""
    from gate import gitsource  # git mode only: GitPython is slow to import

    sha = gitsource.resolve_revision(repo, base_rev)
    base, _ = build_sides(gitsource.read_tree(repo, sha, paths), [], "default")
    return base


@main.group("fence")
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
    policy = _policy_for_files(config_path)
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
    from gate.fencectl import LEASE_HINT
    from gate.kube import KubeClient

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
    from gate.fencectl import FenceHeldError, hold_fence
    from gate.policy import parse_duration

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
    from gate.fencectl import release_fence

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
    from gate.fencectl import read_fence

    try:
        status = _on_fence(lease, config_path, kubeconfig, kube_context, read_fence)
    except GateError as exc:
        fail(str(exc))
    click.echo(f"{status.state}: {status.describe()}")


# The admission webhook's commands (`gate webhook serve`): a door, not the core. They live in
# `webhook.cli` and need the `webhook` extra (Flask, gunicorn, ...), which `gate check` never
# loads: `gate --help` lists this placeholder, and `_Gate.resolve_command` swaps in the real group
# only when `gate webhook ...` runs.

#: Top-level modules of the `webhook` extra: pip install 'prune-gate[webhook]'.
WEBHOOK_EXTRA = ("flask", "gunicorn", "prometheus_client", "cryptography")

_webhook_door = click.Group(
    "webhook",
    help="The admission webhook: refuse guarded deletions at the API server.",
)
main.add_command(_webhook_door)


def _load_webhook() -> click.Command:
    """The real `gate webhook` group; without the extra, say how to install it and exit 2."""
    import importlib
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in WEBHOOK_EXTRA):
        fail("the webhook needs its extra: pip install 'prune-gate[webhook]'")
    command = importlib.import_module("webhook.cli").webhook
    assert isinstance(command, click.Command)
    return command
