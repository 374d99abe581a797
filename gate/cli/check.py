"""`gate check`: compare base and candidate (rendered, git, or against the live cluster)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from gate.cli.common import (
    base_policy,
    fail,
    in_a_checkout,
    kube_options,
    parse_flux_source,
    policy_for_files,
    policy_in_repository,
    read_policy_at,
)
from gate.engine.check import CheckResult, build_sides, check_inventories, check_objects
from gate.engine.context import Context
from gate.engine.guardsettings import PolicySide, check_guard_settings
from gate.engine.policy import Policy
from gate.engine.scope import PruneScope, parse_scope
from gate.engine.verdict import Verdict
from gate.model.errors import ConfigError, GateError, GitError, InputError
from gate.model.findings import Finding, Severity
from gate.model.kinds import check_guarded_kinds, declared_custom_kinds
from gate.model.objects import RawObject
from gate.report import FORMATS, render_report
from gate.report.common import count
from gate.sources.clock import utc_today
from gate.sources.github import CIContext, detect_ci_context
from gate.sources.manifests import read_path
from gate.sources.placement import git_files, place_findings, rendered_files
from gate.sources.policyfile import POLICY_FILE, policy_key_lines
from gate.speed import without_cyclic_gc

# What only some runs need is imported where it is used, so a plain `gate check` does not pay
# for it: --live (the kubernetes client), --defer-to, --sarif and the GitHub step summary.
if TYPE_CHECKING:
    from gate.sources.deferral import Placer

_T = TypeVar("_T")


@click.command("check")
@click.option("--base-manifests", metavar="PATH", help="Rendered base: file, directory or -.")
@click.option("--head-manifests", metavar="PATH", help="Rendered candidate: file, directory or -.")
@click.option("--base", "base_rev", metavar="REV", help="Base git revision (git mode).")
@click.option("--head", "head_rev", metavar="REV", help="Candidate git revision (git mode).")
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
    "(instead of --path; implies --render kustomize).",
)
@click.option(
    "--flux-source",
    "flux_sources",
    multiple=True,
    metavar="NAMESPACE/NAME",
    help="A GitRepository that is this repository, for --flux-root (repeatable; default: the one "
    "the entry point's own Kustomization reads, else flux-system/flux-system).",
)
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
    "repeatable): flux:NAMESPACE/NAME, argocd:APP, helm:NAMESPACE/RELEASE, label:SELECTOR.",
)
@without_cyclic_gc
def check_command(
    base_manifests: str | None,
    head_manifests: str | None,
    base_rev: str | None,
    head_rev: str | None,
    paths: Sequence[str],
    base_paths: Sequence[str],
    head_paths: Sequence[str],
    flux_roots: Sequence[str],
    flux_sources: Sequence[str],
    repo: str,
    render: str | None,
    context_name: str,
    config_path: str | None,
    namespace: str,
    force: bool,
    fmt: str,
    defer_to: str | None,
    sarif_path: str | None,
    live: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    prune_scopes: Sequence[str],
) -> None:
    """Compare base and candidate manifests and say which deletions must not happen.

    Rendered mode: --base-manifests PATH --head-manifests PATH. Git mode: --base REV --head REV
    [--path DIR]... (in the merge queue, --base/--head default to the merge_group event's SHAs;
    on a pull request, to the merge base of its base and head, and its head).
    """
    try:
        ci = detect_ci_context(os.environ)
        context = ci.context if context_name == "auto" else Context(context_name)
        rendered = base_manifests is not None or head_manifests is not None
        if rendered:
            if base_rev or head_rev or paths or base_paths or head_paths or flux_roots or render:
                fail("use either --base-manifests/--head-manifests or --base/--head, not both")
            if base_manifests is None or head_manifests is None:
                fail("rendered mode needs both --base-manifests and --head-manifests")
            if base_manifests == "-" and head_manifests == "-":
                fail("only one side can be read from stdin (-)")
            policy, guard = _rendered_policy(repo, config_path, ci)
            base_raw = read_path(_workspace_relative(base_manifests))
            head_raw = read_path(_workspace_relative(head_manifests))
            base_label, head_label = base_manifests, head_manifests
        else:
            explicit_base = base_rev is not None
            base_rev = base_rev or ci.base
            head_rev = head_rev or ci.head
            if not base_rev or not head_rev:
                fail(
                    "nothing to compare: give --base-manifests and --head-manifests, or --base "
                    "and --head (in a merge_group, pull_request or push workflow they default "
                    "to the event's revisions)"
                )
            # A pull request's own changes: from where it forked, unless --base says otherwise.
            from_merge_base = ci.from_merge_base and not explicit_base
            base_raw, head_raw, policy, base_label, head_label, guard = _read_git(
                repo,
                base_rev,
                head_rev,
                (base_paths or paths, head_paths or paths),
                render,
                config_path,
                from_merge_base,
                flux=(flux_roots, [parse_flux_source(s) for s in flux_sources]),
            )
        if not base_raw and not head_raw:
            raise InputError(
                f"no Kubernetes objects in base ({base_label}) nor candidate ({head_label}): "
                "check the paths; kustomizations need --render kustomize, and Helm charts must be "
                "rendered first (helm template ... > dir, then --base-manifests/--head-manifests)"
            )
        live = live or bool(prune_scopes) or kubeconfig is not None or kube_context is not None
        declared = declared_custom_kinds(r.body for r in (*base_raw, *head_raw))
        if not live:
            check_guarded_kinds(policy.guarded_kinds, declared, live=False)
        if live:
            result = _check_live(
                base_raw,
                head_raw,
                context=context,
                policy=policy,
                namespace=namespace,
                force=force,
                kubeconfig=kubeconfig,
                kube_context=kube_context,
                scopes=[parse_scope(s) for s in prune_scopes],
                quiet=fmt != "text",
                declared=declared,
                extra_findings=guard,
            )
        else:
            result = check_objects(
                base_raw,
                head_raw,
                context=context,
                policy=policy,
                today=utc_today(),
                default_namespace=namespace,
                force=force,
                extra_findings=guard,
            )
        # Where the candidate shows each finding, for annotations: read after the check.
        files = (
            rendered_files(
                _workspace_relative(base_manifests or "-"),
                _workspace_relative(head_manifests or "-"),
            )
            if rendered
            else git_files(repo, base_rev, head_rev, merge_base=from_merge_base)
        )
        result = place_findings(result, files)
    except GateError as exc:
        fail(str(exc))
    _warn_duplicates(result)
    _emit(result, fmt, context, base_label, head_label)
    if sarif_path is not None:
        _write_sarif(sarif_path, result, context, base_label, head_label)
    code = result.decision.verdict.exit_code
    if defer_to is not None:
        from gate.sources.deferral import by_input_file, by_repository_file, by_root

        if rendered:  # a file per input file, named as in the input
            layout = (
                by_input_file(_workspace_relative(base_manifests or "-")),
                by_input_file(_workspace_relative(head_manifests or "-")),
            )
        elif flux_roots or render == "kustomize":  # a file per --path or Kustomization
            layout = (by_root, by_root)
        else:  # a file per file of the repository
            layout = (by_repository_file, by_repository_file)
        meta = {"context": context.value, "base": base_label, "head": head_label}
        code = _defer(defer_to, result, (base_raw, head_raw), layout, namespace, meta, fmt)
    sys.exit(code)


def _defer(
    directory: str,
    result: CheckResult,
    sides: tuple[Sequence[RawObject], Sequence[RawObject]],
    layout: tuple[Placer, Placer],
    namespace: str,
    meta: dict[str, str],
    fmt: str,
) -> int:
    """`--defer-to`: the artifact when nothing blocks; the exit code the pipeline acts on."""
    from gate.engine.defer import plan_deferral
    from gate.sources.deferral import record_path, write_artifact

    decision = result.decision
    if decision.verdict is Verdict.BLOCK:
        click.echo(
            f"defer: nothing written to {directory}: {count(decision.findings, Severity.BLOCK)} "
            "finding(s) block this candidate, and a block is not deferred",
            err=True,
        )
        return decision.verdict.exit_code
    deferral = plan_deferral(result)
    for finding, why in deferral.unkeepable:
        click.echo(
            f"defer: cannot defer {finding.code.value} on {finding.ref.display()}: {why}",
            err=True,
        )
    if deferral.unkeepable:
        click.echo(f"defer: nothing written to {directory}", err=True)
        return Verdict.BLOCK.exit_code
    base_raw, head_raw = sides
    try:
        written = write_artifact(
            directory,
            head_raw,
            base_raw,
            deferral,
            base_file=layout[0],
            head_file=layout[1],
            namespace=namespace,
            meta={"verdict": decision.verdict.value, **meta},
        )
    except GateError as exc:
        fail(f"--defer-to: {exc}")
    kept = ", ".join(k.manifest.ref.display() for k in deferral.kept) or "nothing"
    if deferral.withheld:
        new = ", ".join(w.manifest.ref.display() for w in deferral.withheld)
        kept += f"; left out until the merged deploy: {new}"
    record = record_path(directory)
    click.echo(
        f"defer: wrote {directory} ({len(written)} file(s); what was kept and why: {record}); "
        f"kept as base declares them: {kept}. Deploy {directory}, not the candidate, without "
        f"pruning: kubectl apply --server-side --field-manager=merge-queue --force-conflicts "
        f"-R -f {directory}. Only the merged deploy, checked again with --live, deletes them",
        err=True,
    )
    if fmt == "github":
        _step_outputs({"deferred-dir": directory, "deferred-record": str(record)})
    return 0


def _check_live(
    base_raw: Sequence[RawObject],
    head_raw: Sequence[RawObject],
    *,
    context: Context,
    policy: Policy,
    namespace: str,
    force: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    scopes: Sequence[PruneScope],
    quiet: bool,
    declared: set[tuple[str, str]],
    extra_findings: Sequence[Finding],
) -> CheckResult:
    """`gate check --live`: the same check, with the cluster's truth and the prune set."""
    from gate.kube.snapshot import ApiLister, read_live  # the kubernetes client is slow to import

    base, head = build_sides(base_raw, head_raw, namespace)
    timeout = policy.live_timeout_seconds
    with ApiLister.from_kubeconfig(kubeconfig, kube_context, timeout) as lister:
        read = read_live(lister, policy, base, head, scopes)
        if not quiet:
            pruned = f"; prune set: {len(read.prune_changes)} object(s)" if scopes else ""
            click.echo(f"live: {lister.host}: {read.snapshot.summary()}{pruned}", err=True)
    served = {(c.group, c.kind) for c in read.snapshot.custom_kinds.values()}
    check_guarded_kinds(policy.guarded_kinds, declared | served, live=True)
    return check_inventories(
        base,
        head,
        context=context,
        policy=policy,
        today=utc_today(),
        force=force,
        live=read.snapshot.state,
        extra_changes=read.prune_changes,
        extra_findings=extra_findings,
    )


