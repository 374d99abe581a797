"""The `gate` command group: loads each command only when it runs, and turns a crash into exit 3.

Every `GateError` becomes `error: <what>` on stderr and exit code 2 ("could not decide");
click's own usage errors exit 2 as well. Exit codes come from `gate.engine.verdict`. The
commands live one group per module (`check`, `history`, `retire`, `fence`); no decisions are
made here.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

#: Exit code of an internal error (`gate.engine.verdict.EXIT_BUG`, which test_cli compares).
EXIT_BUG = 3


class _Door(click.Command):
    """A command `gate --help` lists by its summary, whose module is imported only when it runs.

    `gate --help` and `gate --version` import no engine, no report and no YAML library: start-up
    is paid on every CI step. test_cli holds each summary to its command's own.
    """

    def __init__(self, name: str, summary: str, load: Callable[[], click.Command]) -> None:
        super().__init__(name, help=summary)
        self.load = load


class _Gate(click.Group):
    """The `gate` group: loads each command only when it runs, and turns a crash into exit 3.

    An exception no command expected is a bug, not a verdict: exit 1 would read as "blocked by
    policy" and exit 0 as a pass, so it gets its own code and asks to be reported.
    """

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, _Door):
            return name, command.load(), rest
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _CLICK_FLOW:
            raise
        except Exception as exc:
            from gate.model.errors import GateError  # here: `gate --help` loads no model

            if isinstance(exc, GateError):  # a command that forgot to map it: "could not decide"
                from gate.cli.common import fail

                fail(str(exc))
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
    import traceback  # only on a crash: it loads linecache and tokenize

    from gate.report.common import inert

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
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, param, value: _print_version(ctx, param, value),
    help="Show the version, the native YAML reader and the kustomize renderer, and exit.",
)
@click.option("--debug", is_flag=True, help="On an internal error, print its traceback.")
def main(debug: bool) -> None:
    """prune-gate: stop deletions that lose data or wedge a deploy.

    Exit codes: 0 pass (allow or warn), 1 blocked or deferred by policy, 2 could not decide,
    3 internal error (a bug: please report it).
    """


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:  # loaded only when asked: `gate --help` stays quick
        from gate.cli.version import print_version

        print_version(ctx, param, value)


def _lazy(module: str, attr: str) -> Callable[[], click.Command]:
    def load() -> click.Command:
        import importlib

        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    return load


#: name: (summary for `gate --help`, module, attribute). The summary is the command's own short
#: help, kept here so that listing the commands loads none (test_startup holds the two equal).
COMMANDS = {
    "check": (
        "Compare base and candidate manifests and say which deletions must not happen.",
        "gate.cli.check",
        "check_command",
    ),
    "retire": (
        "Two-stage retirement of claims: where each one stands.",
        "gate.cli.retire",
        "retire_group",
    ),
    "fence": (
        "The speculation fence: the Lease CI holds while a speculative deploy is in flight.",
        "gate.cli.fence",
        "fence_group",
    ),
    "argocd": (
        "Argo CD: deploy a deferred artifact through its application controller.",
        "gate.cli.argocd",
        "argocd_group",
    ),
    "doctor": (
        "Explain what each stuck deletion is waiting on, with its evidence and the fix.",
        "gate.cli.doctor",
        "doctor_command",
    ),
    "heal": (
        "Get out of a wedge without losing data: dry run by default, --apply acts.",
        "gate.cli.heal",
        "heal_command",
    ),
    "audit": (
        "List the guarded claims whose data a deletion would destroy.",
        "gate.cli.audit",
        "audit_command",
    ),
    "config": (
        "The policy file: migrate it to the current apiVersion.",
        "gate.cli.config",
        "config_group",
    ),
    "version": (
        "Print the version, and which native reader and kustomize renderer are active, from where.",
        "gate.cli.version",
        "version_command",
    ),
    "history": (
        "Replay the gate over past commits: how would it have judged each one?",
        "gate.cli.history",
        "history_command",
    ),
    "codes": (
        "List every finding code and what it means, or print one code's page.",
        "gate.cli.codes",
        "codes_command",
    ),
    "completion": (
        "Print the shell completion script.",
        "gate.cli.completion",
        "completion_command",
    ),
}
for _name, (_summary, _module, _attr) in COMMANDS.items():
    main.add_command(_Door(_name, _summary, _lazy(_module, _attr)))


# The admission webhook's commands (`gate webhook serve`): a door, not the core. They live in
# `webhook.cli` and need the `webhook` extra (h11, h2, ...), which `gate check` never
# loads: `gate --help` lists this placeholder, and `_Gate.resolve_command` swaps in the real group
# only when `gate webhook ...` runs.

#: Top-level modules of the `webhook` extra: pip install 'prune-gate[webhook]'.
WEBHOOK_EXTRA = ("h11", "h2", "prometheus_client", "cryptography")


def _load_webhook() -> click.Command:
    """The real `gate webhook` group; without the extra, say how to install it and exit 2."""
    import importlib
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in WEBHOOK_EXTRA):
        from gate.cli.common import fail

        fail("the webhook needs its extra: pip install 'prune-gate[webhook]'")
    command = importlib.import_module("webhook.cli").webhook
    assert isinstance(command, click.Command)
    return command


main.add_command(
    _Door(
        "webhook",
        "The admission webhook: refuse guarded deletions at the API server.",
        _load_webhook,
    )
)
