"""What the `gate` commands share: cluster options, the exit-2 error, notes on stderr.

The policy a command runs under is read in `gate.app.policy`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from gate.engine.verdict import EXIT_UNDECIDED
from gate.model.errors import InputError
from gate.report.common import inert

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


def say(message: str) -> None:
    """A note on stderr: what `gate.app` says while it works (its `Say`)."""
    click.echo(message, err=True)


def parse_flux_source(text: str) -> tuple[str, str]:
    """`--flux-source NAMESPACE/NAME` as (namespace, name); anything else is an `InputError`."""
    ns, slash, name = text.partition("/")
    if not slash or not ns or not name or "/" in name:
        raise InputError(f"--flux-source {text!r}: give NAMESPACE/NAME of a GitRepository")
    return ns, name