def _read_git(
    repo: str,
    base_rev: str,
    head_rev: str,
    paths: tuple[Sequence[str], Sequence[str]],
    render: str | None,
    config_path: str | None,
    from_merge_base: bool = False,
    flux: tuple[Sequence[str], Sequence[tuple[str, str]]] = ((), ()),
) -> tuple[list[RawObject], list[RawObject], Policy, str, str, list[Finding]]:
    """Both sides from git, each from its own paths (base, head), and GUARD_TAMPERED for each
    guard setting the candidate's policy file changes. With `from_merge_base` (a pull request),
    the base side is the merge base of base and head; the policy still comes from `base_rev`,
    the branch it merges into."""
    from gate.sources import gitsource  # git mode only: GitPython is slow to import
    from gate.sources import render as renderers

    target_sha = gitsource.resolve_revision(repo, base_rev)
    head_sha = gitsource.resolve_revision(repo, head_rev)
    policy = base_policy(repo, target_sha, config_path)
    base_sha = gitsource.merge_base(repo, target_sha, head_sha) if from_merge_base else target_sha
    guard = _guard_setting_findings(repo, config_path, base_sha, head_sha)
    base_paths, head_paths = paths
    _refuse_changed_submodules(repo, (base_sha, base_paths), (head_sha, head_paths))
    flux_roots, flux_sources = flux
    if flux_roots:
        from gate.sources.flux import render_flux

        if base_paths or head_paths or render == "none":
            raise InputError("--flux-root builds what Flux applies: leave out --path and --render")

        def flux_side(sha: str) -> list[RawObject]:
            return [o for r in flux_roots for o in render_flux(repo, sha, r, sources=flux_sources)]

        base_raw, head_raw = _both(lambda: flux_side(base_sha), lambda: flux_side(head_sha))
    elif render == "kustomize":
        if not base_paths or not head_paths:
            raise InputError("--render kustomize needs at least one --path to build (per side)")
        base_raw, head_raw = _both(
            lambda: renderers.render_kustomize_paths(repo, base_sha, base_paths),
            lambda: renderers.render_kustomize_paths(repo, head_sha, head_paths),
        )
    else:
        if render is None:
            _refuse_kustomizations(repo, base_sha, base_paths)
            _refuse_kustomizations(repo, head_sha, head_paths)
        base_raw = gitsource.read_tree(repo, base_sha, base_paths)
        head_raw = gitsource.read_tree(repo, head_sha, head_paths)
    base_label = (
        f"merge base {base_sha[:12]} of {_rev_label(base_rev, target_sha)} and head"
        if from_merge_base
        else _rev_label(base_rev, base_sha)
    )
    head_label = _rev_label(head_rev, head_sha)
    return base_raw, head_raw, policy, base_label, head_label, guard


