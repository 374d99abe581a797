"""`gate config`: the policy file itself (`prune-gate.yaml`), as opposed to what it decides."""

from __future__ import annotations

import click

from gate.cli.common import POLICY_FILE, fail, say


@click.group("config")
def config_group() -> None:
    """The policy file: migrate it to the current apiVersion."""


@config_group.command("migrate")
@click.argument("path", metavar="[FILE]", default=POLICY_FILE)
@click.option("--write", is_flag=True, help="Rewrite FILE in place instead of printing it.")
def migrate_command(path: str, write: bool) -> None:
    """Print FILE (default: prune-gate.yaml) as an apiVersion prune-gate.io/v1 policy.

    A file without apiVersion is read as prune-gate.io/v1alpha1, which has the same keys: its
    text is kept, comments and all, with the apiVersion line added. Exit 2 when the file is not
    a valid policy, or declares a version this gate does not know.
    """
    from gate.app.policy import migrate_policy, write_policy
    from gate.engine.policy import POLICY_API_VERSION
    from gate.model.errors import GateError

    try:
        migrated = migrate_policy(path)
        if write and migrated.changed:
            write_policy(path, migrated.text)
    except GateError as exc:
        fail(str(exc))
    if not migrated.changed:
        say(f"config migrate: {path} is {POLICY_API_VERSION} already: nothing to change")
    else:
        done = "rewritten" if write else "printed on stdout; --write rewrites the file"
        say(f"config migrate: {path} read as {migrated.was}, now {POLICY_API_VERSION}: {done}")
    if not write:
        click.echo(migrated.text, nl=False)
