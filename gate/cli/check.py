"""`gate check`: compare base and candidate (rendered, git, or against the live cluster)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from gate.cli.common import (
    POLICY_FILE,
    argocd_options,
    argocd_reading,
    fail,
    fetch_charts_option,
    flux_source_options,
    kube_options,
    parse_flux_ignore,
    parse_flux_source,
    say,
)
from gate.report import FORMATS
from gate.speed import without_cyclic_gc

if TYPE_CHECKING:
    from gate.app.check import CheckRequest, CheckRun, GitInputs, RenderedInputs
    from gate.engine.check import CheckResult
    from gate.engine.context import Context
    from gate.report.tree import SourceLinks
    from gate.sources.github import CIContext

# The application, the engine and the report formats are imported when the check runs, so
# `gate check --help` costs click and the option table, not the rules (test_startup holds it).
# What only some runs need waits further, where it is used: --live (the kubernetes client),
# --defer-to, --sarif and the GitHub step summary.


@click.command("check")
@click.option("--base-manifests", metavar="PATH", help="Rendered base: file, directory or -.")
@click.option("--head-manifests", metavar="PATH", help="Rendered candidate: file, directory or -.")
@click.option("--base", "base_rev", metavar="REV", help="Base git revision (git mode).")
@click.option(
    "--head",
    "head_rev",
    metavar="REV",
    help="Candidate git revision (git mode); :staged is the index, what `git commit` would "
    "record (the pre-commit hook's).",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="DIR",
    help="Directory in the repository to read (repeatable; default: the whole tree).",
)
@click.option(
    "--base-path",
    "base_paths",
    multiple=True,
    metavar="DIR",
    help="Directory to read at the base revision only, instead of --path (repeatable): for a "
    "repository that moves its roots.",
)
@click.option(
    "--head-path",
    "head_paths",
    multiple=True,
    metavar="DIR",
    help="Directory to read at the head revision only, instead of --path (repeatable).",
)
@click.option(
    "--flux-root",
    "flux_roots",
    multiple=True,
    metavar="DIR",
    help="A Flux cluster entry point (e.g. clusters/prod; repeatable): at each revision, build "
    "it and every Kustomization it reaches in this repository, as Flux would apply them "
    "(instead of --path; implies --render kustomize). auto: the one the revision declares (a "
    "FluxInstance's spec.sync.path, a gotk-sync.yaml's Kustomization, a ksail*.yaml's source "
    "directory), said in the report.",
)
@click.option(
    "--base-flux-root",
    "base_flux_roots",
    multiple=True,
    metavar="DIR",
    help="A Flux entry point of the base revision only (repeatable; with --head-flux-root, for "
    "a repository that moves its own; auto as in --flux-root).",
)
@click.option(
    "--head-flux-root",
    "head_flux_roots",
    multiple=True,
    metavar="DIR",
    help="A Flux entry point of the head revision only (repeatable; see --base-flux-root).",
)
@flux_source_options
@argocd_options
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
    default=None,
    help="kustomize: build each --path at each revision (a path without a kustomization is "
    "built as Flux generates one). none: read the YAML files as they are. Unset: read them, "
    "and stop (exit 2) if a kustomization file is among them.",
)
@click.option(
    "--fetch-remote",
    is_flag=True,
    help="Fetch each remote kustomize resource (an https URL in resources:) into the cache "
    "(~/.cache/prune-gate/remote) and judge its objects (needs network; extra CA: "
    "PRUNE_GATE_REMOTE_CA). Without it, remote resources are left out of the build and their "
    "URLs compared between the revisions.",
)
@fetch_charts_option
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
    "--defer-to",
    "defer_to",
    metavar="DIR",
    help="Write the candidate as a speculative deploy should apply it into DIR (new or empty): "
    "every object whose deletion is deferred, and every Flux Kustomization, kept exactly as base "
    "declares it; the record of what was kept goes beside it, in DIR.deferred.json. Exit 0 when "
    "everything that stops the deploy was deferred into it; a block still blocks (exit 1, "
    "nothing written).",
)
@click.option(
    "--sarif",
    "sarif_path",
    type=click.Path(dir_okay=False, writable=True),
    metavar="FILE",
    help="Also write the findings as SARIF 2.1.0 to FILE, for GitHub code scanning "
    "(github/codeql-action/upload-sarif).",
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
    "repeatable): flux:NAMESPACE/NAME, argocd:NAMESPACE/NAME, argocd:APP, helm:NAMESPACE/RELEASE, "
    "label:SELECTOR.",
)
@click.option(
    "--show-standing",
    is_flag=True,
    help="List the standing warnings (present identically on base, so not counted in the "
    "verdict) in the text report; by default it counts them in one line.",
)
@without_cyclic_gc
def check_command(
    fmt: str,
    defer_to: str | None,
    sarif_path: str | None,
    show_standing: bool = False,
    **options: Any,
) -> None:
    """Compare base and candidate manifests and say which deletions must not happen.

    Rendered mode: --base-manifests PATH --head-manifests PATH. Git mode: --base REV --head REV
    [--path DIR]... (in the merge queue, --base/--head default to the merge_group event's SHAs;
    on a pull request, to the merge base of its base and head, and its head).
    """
    from gate.app.check import run_check
    from gate.model.errors import GateError

    try:
        request = check_request(options, quiet=fmt != "text")
        run = run_check(request, say)
    except GateError as exc:
        fail(str(exc))
    result, (base_label, head_label) = run.result, run.labels
    _warn_duplicates(result)
    code = result.decision.verdict.exit_code
    if defer_to is not None:  # before the report, which says what it did
        code, result = _defer(defer_to, run, request, fmt)
    links = _links(run)
    _emit(result, fmt, request.context, base_label, head_label, show_standing, links)
    if sarif_path is not None:
        _write_sarif(sarif_path, result, request.context, base_label, head_label)
    sys.exit(code)


def check_request(options: dict[str, Any], *, quiet: bool = False) -> CheckRequest:
    """The `CheckRequest` that `gate check`'s options say (a usage mistake: `InputError`)."""
    from gate.app.check import CheckRequest, LiveOptions
    from gate.engine.context import Context
    from gate.engine.scope import parse_scope
    from gate.sources.github import detect_ci_context

    ci = detect_ci_context(os.environ)
    name = options["context_name"]
    kube = (options["kubeconfig"], options["kube_context"])
    scopes = tuple(parse_scope(s) for s in options["prune_scopes"])
    live = options["live"] or bool(scopes) or kube != (None, None)
    return CheckRequest(
        inputs=_inputs(options, ci),
        context=ci.context if name == "auto" else Context(name),
        ci=ci,
        repo=options["repo"],
        config_path=options["config_path"],
        namespace=options["namespace"],
        force=options["force"],
        live=LiveOptions(*kube, scopes, quiet) if live else None,
    )