def _rendered_policy(
    repo: str, config_path: str | None, ci: CIContext
) -> tuple[Policy, list[Finding]]:
    """The policy of rendered mode, and GUARD_TAMPERED for the guard settings the candidate
    changes. In a CI job whose event names a base revision the working tree is the candidate's
    (a merge-group job checks out the candidate), so the policy is read at that base revision as
    in git mode, never from disk: a candidate would otherwise choose its own severities and
    guards. Outside CI (no event base) the working tree is the person's own, read from disk; so
    is a `--config` outside the repository, or outside any checkout when there is no repository
    (a job that gates downloaded renders against a policy from a secret). With an event base, no
    repository to read it from and a policy in a checkout or the working tree, the policy is
    refused (it may be the candidate's), and so is a base revision the clone lacks (a shallow
    clone), whatever the working tree holds."""
    if not ci.base:
        return policy_for_files(config_path), []
    from gate.sources import gitsource  # git only: GitPython is slow to import

    if not gitsource.is_repository(repo):
        if config_path is None and not os.path.lexists(POLICY_FILE):
            return Policy(), []  # no repository and no policy: the defaults
        if config_path is not None and not in_a_checkout(config_path):
            return policy_for_files(config_path), []  # a file no checkout holds
        raise InputError(
            f"the {ci.event} event names base revision {ci.base}, so the policy "
            f"{config_path or POLICY_FILE} may be the candidate's, and it is read at that "
            f"revision; but {repo} is not a git repository to read it from: run in the "
            "repository's clone, or give it with --repo"
        )
    if config_path is not None and policy_in_repository(repo, config_path) is None:
        return policy_for_files(config_path), []  # outside the repository: no candidate's
    try:
        target = gitsource.resolve_revision(repo, ci.base)
    except GitError as exc:
        raise InputError(
            f"the {ci.event} event names base revision {ci.base}, so "
            f"{config_path or POLICY_FILE} in the working tree may be the candidate's; it is "
            f"read at that revision, which cannot be read here ({exc}); fetch it "
            "(actions/checkout with fetch-depth: 0), or pass --config with a policy file "
            "outside the checkout"
        ) from None
    policy = base_policy(repo, target, config_path)
    if not ci.head:
        return policy, []
    head = gitsource.resolve_revision(repo, ci.head)
    base = gitsource.merge_base(repo, target, head) if ci.from_merge_base else target
    return policy, _guard_setting_findings(repo, config_path, base, head)


