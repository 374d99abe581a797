"""What the `gate` commands share: cluster options, the exit-2 error, the policy of the files."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from gate.engine.policy import Policy
from gate.engine.verdict import EXIT_UNDECIDED
from gate.model.errors import InputError
from gate.report.common import inert
from gate.sources.policyfile import (
    POLICY_FILE,
    load_policy,
)

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


def policy_for_files(config_path: str | None) -> Policy:
    if config_path:
        return load_policy(config_path)
    default = Path(POLICY_FILE)
    # lexists, not is_file: a symlink to /dev/null must be refused, not read as "no policy".
    return load_policy(default) if os.path.lexists(default) else Policy()


def parse_flux_source(text: str) -> tuple[str, str]:
    """`--flux-source NAMESPACE/NAME` as (namespace, name); anything else is an `InputError`."""
    ns, slash, name = text.partition("/")
    if not slash or not ns or not name or "/" in name:
        raise InputError(f"--flux-source {text!r}: give NAMESPACE/NAME of a GitRepository")
    return ns, name
