"""What the `gate` commands share: cluster options, the exit-2 error, notes on stderr.

The policy a command runs under is read in `gate.app.policy`. Light by design: every command
module imports this one to build its options, and `gate CMD --help` should cost click and
little more (tests/unit/test_startup.py), so the engine, the reports and the sources are
imported where they are used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from gate.app.sides import ArgoOptions
    from gate.sources.flux import FluxSource

F = TypeVar("F", bound=Callable[..., Any])

#: `gate.engine.verdict.EXIT_UNDECIDED`, without loading the engine (test_startup compares).
EXIT_UNDECIDED = 2
#: `gate.sources.policyfile.POLICY_FILE`, for the options' help, without loading the policy
#: reader and its YAML library (test_startup compares).
POLICY_FILE = "prune-gate.yaml"


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
    from gate.report.common import inert

    click.echo(f"error: {inert(message)}", err=True)  # a file name may hold `\n::warning::`
    sys.exit(EXIT_UNDECIDED)


def say(message: str) -> None:
    """A note on stderr: what `gate.app` says while it works (its `Say`)."""
    click.echo(message, err=True)


def parse_flux_source(text: str) -> FluxSource:
    """`--flux-source [KIND/]NAMESPACE/NAME[=DIR]`; anything else is an `InputError`."""
    from gate.sources.flux import parse_source

    return parse_source(text)


def parse_flux_ignore(text: str) -> FluxSource:
    """`--flux-ignore-source [KIND/]NAMESPACE/NAME`; anything else is an `InputError`."""
    from gate.sources.flux import parse_source

    return parse_source(text, "--flux-ignore-source", with_dir=False)


def flux_source_options(f: F) -> F:
    """--flux-source and --flux-ignore-source, shared by every command that reads Flux roots."""
    f = click.option(
        "--flux-ignore-source",
        "flux_ignores",
        multiple=True,
        metavar="[KIND/]NS/NAME",
        help=FLUX_IGNORE_HELP,
    )(f)
    return click.option(
        "--flux-source",
        "flux_sources",
        multiple=True,
        metavar="[KIND/]NS/NAME[=DIR]",
        help=FLUX_SOURCE_HELP,
    )(f)


def argocd_options(f: F) -> F:
    """--argocd-root and how it reads Argo CD's sources, shared by gate check and gate history."""
    for option in reversed(
        [
            click.option(
                "--argocd-root",
                "argocd_roots",
                multiple=True,
                metavar="DIR",
                help="An Argo CD entry point (a directory of Applications and ApplicationSets; "
                "repeatable): at each revision, render every Application it reaches whose "
                "source is this repository, as Argo CD's repo-server would, and expand its "
                "ApplicationSets (instead of --path). auto: the directories of Applications no "
                "other Application deploys, said in the report.",
            ),
            click.option(
                "--argocd-repo",
                "argocd_repos",
                multiple=True,
                metavar="URL",
                help="A repoURL that is this repository (repeatable; default: its origin "
                "remote). Sources elsewhere are not rendered, and said so.",
            ),
            click.option(
                "--argocd-revision",
                "argocd_revisions",
                multiple=True,
                metavar="REV",
                help="A targetRevision that follows the branch being checked, besides HEAD "
                "(e.g. main; repeatable). A source at another revision is not rendered.",
            ),
            click.option(
                "--argocd-cluster",
                "argocd_clusters",
                multiple=True,
                metavar="NAME=SERVER[,LABEL=VALUE...]",
                help="A cluster Argo CD knows, for ApplicationSets' clusters generators "
                "(repeatable), besides in-cluster and the cluster Secrets the repository "
                "declares.",
            ),
        ]
    ):
        f = option(f)
    return f


def argocd_reading(options: dict[str, Any]) -> ArgoOptions:
    """The `ArgoOptions` the --argocd-* options give."""
    from gate.app.sides import ArgoOptions
    from gate.sources.appsets import parse_cluster

    return ArgoOptions(
        repos=tuple(options["argocd_repos"]),
        revisions=tuple(options["argocd_revisions"]),
        clusters=tuple(parse_cluster(c) for c in options["argocd_clusters"]),
    )


def text_or_json_option(f: F) -> F:
    """-o/--format text|json, for the commands whose report is a table or a JSON document."""
    return click.option(
        "-o",
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Output format.",
    )(f)


def fetch_charts_option(f: F) -> F:
    """--fetch-charts, shared by gate check and gate history."""
    return click.option(
        "--fetch-charts",
        is_flag=True,
        help="With --flux-root: pull each HelmRelease's chart from its HelmRepository or OCI "
        "registry at the version it pins (with helm, into ~/.cache/prune-gate/charts; needs "
        "network) and render it with the release's values, so that what an uninstall deletes is "
        "known. Without it such a release's content is unknown (RELEASE_CONTENT_UNKNOWN).",
    )(f)


#: `--flux-source`'s help, the same on every command that reads Flux roots.
FLUX_SOURCE_HELP = (
    "A Flux source that is this repository, for --flux-root: [KIND/]NAMESPACE/NAME[=DIR], KIND "
    "GitRepository (default), OCIRepository or Bucket, DIR the directory of this repository its "
    "artifact holds (default: the root; `flux push artifact --path k8s` is =k8s); spec.path is "
    "resolved inside DIR. Repeatable; default: the source the entry point's own Kustomization "
    "reads (an OCIRepository's DIR taken from the entry's place: k8s/clusters/prod applied "
    "with ./clusters/prod is k8s), else GitRepository flux-system/flux-system."
)
#: `--flux-ignore-source`'s help.
FLUX_IGNORE_HELP = (
    "A Flux source deliberately out of scope ([KIND/]NAMESPACE/NAME; repeatable): the "
    "Kustomizations reading it are skipped, and every report says so. Without it, a "
    "Kustomization whose source is not followed stops the check (exit 2)."
)
