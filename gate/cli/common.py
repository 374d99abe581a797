"""What the `gate` commands share: cluster options, the exit-2 error, notes on stderr.

The policy a command runs under is read in `gate.app.policy`."""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import click

from gate.engine.verdict import EXIT_UNDECIDED
from gate.model.errors import InputError
from gate.report.common import inert

F = TypeVar("F", bound=Callable[..., Any])


def without_cyclic_gc(f: F) -> F:
    """Run a batch command with the cyclic garbage collector paused, and resume it after.

    A check builds tens of thousands of long-lived, acyclic objects (parsed bodies, identities)
    and frees them at exit; each collection on the way walks all of them again, for nothing
    (on 10,000 objects a side, about a tenth of the run). Reference counting still frees
    everything that is dropped; the collector comes back on when the command returns, so an
    in-process caller (a test) keeps its own.
    """

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return f(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return cast(F, run)


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


def say(message: str) -> None:
    """A note on stderr: what `gate.app` says while it works (its `Say`)."""
    click.echo(message, err=True)


def parse_flux_source(text: str) -> tuple[str, str]:
    """`--flux-source NAMESPACE/NAME` as (namespace, name); anything else is an `InputError`."""
    ns, slash, name = text.partition("/")
    if not slash or not ns or not name or "/" in name:
        raise InputError(f"--flux-source {text!r}: give NAMESPACE/NAME of a GitRepository")
    return ns, name
