"""`gate retire status`: where each claim stands in its two-stage retirement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from gate.cli.common import (
    POLICY_FILE,
    fail,
    flux_source_options,
    kube_options,
    parse_flux_ignore,
    parse_flux_source,
    say,
    text_or_json_option,
)
from gate.model.errors import GateError, InputError

if TYPE_CHECKING:
    from gate.app.sides import GitReading
    from gate.model.objects import Inventory

# The policy, the sources, the engine and the client are imported when `retire status` runs:
# `gate retire --help` costs click and the option table (test_startup).


@click.group("retire")
def retire_group() -> None:
    """Two-stage retirement of claims: where each one stands."""


@retire_group.command("status")
@click.option("-n", "--namespace", help="Only claims in this namespace (default: all).")
@click.argument("name", required=False)
@kube_options
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help=f"Policy file, for the retire annotation's name (default: ./{POLICY_FILE} if present).",
)
@text_or_json_option
@click.option(
    "--base",
    "base_rev",
    metavar="REV",
    help="The merged branch's revision: stage 1 counts only for claims it marks too, as in "
    "`gate check` (a mark only a speculative deploy applied is reported as unmerged).",
)
@click.option(
    "--repo",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Git repository of --base.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="DIR",
    help="Directory of --base to read (repeatable; default: the whole tree).",
)
@click.option(
    "--render",
    type=click.Choice(["none", "kustomize"]),
    default="none",
    show_default=True,
    help="kustomize: build each --path of --base, as `gate check --render kustomize` does.",
)
@click.option(
    "--flux-root",
    "flux_roots",
    multiple=True,
    metavar="DIR",
    help="A Flux cluster entry point of --base (repeatable): the base is what its "
    "Kustomizations apply, as in `gate check --flux-root` (instead of --path and --render).",
)
@flux_source_options
def retire_status_command(
    namespace: str | None,
    name: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    config_path: str | None,
    fmt: str,
    base_rev: str | None,
    repo: str,
    paths: tuple[str, ...],
    render: str,
    flux_roots: tuple[str, ...],
    flux_sources: tuple[str, ...],
    flux_ignores: tuple[str, ...],
) -> None:
    """For every live claim marked for retirement: its stage, what it still waits on (which pod
    on which node, which workload), and whether removing its manifest is safe now.

    With NAME, that claim whether marked or not. With --base, a live mark the merged branch does
    not carry does not count. Exit 0 when it answered, 2 when it could not read the cluster or
    the base revision.
    """
    from gate.app.policy import policy_at
    from gate.engine import retire
    from gate.kube.resources import RESOURCES
    from gate.kube.snapshot import ApiLister, take_snapshot

    wanted = {"PersistentVolumeClaim", "PersistentVolume", "Pod", "VolumeSnapshot"}
    wanted |= {"StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
    try:
        # The operator's own policy, from the files: --base says which marks are merged.
        policy = policy_at(repo, None, config_path, say)
        reading = _reading(repo, paths, render, (flux_roots, flux_sources, flux_ignores), base_rev)
        base = _base_inventory(reading, base_rev, paths) if base_rev else None
        with ApiLister.from_kubeconfig(
            kubeconfig, kube_context, policy.live_timeout_seconds
        ) as lister:
            snap = take_snapshot(
                lister,
                policy.guarded_kinds,
                policy.live_page_size,
                [r for r in RESOURCES if r.kind in wanted],
            )
    except GateError as exc:
        fail(str(exc))
    annotation = policy.retire_annotation
    state = snap.state
    statuses = retire.retire_statuses(
        state.objects.values(), state, annotation, namespace, name, base
    )
    if name and not statuses:
        where = f" in namespace {namespace}" if namespace else ""
        fail(
            f"no claim named {name}{where} exists in the cluster (kubectl get pvc -A | grep {name})"
        )
    if fmt == "json":
        click.echo(retire.render_json(statuses, annotation))
    elif statuses:
        click.echo(retire.render_text(statuses, annotation))
    else:
        where = f" in namespace {namespace}" if namespace else ""
        click.echo(f"no claim{where} is marked `{annotation}`: nothing is being retired")


def _reading(
    repo: str,
    paths: Sequence[str],
    render: str,
    flux: tuple[Sequence[str], Sequence[str], Sequence[str]],
    base_rev: str | None,
) -> GitReading:
    """How --base is read (as `gate check` reads a revision); its options need --base."""
    from gate.app.sides import FLUX_ROOT_ALONE, GitReading

    flux_roots, flux_sources, flux_ignores = flux
    if (render != "none" or flux_roots) and not base_rev:  # --path alone: ignored, as before
        raise InputError("--render and --flux-root read --base: give --base too")
    if flux_roots and (paths or render != "none"):
        raise InputError(FLUX_ROOT_ALONE)
    if render == "kustomize" and not paths:
        raise InputError("--render kustomize needs at least one --path to build")
    sources = tuple(parse_flux_source(s) for s in flux_sources)
    ignores = tuple(parse_flux_ignore(s) for s in flux_ignores)
    return GitReading(repo, render, tuple(flux_roots), sources, ignores)


def _base_inventory(reading: GitReading, base_rev: str, paths: Sequence[str]) -> Inventory:
    """The objects the base revision declares, for `retire status --base`: plain manifests,
    kustomize builds or Flux entry points, read as `gate check` reads them."""
    from gate.app.sides import read_revision
    from gate.engine.check import build_sides

    base, _ = build_sides(read_revision(reading, base_rev, paths), [], "default")
    return base
