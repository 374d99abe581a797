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
from gate.model.errors import ConfigError, GateError, InputError
from gate.report.common import inert
from gate.sources.policyfile import (
    POLICY_FILE,
    decode_policy,
    load_policy,
    policy_from_text,
    require_regular_file,
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


def policy_in_repository(repo: str, config_path: str | None) -> str | None:
    """Where the policy is in the repository (a posix path from its root), to be read at a
    revision: `POLICY_FILE` by default, `--config` when it is inside the work tree. None when
    `--config` is outside it (or there is no repository): that file is read from disk, since no
    candidate writes it.

    The path is never resolved through a symlink (a candidate's link to `/dev/null` or outside
    the tree would otherwise choose the policy), and a symlink on disk is refused.
    """
    if config_path is None:
        return POLICY_FILE
    require_regular_file(config_path)
    from gate.sources import gitsource  # git mode only: GitPython is slow to import

    try:
        with gitsource.open_repo(repo) as r:
            root = r.working_tree_dir
    except GateError:
        root = None
    return _inside(Path(root), config_path) if root is not None else None


def in_a_checkout(path: str) -> bool:
    """True when the file `path` lies in a git work tree (its directory is in a repository):
    with a base revision to read at, such a policy may be a candidate's checkout, and is read
    from disk only when it is outside every checkout."""
    from gate.sources import gitsource  # git only: GitPython is slow to import

    return gitsource.is_repository(os.path.dirname(os.path.abspath(path)) or ".")  # noqa: PTH100, PTH120


def read_policy_at(repo: str, sha: str, where: str) -> tuple[Policy, str] | None:
    """The policy file `where` as revision `sha` has it, and its text; None when the revision
    has no such file. A symlink blob, bytes that are not UTF-8 text, or an invalid policy is a
    `ConfigError` naming `where at sha`."""
    from gate.sources import gitsource

    blob = gitsource.read_blob(repo, sha, where)
    if blob is None:
        return None
    label = f"{where} at {sha[:12]}"
    is_link, data = blob
    if is_link:
        raise ConfigError(
            f"{label}: the policy file is a symlink in that revision (git mode 120000); a "
            "policy must be a regular file: commit the file itself"
        )
    text = decode_policy(data, label)
    return policy_from_text(text, label), text


def base_policy(repo: str, base_sha: str, config_path: str | None) -> Policy:
    """The policy as the base revision has it: a candidate must not switch its own gate off,
    nor choose the guards (`gate check`, `gate fence`).

    A `--config` inside the repository is read at the base revision too (if the base lacks it,
    the defaults apply until it is merged); one outside the repository is read from disk. A
    symlink is refused on disk and in the base.
    """
    where = policy_in_repository(repo, config_path)
    if where is None:
        assert config_path is not None  # only a --config can be outside the repository
        return load_policy(config_path)
    found = read_policy_at(repo, base_sha, where)
    if found is None:
        if config_path is not None:
            click.echo(
                f"note: {where} does not exist at the base revision {base_sha[:12]}: using the "
                "default policy (a candidate's policy takes effect once it is merged)",
                err=True,
            )
        return Policy()
    return found[0]


def _inside(root: Path, config_path: str) -> str | None:
    """`config_path` relative to the work tree `root` (posix), or None when it is outside.

    Lexical first: a path inside the tree as written is that path, whatever the working tree's
    directories link to (a candidate that turns `ci/` into a link to a directory base lacks must
    not have `ci/policy.yaml` read at the link's target, where base has nothing: the defaults).
    Only a path outside the tree as written has its directory resolved (the tree reached through
    another spelling, e.g. /tmp and /private/tmp); the file's own name is never followed.
    """
    target = Path(os.path.normpath(Path(config_path).absolute()))
    roots = (Path(os.path.normpath(root.absolute())), root.resolve())
    for candidate in (target, target.parent.resolve() / target.name):
        for base in roots:
            if candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix()
    return None


def parse_flux_source(text: str) -> tuple[str, str]:
    """`--flux-source NAMESPACE/NAME` as (namespace, name); anything else is an `InputError`."""
    ns, slash, name = text.partition("/")
    if not slash or not ns or not name or "/" in name:
        raise InputError(f"--flux-source {text!r}: give NAMESPACE/NAME of a GitRepository")
    return ns, name