def _guard_setting_findings(
    repo: str, config_path: str | None, base_sha: str, head_sha: str
) -> list[Finding]:
    """GUARD_TAMPERED for each guard setting (`gate.engine.guardsettings`) that the policy file
    changes from the base side to the candidate; one for the file when the candidate's cannot be
    read (a symlink, invalid YAML, an unknown key). A `--config` outside the repository is no
    candidate's: nothing to compare. On a pull request the base side is the merge base, so a
    change the base branch made since is not taken for the pull request's own, reversed."""
    from gate.sources import gitsource

    where = policy_in_repository(repo, config_path)
    if where is None:
        return []
    if gitsource.read_blob(repo, base_sha, where) == gitsource.read_blob(repo, head_sha, where):
        return []  # the same bytes (or no file on either side): nothing changes

    def side(sha: str) -> PolicySide:
        found = read_policy_at(repo, sha, where)
        if found is None:
            return PolicySide(None)
        return PolicySide(found[0], policy_key_lines(found[1]))

    base = side(base_sha)
    try:
        head: PolicySide | str = side(head_sha)
    except ConfigError as exc:
        head = str(exc)
    return check_guard_settings(where, base, head)


def _both(read_base: Callable[[], _T], read_head: Callable[[], _T]) -> tuple[_T, _T]:
    """Read base and candidate at once: their builds are subprocesses (kustomize, per revision),
    so the second core pays. An error of the base side is raised first, as in order."""
    from concurrent.futures import ThreadPoolExecutor  # it loads logging: only when built

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="prune-gate-side") as pool:
        base = pool.submit(read_base)
        head = pool.submit(read_head)
        return base.result(), head.result()


