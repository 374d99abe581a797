"""`kubectl prune-gate ...`: gate's cluster commands as a kubectl plugin (`kubectl-prune_gate`).

kubectl runs `kubectl-prune_gate` from PATH for `kubectl prune-gate` and hands it every word
after the plugin's name, flags included; kubectl itself reads none of them. So the plugin speaks
kubectl's dialect where gate's differs: `--context` is an alias of gate's `--kube-context`
(`--kubeconfig` and `-n/--namespace` are spelled alike already), and `--help` shows
`kubectl prune-gate CMD`. Only the commands that work on a cluster are here; `check` and
`history` read git and manifests, so asking for them says to run `gate` instead.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, NoReturn

import click

from gate.cli.common import fail
from gate.cli.root import COMMANDS, _Door, _Gate, _lazy
from gate.speed import quick_exit

#: The commands `kubectl prune-gate` runs: the ones that work on the live cluster.
CLUSTER_COMMANDS = ("doctor", "heal", "retire", "fence", "audit", "version")

#: gate's commands that are not the plugin's, and why each is gate's own.
NOT_A_CLUSTER_COMMAND = {
    "check": "it compares manifests or git revisions (`gate check --live` adds the cluster)",
    "history": "it replays the gate over a repository's past commits",
    "codes": "it lists the finding codes",
    "completion": "it prints gate's shell completion",
    "config": "it reads and rewrites the policy file",
    "webhook": "it runs the admission webhook",
    "argocd": "it is a merge-queue job's deploy step (Argo CD syncs a deferred artifact)",
}

#: The name kubectl users type; `--help` and usage errors say it.
PROG_NAME = "kubectl prune-gate"

#: kubectl's spelling of gate's options: kubectl's name -> gate's parameter name.
KUBECTL_ALIASES = {"--context": "kube_context"}


def with_kubectl_aliases(command: click.Command) -> click.Command:
    """A copy of `command` (and its subcommands) whose options also answer to kubectl's names
    (`--context` for `--kube-context`), and whose `--live` is on: a kubectl plugin reads the
    cluster. A copy, so that gate's own commands keep theirs in the same process."""
    command = copy.deepcopy(command)
    _alias(command)
    return command


def _alias(command: click.Command) -> None:
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        for alias, name in KUBECTL_ALIASES.items():
            if param.name == name and alias not in param.opts:
                param.opts.append(alias)
        if param.name == "live" and param.is_flag:
            param.default = True  # `gate audit --live`: a kubectl plugin reads the cluster
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _alias(sub)


class _Plugin(_Gate):
    """gate's group narrowed to its cluster commands, in kubectl's dialect."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in NOT_A_CLUSTER_COMMAND:
            if ctx.resilient_parsing:  # completing: nothing to offer, nothing to say
                return None, None, []
            fail(
                f"`{PROG_NAME} {args[0]}` is not a cluster command: "
                f"{NOT_A_CLUSTER_COMMAND[args[0]]}. Run it as `gate {args[0]} ...` "
                f"(`gate {args[0]} --help` says how)"
            )
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            command = with_kubectl_aliases(command)
        return name, command, rest


@click.group(
    cls=_Plugin,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option("--debug", is_flag=True, help="On an internal error, print its traceback.")
def plugin(debug: bool) -> None:
    """prune-gate's cluster commands, as a kubectl plugin.

    kubectl's flags work as in kubectl: --kubeconfig, --context (gate's --kube-context) and
    -n/--namespace where the command takes a namespace; --live is implied. `gate check` and
    `gate history` read git, not the cluster: run them as gate.

    With prune-gate installed by pip, kubectl's shell completion (kubectl 1.26+) completes the
    plugin's commands and flags too (through kubectl_complete-prune_gate).

    Exit codes as gate's: 2 could not decide, 3 internal error (a bug: please report it); each
    command's --help says what its 0 and 1 mean.
    """


for _name in CLUSTER_COMMANDS:
    _summary, _module, _attr = COMMANDS[_name]
    plugin.add_command(_Door(_name, _summary, _lazy(_module, _attr)))


def main(args: list[str] | None = None, **extra: Any) -> Any:
    """The plugin's group, run as kubectl users name it."""
    extra.setdefault("complete_var", "_KUBECTL_PRUNE_GATE_COMPLETE")
    return plugin.main(args=args, prog_name=PROG_NAME, **extra)


def run() -> NoReturn:
    """`kubectl-prune_gate`: the command, then a quick exit with its code, as `gate` does."""
    try:
        main(sys.argv[1:])
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    quick_exit(code)


#: cobra's completion directives kubectl's plugin completion reads from the last line.
_FILES, _NO_FILES, _DIRECTORIES = 0, 4, 16


def complete() -> NoReturn:
    """`kubectl_complete-prune_gate`: completion of `kubectl prune-gate ...` (kubectl 1.26+).

    kubectl runs it from PATH with the words after the plugin's name, the one being completed
    last (empty after a space), and reads cobra's format: a line per choice (`value<TAB>help`),
    then `:<directive>`. The choices are click's, from the same commands `kubectl prune-gate`
    runs, kubectl's aliases included."""
    from click.shell_completion import ShellComplete  # here: the plugin's start-up skips it

    words = sys.argv[1:] or [""]
    shell = ShellComplete(plugin, {}, PROG_NAME, "_KUBECTL_PRUNE_GATE_COMPLETE")
    refused = len(words) > 1 and words[0] in NOT_A_CLUSTER_COMMAND  # nothing to offer there
    items = [] if refused else shell.get_completions(words[:-1], words[-1])
    directive = _NO_FILES
    for item in items:
        if item.type == "file":
            directive = _FILES
        elif item.type == "dir":
            directive = _DIRECTORIES
        else:
            help_text = " ".join((item.help or "").split())
            click.echo(f"{item.value}\t{help_text}" if help_text else str(item.value))
    click.echo(f":{directive}")
    quick_exit(0)


if __name__ == "__main__":
    run()