def _inputs(options: dict[str, Any], ci: CIContext) -> RenderedInputs | GitInputs:
    """Rendered or git mode, as the options say; the revisions default to the CI event's."""
    from gate.app.check import GitInputs, RenderedInputs
    from gate.model.errors import InputError

    base, head = options["base_manifests"], options["head_manifests"]
    git = (
        *("base_rev", "head_rev", "paths", "base_paths", "head_paths", "render"),
        *("flux_roots", "base_flux_roots", "head_flux_roots", "argocd_roots"),
    )
    if base is not None or head is not None:
        if any(options[o] for o in git):
            raise InputError(
                "use either --base-manifests/--head-manifests or --base/--head, not both"
            )
        if base is None or head is None:
            raise InputError("rendered mode needs both --base-manifests and --head-manifests")
        return RenderedInputs(base, head)
    base_rev, head_rev = options["base_rev"] or ci.base, options["head_rev"] or ci.head
    if not base_rev or not head_rev:
        raise InputError(
            "nothing to compare: give --base-manifests and --head-manifests, or --base "
            "and --head (in a merge_group, pull_request or push workflow they default "
            "to the event's revisions)"
        )
    paths = options["paths"]
    return GitInputs(
        base_rev,
        head_rev,
        tuple(options["base_paths"] or paths),
        tuple(options["head_paths"] or paths),
        render=options["render"],
        flux_roots=tuple(options["flux_roots"]),
        flux_sources=tuple(parse_flux_source(s) for s in options["flux_sources"]),
        flux_ignore=tuple(parse_flux_ignore(s) for s in options["flux_ignores"]),
        base_flux_roots=tuple(options["base_flux_roots"]),
        head_flux_roots=tuple(options["head_flux_roots"]),
        # A pull request's own changes: from where it forked, unless --base says otherwise.
        from_merge_base=ci.from_merge_base and options["base_rev"] is None,
        fetch_remote=options["fetch_remote"],
        fetch_charts=options["fetch_charts"],
        argocd_roots=tuple(options["argocd_roots"]),
        argocd=argocd_reading(options),
    )


