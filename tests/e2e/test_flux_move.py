"""A claim moved from one Flux Kustomization to another, with the real kustomize-controller.

main: Kustomization `root` applies `apps` (and itself); `apps` applies a claim. The candidate
moves the claim's file to `apps/db`, applied by a new Kustomization `db` with `dependsOn: apps`.
prune-gate used to call that a move (the same object on both sides) and allow it everywhere.
kustomize-controller sees two Kustomizations: `apps` reconciles the new revision first (`db`
waits for it), finds the claim stale in its inventory, and deletes it, since the live claim still
carries `apps`' owner labels; `db` then creates a new, empty claim (`gate.engine.rules.moves`
cites the controller's code). `gate check` now blocks the move (`FLUX_MOVE_PRUNES`).

The two-stage way keeps the claim: stage 1 marks it `kustomize.toolkit.fluxcd.io/prune: disabled`
where `apps` applies it and deploys; stage 2 moves it (and drops the mark). `gate check --live`
allows stage 2 once the mark is live, and the claim keeps its uid, now `db`'s.

kustomize-controller runs as a process (``flux`` fixture, see ``flux.py``); no webhook runs (its
NOT_RETIRED would refuse the prune at the API server: this is about what `gate check` says).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helpers import GitRepo

from .flux import KUSTOMIZATIONS, KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, OWNER_NAME, Flux
from .kube import Cluster
from .test_defer_artifact import (
    SOURCE,
    claim_state,
    exists,
    flux_ns,
    kustomization,
    read_claim,
    settings_yaml,
    target,
    tree_files,
)
from .test_flux_prune import claim_yaml
from .test_live import run_gate

pytestmark = pytest.mark.e2e

__all__ = ["flux_ns"]  # the fixture, used by name

PRUNE = "kustomize.toolkit.fluxcd.io/prune"
MARK = f"  annotations:\n    {PRUNE}: disabled\n"


def main_tree(ns: str) -> dict[str, str | None]:
    return {
        "clusters/prod/root.yaml": kustomization("root", ns, "./clusters/prod"),
        "clusters/prod/apps.yaml": kustomization("apps", ns, "./apps/prod", target(ns)),
        "apps/prod/claim.yaml": claim_yaml(),
        "apps/prod/settings.yaml": settings_yaml("prod"),
    }


def marked_claim() -> str:
    text = claim_yaml().replace("spec:\n", MARK + "spec:\n", 1)
    assert PRUNE in text
    return text


def the_move(ns: str) -> dict[str, str | None]:
    """The claim's file moves to apps/db; a new Kustomization db, waiting for apps, applies it."""
    depends = target(ns) + "  dependsOn:\n    - name: apps\n"
    return {
        "apps/prod/claim.yaml": None,
        "apps/db/claim.yaml": claim_yaml(),
        "clusters/prod/db.yaml": kustomization("db", ns, "./apps/db", depends),
    }


def deploy_main(flux: Flux, kube: Cluster, ns: str, main: dict[str, str]) -> str:
    """Flux applies main through root; return the claim's uid (applied by apps)."""
    flux.git_repository(ns, SOURCE)
    revision = flux.serve(ns, SOURCE, "main", main)
    root = yaml.safe_load(main["clusters/prod/root.yaml"])
    flux.custom.create_namespaced_custom_object(
        KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, ns, KUSTOMIZATIONS, root
    )
    for name in ("root", "apps"):
        flux.wait(functools.partial(exists, flux, ns, name), timeout=120, what=f"{ns}/{name}")
        flux.wait_reconciled(ns, name, revision, ready=True)
    claim = read_claim(kube, ns)
    assert claim.metadata.labels[OWNER_NAME] == "apps"  # Flux applied it
    return str(claim.metadata.uid)


def serve_and_settle(
    flux: Flux, ns: str, label: str, files: dict[str, str], names: tuple[str, ...]
) -> None:
    """Serve a revision and wait until each Kustomization in `names` has applied it."""
    revision = flux.serve(ns, SOURCE, label, files)
    for name in names:
        flux.wait(functools.partial(exists, flux, ns, name), timeout=120, what=f"{ns}/{name}")
        flux.wait_reconciled(ns, name, revision, ready=True)


def check(repo: GitRepo, base: str, head: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = run_gate(
        repo.root, "check", f"--base={base}", f"--head={head}", "--flux-root=clusters/prod",
        "--context=merged", "--format=json", *extra,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout or "{}"), done.stderr


def test_the_move_with_depends_on_loses_the_claim_and_gate_check_blocks_it(
    kube: Cluster, flux: Flux, flux_ns: str, tmp_path: Path
) -> None:
    ns = flux_ns
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(main_tree(ns), "main")
    uid = deploy_main(flux, kube, ns, tree_files(repo))
    head = repo.commit(the_move(ns), "move the claim to db")

    rc, report, stderr = check(repo, base, head, "--live", f"--kubeconfig={kube.kubeconfig}")
    assert rc == 1, (report, stderr)
    codes = {f["code"] for f in report["findings"]}
    assert "FLUX_MOVE_PRUNES" in codes, report

    # What it blocks: Flux deploys the candidate; apps prunes the claim before db applies it.
    serve_and_settle(flux, ns, "candidate", tree_files(repo), ("root", "apps", "db"))
    found = claim_state(kube, ns)
    assert found != (uid, None), (
        f"claim {ns}/data kept uid {uid}: apps did not prune it before db applied it\n"
        f"--- kustomize-controller log ({flux.log}), last lines ---\n{flux.log_tail()}"
    )


def test_the_two_stage_move_keeps_the_claim_and_gate_check_allows_it(
    kube: Cluster, flux: Flux, flux_ns: str, tmp_path: Path
) -> None:
    ns = flux_ns
    repo = GitRepo(tmp_path / "repo")
    repo.commit(main_tree(ns), "main")
    uid = deploy_main(flux, kube, ns, tree_files(repo))

    # Stage 1: the mark, where apps applies the claim; merged and deployed.
    stage_1 = repo.commit({"apps/prod/claim.yaml": marked_claim()}, "stage 1: prune disabled")
    serve_and_settle(flux, ns, "stage-1", tree_files(repo), ("root", "apps"))
    assert read_claim(kube, ns).metadata.annotations[PRUNE] == "disabled"

    # Stage 2: the move (the mark goes with it).
    stage_2 = repo.commit(the_move(ns), "stage 2: move the claim to db")
    rc, report, stderr = check(repo, stage_1, stage_2, "--live", f"--kubeconfig={kube.kubeconfig}")
    assert rc == 0, (report, stderr)
    assert report["verdict"] == "allow", report

    serve_and_settle(flux, ns, "stage-2", tree_files(repo), ("root", "apps", "db"))
    claim = read_claim(kube, ns)
    assert (str(claim.metadata.uid), claim.metadata.deletion_timestamp) == (uid, None), (
        f"--- kustomize-controller log ({flux.log}), last lines ---\n{flux.log_tail()}"
    )
    assert claim.metadata.labels[OWNER_NAME] == "db"
