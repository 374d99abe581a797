"""Flux's opt-outs with the real kustomize-controller: which live marks keep an object from
its prune (issue 33).

A Kustomization applies three ConfigMaps. On the live objects a person then sets, by hand,
`kustomize.toolkit.fluxcd.io/reconcile: disabled` on one, `kustomize.toolkit.fluxcd.io/ssa:
Ignore` on another, nothing on the third; the next revision drops all three. The controller's
prune deletes only the third: it skips both marks (kustomize-controller 1.9.6 logs "ignored
skipped", though its `prune` source names only `prune` and `reconcile` as exclusions: the
fluxcd/pkg ssa it is built with skips `ssa: Ignore` too). prune-gate encodes exactly that
(`gate.engine.deployers.flux`: `Flux.keeps_live`, `apply_skipped`); the unit tests
(tests/unit/test_flux_optouts.py) check its rules, this checks the controller agrees.

kustomize-controller runs as a process (``flux`` fixture, see ``flux.py``); no webhook runs.
"""

from __future__ import annotations

import functools

import pytest

from gate.engine.deployers import FLUX, Event

from . import kube as k
from .flux import Flux
from .kube import Cluster
from .test_defer_artifact import SOURCE, exists, flux_ns

pytestmark = pytest.mark.e2e

__all__ = ["flux_ns"]  # the fixture, used by name

RECONCILE = "kustomize.toolkit.fluxcd.io/reconcile"
SSA = "kustomize.toolkit.fluxcd.io/ssa"
MARKS = {"disabled": {RECONCILE: "disabled"}, "ignored": {SSA: "Ignore"}, "plain": {}}


def config_map(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"


def test_reconcile_disabled_and_ssa_ignore_keep_a_live_object_from_the_prune(
    kube: Cluster, flux: Flux, flux_ns: str
) -> None:
    ns, name = flux_ns, "apps"  # a name flux_ns deletes after the test
    flux.git_repository(ns, SOURCE)
    files = {f"{n}.yaml": config_map(n) for n in MARKS}
    files["kustomization.yaml"] = "resources:\n" + "".join(f"  - {n}.yaml\n" for n in MARKS)
    revision = flux.serve(ns, SOURCE, "main", files)
    flux.kustomization(ns, name, SOURCE)
    flux.wait(functools.partial(exists, flux, ns, name), timeout=120, what=f"{ns}/{name}")
    flux.wait_reconciled(ns, name, revision, ready=True)

    core = k.core(kube.client)
    for cm, marks in MARKS.items():
        if marks:
            core.patch_namespaced_config_map(cm, ns, {"metadata": {"annotations": marks}})

    # The candidate drops all three (a kustomization with no resources builds nothing).
    revision = flux.serve(ns, SOURCE, "candidate", {"kustomization.yaml": "resources: []\n"})
    flux.wait_reconciled(ns, name, revision, ready=True)

    left = {cm for cm in MARKS if not k.gone(core.read_namespaced_config_map, cm, ns)}
    assert left == {"disabled", "ignored"}, (
        f"kustomize-controller left {sorted(left)}\n"
        f"--- kustomize-controller log ({flux.log}), last lines ---\n{flux.log_tail()}"
    )
    # prune-gate reads the live marks as the controller does.
    kept = {cm for cm, marks in MARKS.items() if FLUX.keeps_live(marks, {}, Event.PRUNE)}
    assert kept == left