def _defer(
    directory: str, run: CheckRun, request: CheckRequest, fmt: str
) -> tuple[int, CheckResult]:
    """`--defer-to`: the artifact when nothing blocks; the exit code the pipeline acts on, and
    the result as the report must tell it: once every deferred deletion is held back in the
    artifact, the deploy goes ahead there (exit 0), and each fix says to deploy it."""
    from dataclasses import replace

    from gate.app.check import write_deferral
    from gate.engine.verdict import Verdict
    from gate.model.errors import GateError
    from gate.report.common import deferred_into

    try:
        deferred = write_deferral(directory, run, request.context, request.namespace, say)
    except GateError as exc:
        fail(str(exc))
    result = run.result
    if deferred.record is not None and fmt == "github":
        _step_outputs({"deferred-dir": directory, "deferred-record": deferred.record})
    if deferred.record is not None and result.decision.verdict is Verdict.DEFER:
        decision = deferred_into(result.decision, directory, deferred.record)
        result = replace(result, decision=decision)
    return deferred.exit_code, result


def _warn_duplicates(result: CheckResult) -> None:
    """Say where an object declared more than once (copies that agree) comes from: it is one
    object, and a reader should know that removing one copy removes nothing."""
    for side, inventory in (("base", result.base), ("head", result.head)):
        for ref, places in sorted(inventory.duplicates.items()):
            where = ", ".join(str(p) for p in places)
            click.echo(
                f"warning: {side}: {ref.display()} is declared {len(places)} times ({where}); "
                "the copies agree, so it is one object",
                err=True,
            )


def _links(run: CheckRun) -> SourceLinks | None:
    """Where the markdown report links each place: the lines on GitHub, when the run is on
    GitHub Actions and both sides are commits of the repository (git mode)."""
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    base, head = getattr(run.base, "sha", None), getattr(run.head, "sha", None)
    if not server or not repository or not isinstance(base, str) or not isinstance(head, str):
        return None
    from gate.report.tree import SourceLinks

    return SourceLinks(f"{server.rstrip('/')}/{repository}", base, head)


def _emit(
    result: CheckResult,
    fmt: str,
    context: Context,
    base: str,
    head: str,
    standing: bool = False,
    links: SourceLinks | None = None,
) -> None:
    from gate.report import render_report

    color = fmt == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    shown = standing
    click.echo(
        render_report(
            result,
            fmt,
            context=context,
            base=base,
            head=head,
            color=color,
            show_standing=shown,
            links=links,
        )
    )
    if fmt != "github":
        return
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        from pathlib import Path

        from gate.report.github import step_summary

        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(step_summary(result, context=context, base=base, head=head, links=links))
    from gate.model.findings import Severity
    from gate.report.common import count

    found = result.decision.findings
    _step_outputs(
        {
            "verdict": str(result.decision.verdict),
            "blocks": str(count(found, Severity.BLOCK)),
            "defers": str(count(found, Severity.DEFER)),
            "warnings": str(count(found, Severity.WARN)),
            "exempted": str(len(result.decision.exempted)),
        }
    )


def _step_outputs(values: dict[str, str]) -> None:
    """The step's outputs for later steps (`steps.<id>.outputs.verdict`), when GitHub asks."""
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        from pathlib import Path

        with Path(output).open("a", encoding="utf-8") as fh:
            fh.writelines(f"{name}={value}\n" for name, value in values.items())


def _write_sarif(path: str, result: CheckResult, context: Context, base: str, head: str) -> None:
    """The SARIF log beside the report; a file that cannot be written is exit 2, not a pass
    whose upload step then finds nothing."""
    from pathlib import Path

    from gate.report.sarif import render_sarif

    text = render_sarif(result.decision, context=context, base=base, head=head) + "\n"
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"--sarif {path}: cannot write it: {exc.strerror or exc}")