def _refuse_changed_submodules(
    repo: str, base: tuple[str, Sequence[str]], head: tuple[str, Sequence[str]]
) -> None:
    """A submodule bumped (or added, or removed) under the paths changes what is deployed in a
    way prune-gate cannot read: stop (exit 2) rather than pass it unseen."""
    from gate.sources import gitsource

    before = gitsource.submodules(repo, *base)
    after = gitsource.submodules(repo, *head)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        path = changed[0]
        old, new = before.get(path, "none")[:12], after.get(path, "none")[:12]
        raise InputError(
            f"submodule {path} changes ({old} -> {new}): its manifests are another "
            "repository's, which prune-gate does not read, so what the change deletes is "
            "unknown. Check that repository's change on its own (gate check --repo "
            f"{path} --base {old} --head {new}); to compare the rest without it, give --path "
            "for the directories beside it"
        )


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


def _refuse_kustomizations(repo: str, sha: str, paths: Sequence[str]) -> None:
    """Plain git mode reads files one by one; beside a kustomization that gives wrong answers
    (a claim dropped from `resources:`, a `$patch: delete`, a `namespace:` override all pass
    unseen), so it stops unless `--render none` says to read the files anyway."""
    from gate.sources import gitsource

    found = gitsource.kustomization_files(repo, sha, paths)
    if found:
        dirs = sorted({f.rpartition("/")[0] or "." for f in found})
        roots = [d for d in dirs if not any(d.startswith(o + "/") for o in dirs if o != ".")]
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        raise InputError(
            f"{', '.join(found[:3])}{more} at {sha[:12]} is kustomize input: what the deployer "
            "applies is its build (resources: lists, $patch: delete, namespace: overrides), "
            "which reading files one by one does not see. Build it: --render kustomize with a "
            "--path per root (the directories your Flux Kustomizations' spec.path name; here "
            f"perhaps {' '.join('--path ' + r for r in roots[:3])}); or read the files anyway "
            "with --render none"
        )


def _workspace_relative(path: str) -> str:
    """An absolute path inside the working directory, made relative: annotations need that."""
    p = Path(path)
    if p.is_absolute() and p.is_relative_to(Path.cwd()):
        return p.relative_to(Path.cwd()).as_posix() or "."
    return path


def _rev_label(rev: str, sha: str) -> str:
    return sha if sha.startswith(rev) else f"{rev} ({sha[:12]})"


def _emit(result: CheckResult, fmt: str, context: Context, base: str, head: str) -> None:
    color = fmt == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    click.echo(render_report(result, fmt, context=context, base=base, head=head, color=color))
    if fmt != "github":
        return
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        from gate.report.github import step_summary

        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(step_summary(result, context=context, base=base, head=head))
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
        with Path(output).open("a", encoding="utf-8") as fh:
            fh.writelines(f"{name}={value}\n" for name, value in values.items())


def _write_sarif(path: str, result: CheckResult, context: Context, base: str, head: str) -> None:
    """The SARIF log beside the report; a file that cannot be written is exit 2, not a pass
    whose upload step then finds nothing."""
    from gate.report.sarif import render_sarif

    text = render_sarif(result.decision, context=context, base=base, head=head) + "\n"
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"--sarif {path}: cannot write it: {exc.strerror or exc}")
