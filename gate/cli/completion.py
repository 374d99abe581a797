"""`gate completion bash|zsh|fish`: the shell completion script, as kubectl and helm print theirs.

The script is click's own (`click.shell_completion`): it calls `gate` back with
`_GATE_COMPLETE=<shell>_complete`, so what it completes is always the installed gate's commands
and options, never a copy that drifts from them.
"""

from __future__ import annotations

import click

#: The shells click writes a completion script for.
SHELLS = ("bash", "zsh", "fish")

_HELP = """Print the shell completion script for SHELL (bash, zsh or fish).

\b
Load it into the current shell:
  bash:  source <(gate completion bash)
  zsh:   source <(gate completion zsh)      (after compinit)
  fish:  gate completion fish | source

\b
Load it in every new shell (as kubectl and helm do):
  bash:  gate completion bash > ~/.local/share/bash-completion/completions/gate
         (or add `source <(gate completion bash)` to ~/.bashrc; needs the bash-completion package)
  zsh:   gate completion zsh > "${fpath[1]}/_gate"
         (or add `source <(gate completion zsh)` to ~/.zshrc, after compinit)
  fish:  gate completion fish > ~/.config/fish/completions/gate.fish

The script asks the installed gate what to complete (_GATE_COMPLETE=<shell>_complete gate), so
it follows an upgrade without being written again.
"""


def complete_var(prog_name: str) -> str:
    """The environment variable click's completion is switched on by: `_GATE_COMPLETE` for
    `gate` (click derives it so from the program's name)."""
    return f"_{prog_name.replace('-', '_').replace('.', '_').upper()}_COMPLETE"


@click.command("completion", help=_HELP, short_help="Print the shell completion script.")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    from click.shell_completion import get_completion_class  # here: `gate --help` skips it

    root = ctx.find_root()
    prog_name = root.info_name or "gate"
    cls = get_completion_class(shell)
    assert cls is not None  # click.Choice: one of SHELLS, each of which click knows
    click.echo(cls(root.command, {}, prog_name, complete_var(prog_name)).source())
