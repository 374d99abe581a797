"""`run_check`: the one check behind `gate check` (and the Action that runs it).

A `CheckRequest` says what to compare (rendered directories, or two revisions read one way),
under which policy source, in which context, and whether to read the cluster; `run_check`
reads the policy and both sides, runs the engine's check (with the cluster's truth when live),
and places each finding where the candidate shows it. `write_deferral` is `--defer-to`: the
speculative deploy's artifact, or why none is written. The door prints; nothing here does,
except through the `say` callback it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gate.app.policy import Say, guard_setting_findings, policy_at, rendered_policy, to_stderr
from gate.app.sides import (
    ARGOCD_ROOT_ALONE,
    FLUX_ROOT_ALONE,
    ArgoOptions,
    FilesSide,
    GitReading,
    Side,
    read_both,
    refuse_changed_submodules,
    rev_label,
)
from gate.engine.check import CheckResult, build_sides, check_inventories, check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.engine.scope import PruneScope
from gate.engine.verdict import Verdict
from gate.model.errors import GateError, InputError
from gate.model.findings import Finding, Severity
from gate.model.kinds import check_guarded_kinds, declared_custom_kinds
from gate.model.objects import RawObject
from gate.report.common import count
from gate.sources.clock import utc_today
from gate.sources.github import CIContext
from gate.sources.placement import GitFiles, SideFiles, place_findings, rendered_files

if TYPE_CHECKING:
    from gate.sources.flux import FluxSource  # loaded when a Flux side is read


@dataclass(frozen=True)
class RenderedInputs:
    """Rendered mode: two manifest paths (a file, a directory, or `-` for one of them)."""

    base: str
    head: str

    def __post_init__(self) -> None:
        if self.base == "-" and self.head == "-":
            raise InputError("only one side can be read from stdin (-)")


@dataclass(frozen=True)
class GitInputs:
    """Git mode: two revisions, each read under its own paths, as `reading` says.

    `from_merge_base` (a pull request's own changes): the base side is the merge base of the
    two revisions; the policy still comes from `base_rev`, the branch it merges into.
    """

    base_rev: str
    head_rev: str
    base_paths: tuple[str, ...] = ()
    head_paths: tuple[str, ...] = ()
    render: str | None = None
    flux_roots: tuple[str, ...] = ()
    flux_sources: tuple[FluxSource, ...] = ()
    from_merge_base: bool = False
    #: Entry points of one side only (`--base-flux-root`, `--head-flux-root`: a repository
    #: that moves its own), read besides `flux_roots`.
    base_flux_roots: tuple[str, ...] = ()
    head_flux_roots: tuple[str, ...] = ()
    flux_ignore: tuple[FluxSource, ...] = ()
    #: `--fetch-remote`: fetch remote kustomize resources (HTTPS) and judge their objects.
    fetch_remote: bool = False
    #: `--fetch-charts`: read HelmReleases' charts from their HelmRepository or OCI registry.
    fetch_charts: bool = False
    #: `--argocd-root`: Argo CD entry points, read at both revisions, and how.
    argocd_roots: tuple[str, ...] = ()
    argocd: ArgoOptions = field(default_factory=ArgoOptions)

    @property
    def roots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Each side's Flux (or Argo CD) entry points."""
        if self.argocd_roots:
            return self.argocd_roots, self.argocd_roots
        return self.flux_roots + self.base_flux_roots, self.flux_roots + self.head_flux_roots

    def __post_init__(self) -> None:
        """The refusals of option combinations that cannot be read, before anything is."""
        if self.argocd_roots and (self.flux_roots or self.base_flux_roots or self.head_flux_roots):
            raise InputError(
                "--argocd-root and --flux-root read one deployer each: check each with its own "
                "gate check"
            )
        if self.argocd_roots and (self.base_paths or self.head_paths or self.render):
            raise InputError(ARGOCD_ROOT_ALONE)
        base_roots, head_roots = self.roots
        if bool(base_roots) != bool(head_roots):
            raise InputError(
                "--base-flux-root and --head-flux-root go together (or --flux-root for both "
                "sides): each side needs an entry point"
            )
        if base_roots and (self.base_paths or self.head_paths or self.render == "none"):
            raise InputError(FLUX_ROOT_ALONE)
        if (
            not base_roots
            and self.render == "kustomize"
            and (not self.base_paths or not self.head_paths)
        ):
            raise InputError("--render kustomize needs at least one --path to build (per side)")


@dataclass(frozen=True)
class LiveOptions:
    """`--live`: how to reach the cluster, and the deployer's prune set to read there."""

    kubeconfig: str | None = None
    kube_context: str | None = None
    scopes: tuple[PruneScope, ...] = ()
    #: No progress line (the report is machine-read).
    quiet: bool = False


@dataclass(frozen=True)
class CheckRequest:
    """What one check compares, under which policy, in which context."""

    inputs: RenderedInputs | GitInputs
    context: Context
    #: The CI event (its base revision decides where the policy is read in rendered mode);
    #: None: no event, the policy of the files.
    ci: CIContext | None = None
    repo: str = "."
    config_path: str | None = None
    namespace: str = "default"
    force: bool = False
    live: LiveOptions | None = None


@dataclass(frozen=True)
class CheckRun:
    """A check's answer (findings placed), and what `--defer-to` and the reports need."""

    result: CheckResult
    base: Side
    head: Side
    objects: tuple[list[RawObject], list[RawObject]]

    @property
    def labels(self) -> tuple[str, str]:
        return self.base.label, self.head.label


def run_check(request: CheckRequest, say: Say = to_stderr) -> CheckRun:
    """Read the policy and both sides, check, and place the findings (a `GateError` when the
    answer cannot be known: exit 2 at the door)."""
    inputs = request.inputs
    if isinstance(inputs, RenderedInputs):
        policy, guard, (base, head), files = _rendered_sides(request, inputs, say)
        objects = base.read(), head.read()
    else:
        from gate.sources.remote import LEDGER

        policy, guard, (base, head), files = _git_sides(request, inputs, say)
        LEDGER.reset(fetch=inputs.fetch_remote)
        objects = read_both(base, head)
    base_raw, head_raw = objects
    guard, notes = _remote_findings(base, head, request.context, guard)
    notes = [*_reading_notes(base, head), *notes]
    if not base_raw and not head_raw:
        raise InputError(
            f"no Kubernetes objects in base ({base.label}) nor candidate ({head.label}): "
            "check the paths; kustomizations need --render kustomize, and Helm charts must be "
            "rendered first (helm template ... > dir, then --base-manifests/--head-manifests)"
        )
    declared = declared_custom_kinds(r.body for r in (*base_raw, *head_raw))
    if request.live is None:
        check_guarded_kinds(policy.guarded_kinds, declared, live=False)
        result = check_objects(
            base_raw,
            head_raw,
            context=request.context,
            policy=policy,
            today=utc_today(),
            default_namespace=request.namespace,
            force=request.force,
            extra_findings=guard,
        )
    else:
        result = _check_live(request, policy, objects, declared, guard, say)
    if notes:
        result = replace(result, decision=replace(result.decision, notes=tuple(notes)))
    # Where the candidate shows each finding, for annotations: read after the check.
    return CheckRun(place_findings(result, files), base, head, objects)


def _reading_notes(base: Side, head: Side) -> list[str]:
    """What reading the two sides had to say (`FluxSide.notes`: the entry point `auto` found,
    the Kustomizations an ignored source skipped): once when both sides said it, else with the
    side that did."""
    said_base: list[str] = list(getattr(base, "notes", []))
    said_head: list[str] = list(getattr(head, "notes", []))
    both = [n for n in said_head if n in said_base]
    return [
        *both,
        *(f"base: {n}" for n in said_base if n not in both),
        *(f"head: {n}" for n in said_head if n not in both),
    ]


def _remote_findings(
    base: Side, head: Side, context: Context, guard: list[Finding]
) -> tuple[list[Finding], list[str]]:
    """`guard` with REMOTE_CONTENT_UNKNOWN for the remote resources the builds of the two
    revisions left out (`gate.app.remotes`), and the notes for those that need none."""
    base_sha, head_sha = getattr(base, "sha", None), getattr(head, "sha", None)
    if not isinstance(base_sha, str) or not isinstance(head_sha, str):
        return guard, []  # rendered files: nothing was built here
    from gate.engine.remotes import compare_remotes
    from gate.sources.remote import LEDGER

    found, notes = compare_remotes(
        LEDGER.skipped(base_sha),
        LEDGER.skipped(head_sha),
        context is Context.SPECULATIVE,
        (LEDGER.lines(base_sha), LEDGER.lines(head_sha)),
    )
    notes += LEDGER.patch_notes(head_sha)
    return [*guard, *found], notes


def _rendered_sides(
    request: CheckRequest, inputs: RenderedInputs, say: Say
) -> tuple[Policy, list[Finding], tuple[Side, Side], SideFiles | None]:
    """Rendered mode: the policy (`rendered_policy`), both sides' readers and the placement of
    findings (none when a side is stdin)."""
    ci = request.ci or CIContext(request.context)
    policy, guard = rendered_policy(request.repo, request.config_path, ci, say)
    base, head = FilesSide(inputs.base), FilesSide(inputs.head)
    return policy, guard, (base, head), rendered_files(base.local, head.local)


def _git_sides(
    request: CheckRequest, inputs: GitInputs, say: Say
) -> tuple[Policy, list[Finding], tuple[Side, Side], SideFiles | None]:
    """Git mode: the policy at the base revision, GUARD_TAMPERED for each guard setting the
    candidate's policy file changes, both sides' readers and the placement of findings."""
    from gate.sources import gitsource  # git mode only

    repo, config_path = request.repo, request.config_path
    target_sha = gitsource.resolve_revision(repo, inputs.base_rev)
    head_sha = gitsource.resolve_revision(repo, inputs.head_rev)
    policy = policy_at(repo, target_sha, config_path, say)
    base_sha = (
        gitsource.merge_base(repo, target_sha, head_sha) if inputs.from_merge_base else target_sha
    )
    guard = guard_setting_findings(repo, config_path, base_sha, head_sha)
    refuse_changed_submodules(repo, (base_sha, inputs.base_paths), (head_sha, inputs.head_paths))
    base_roots, head_roots = inputs.roots
    argo = bool(inputs.argocd_roots)
    reading = GitReading(
        repo,
        inputs.render,
        () if argo else base_roots + head_roots,
        inputs.flux_sources,
        inputs.flux_ignore,
        fetch_charts=inputs.fetch_charts,
        argocd_roots=inputs.argocd_roots,
        argocd=inputs.argocd,
    )
    base_label = (
        f"merge base {base_sha[:12]} of {rev_label(inputs.base_rev, target_sha)} and head"
        if inputs.from_merge_base
        else rev_label(inputs.base_rev, base_sha)
    )
    sides = (
        reading.side(base_sha, base_label, base_roots or inputs.base_paths),
        reading.side(
            head_sha, rev_label(inputs.head_rev, head_sha), head_roots or inputs.head_paths
        ),
    )
    return policy, guard, sides, GitFiles(repo, base_sha, head_sha)


def _check_live(
    request: CheckRequest,
    policy: Policy,
    objects: tuple[list[RawObject], list[RawObject]],
    declared: set[tuple[str, str]],
    guard: Sequence[Finding],
    say: Say,
) -> CheckResult:
    """`gate check --live`: the same check, with the cluster's truth and the prune set."""
    from gate.kube.snapshot import ApiLister, read_live  # the kubernetes client is slow to import

    live = request.live
    assert live is not None
    base, head = build_sides(*objects, request.namespace)
    timeout = policy.live_timeout_seconds
    with ApiLister.from_kubeconfig(live.kubeconfig, live.kube_context, timeout) as lister:
        read = read_live(lister, policy, base, head, live.scopes)
        if not live.quiet:
            pruned = f"; prune set: {len(read.prune_changes)} object(s)" if live.scopes else ""
            say(f"live: {lister.host}: {read.snapshot.summary()}{pruned}")
    served = {(c.group, c.kind) for c in read.snapshot.custom_kinds.values()}
    check_guarded_kinds(policy.guarded_kinds, declared | served, live=True)
    return check_inventories(
        base,
        head,
        context=request.context,
        policy=policy,
        today=utc_today(),
        force=request.force,
        live=read.snapshot.state,
        extra_changes=read.prune_changes,
        extra_findings=guard,
    )


@dataclass(frozen=True)
class Deferred:
    """What `--defer-to` did: the exit code the pipeline acts on, and where the record is
    (None when nothing was written)."""

    exit_code: int
    record: str | None = None


def write_deferral(
    directory: str, run: CheckRun, context: Context, namespace: str, say: Say = to_stderr
) -> Deferred:
    """`--defer-to`: the artifact when nothing blocks; the exit code the pipeline acts on.

    Exit 0 when everything that stops the deploy was deferred into the artifact; a block is
    never deferred (its exit code, nothing written), nor a finding that cannot be kept (exit 1,
    nothing written). A directory that cannot be written is a `GateError` prefixed
    `--defer-to:`.
    """
    from gate.engine.defer import plan_deferral
    from gate.sources.deferral import record_path, write_artifact

    decision = run.result.decision
    if decision.verdict is Verdict.BLOCK:
        say(
            f"defer: nothing written to {directory}: {count(decision.findings, Severity.BLOCK)} "
            "finding(s) block this candidate, and a block is not deferred"
        )
        return Deferred(decision.verdict.exit_code)
    deferral = plan_deferral(run.result)
    for finding, why in deferral.unkeepable:
        say(f"defer: cannot defer {finding.code.value} on {finding.ref.display()}: {why}")
    if deferral.unkeepable:
        say(f"defer: nothing written to {directory}")
        return Deferred(Verdict.BLOCK.exit_code)
    base_raw, head_raw = run.objects
    base_label, head_label = run.labels
    meta = {"context": context.value, "base": base_label, "head": head_label}
    try:
        written = write_artifact(
            directory,
            head_raw,
            base_raw,
            deferral,
            base_file=run.base.layout,
            head_file=run.head.layout,
            namespace=namespace,
            meta={"verdict": decision.verdict.value, **meta},
        )
    except GateError as exc:
        raise GateError(f"--defer-to: {exc}") from exc
    kept = ", ".join(k.manifest.ref.display() for k in deferral.kept) or "nothing"
    if deferral.withheld:
        new = ", ".join(w.manifest.ref.display() for w in deferral.withheld)
        kept += f"; left out until the merged deploy: {new}"
    record = record_path(directory)
    say(
        f"defer: wrote {directory} ({len(written)} file(s); what was kept and why: {record}); "
        f"kept as base declares them: {kept}. Deploy {directory}, not the candidate, without "
        f"pruning: kubectl apply --server-side --field-manager=merge-queue --force-conflicts "
        f"-R -f {directory}. Only the merged deploy, checked again with --live, deletes them"
    )
    return Deferred(0, str(record))
