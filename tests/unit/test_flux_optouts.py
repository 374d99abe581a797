"""Flux's opt-outs as kustomize-controller reads them (issue 33): `spec.suspend` on a removed
Kustomization, `kustomize.toolkit.fluxcd.io/reconcile: disabled` and the SSA apply policies
`ssa: IfNotPresent` / `ssa: Ignore`; and how a removed Kustomization is judged with and without
its build read (KUSTOMIZATION_REMOVED offline, each object's own deletion under --flux-root).

Sources: kustomize-controller `finalizerShouldDeleteResources` (suspended: nothing deleted),
its `apply` (ExclusionSelector `reconcile: disabled` and `ssa: Ignore`, IfNotPresentSelector
`ssa: IfNotPresent`); its prune skips a live object marked `prune: disabled`, `reconcile:
disabled` or `ssa: Ignore` (the last seen with the real controller: tests/e2e/
test_flux_optouts.py); fluxcd/pkg ssa `shouldSkipApply` and `Delete` (read live).
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from typing import Any

import pytest

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.deployers import FLUX, Event, live_keep_mark
from gate.engine.deployers.flux import apply_skipped
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.model.findings import Code
from gate.model.objects import RawObject
from gate.sources.manifests import parse_stream
from tests.unit.helpers import TODAY, claim, codes, run

KS_API = "kustomize.toolkit.fluxcd.io/v1"
RECONCILE = "kustomize.toolkit.fluxcd.io/reconcile"
SSA = "kustomize.toolkit.fluxcd.io/ssa"


def kustomization(name: str = "apps", extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: {KS_API}
        kind: Kustomization
        metadata: {{name: {name}, namespace: flux-system}}
        spec:
          interval: 10m
          path: ./{name}
          prune: true
          sourceRef: {{kind: GitRepository, name: flux-system}}
        """
    ) + (f"  {extra}\n" if extra else "")


def side(files: dict[str, tuple[str, str]]) -> list[RawObject]:
    """Objects read from `path: (text, root)`, as --flux-root tags them."""
    out: list[RawObject] = []
    for path, (text, root) in files.items():
        out += [replace(r, root=root) for r in parse_stream(text, path)]
    return out


def check(
    base: list[RawObject], head: list[RawObject], live: LiveState | None = None
) -> CheckResult:
    return check_objects(
        base, head, context=Context.MERGED, policy=Policy(), today=TODAY, force=False, live=live
    )


ENTRY = "flux:flux-system/flux-system"
APPS = "flux:flux-system/apps"


# --- a removed Kustomization: offline, and under --flux-root ------------------------------------


def test_flux_root_reads_what_the_removed_kustomization_applied_and_judges_each_object() -> None:
    """Under --flux-root the claim it applied is in base: NOT_RETIRED on the claim, and no
    KUSTOMIZATION_REMOVED beside it (it would say the same thing, less exactly)."""
    base = side(
        {"clusters/apps.yaml": (kustomization(), ENTRY), "apps/claim.yaml": (claim(), APPS)}
    )
    head: list[RawObject] = []
    result = check(base, head)
    assert Code.NOT_RETIRED in codes(result)
    assert Code.KUSTOMIZATION_REMOVED not in codes(result)
    (f,) = [f for f in result.decision.findings if f.code is Code.NOT_RETIRED]
    assert any("Kustomization flux-system/apps is removed (prune on)" in e for e in f.evidence)


def test_flux_root_with_an_empty_build_is_not_blind() -> None:
    """Reached from the entry point, its build was read (empty: it applied nothing)."""
    base = side({"clusters/apps.yaml": (kustomization(), ENTRY)})
    assert Code.KUSTOMIZATION_REMOVED not in codes(check(base, []))


def test_path_mode_sees_only_the_kustomization_leave() -> None:
    base = side({"clusters/apps.yaml": (kustomization(), "clusters")})
    assert Code.KUSTOMIZATION_REMOVED in codes(check(base, []))


def test_a_removed_suspended_kustomization_leaves_what_it_applied() -> None:
    """`finalizerShouldDeleteResources`: a suspended Kustomization deletes nothing when it is
    deleted; under --flux-root its claim is orphaned, not deleted (this failed before: the
    claim was NOT_RETIRED)."""
    ks = kustomization(extra="suspend: true")
    base = side({"clusters/apps.yaml": (ks, ENTRY), "apps/claim.yaml": (claim(), APPS)})
    result = check(base, [])
    assert Code.NOT_RETIRED not in codes(result)
    (f,) = [f for f in result.decision.findings if f.code is Code.ORPHANED_BY_KEEP]
    assert "spec.suspend: true" in f.message


# --- reconcile: disabled ----------------------------------------------------------------------


def test_reconcile_disabled_read_live_keeps_like_prune_disabled() -> None:
    assert FLUX.keeps_live({RECONCILE: "Disabled"}, {}, Event.PRUNE) is not None
    assert FLUX.keeps_live({}, {RECONCILE: "disabled"}, Event.DELETE) is not None
    assert live_keep_mark({RECONCILE: "disabled"}) is not None
    # Written in git it is never applied (its apply is skipped): not a keep mark there.
    assert FLUX.keeps({RECONCILE: "disabled"}, {}, Event.PRUNE) is None
    # ssa: Ignore read live keeps as well (the real controller skips it: tests/e2e), not in git.
    assert FLUX.keeps_live({SSA: "ignore"}, {}, Event.PRUNE) is not None
    assert FLUX.keeps({SSA: "Ignore"}, {}, Event.PRUNE) is None


def live(*objs: tuple[str, str, dict[str, Any]]) -> LiveState:
    s = LiveState(Policy().guarded_kinds)
    for api_version, kind, obj in objs:
        s.upsert(obj, api_version, kind)
    return s


def live_claim(**annotations: str) -> tuple[str, str, dict[str, Any]]:
    meta = {"name": "data", "namespace": "app", "annotations": annotations}
    return ("v1", "PersistentVolumeClaim", {"metadata": meta, "spec": {}})


@pytest.mark.parametrize("mark", [{RECONCILE: "disabled"}, {SSA: "Ignore"}])
def test_a_removed_claim_marked_reconcile_disabled_live_stays(mark: dict[str, str]) -> None:
    """Failed before: the live `reconcile: disabled` (or `ssa: Ignore`) was not read, so
    NOT_RETIRED blocked; the controller skips it (tests/e2e/test_flux_optouts.py)."""
    result = run(claim(), "", live=live(live_claim(**mark)))
    assert Code.NOT_RETIRED not in codes(result)
    assert Code.ORPHANED_BY_KEEP in codes(result)


def test_a_reconcile_disabled_only_in_git_keeps_nothing() -> None:
    result = run(claim(extra_ann=f"{RECONCILE}: disabled"), "", live=live(live_claim()))
    assert Code.NOT_RETIRED in codes(result)


def test_a_kustomizations_inventory_claim_marked_reconcile_disabled_live_is_spared() -> None:
    ks_obj = {
        "metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {"prune": True},
        "status": {"inventory": {"entries": [{"id": "app_data__PersistentVolumeClaim"}]}},
    }
    spared = live((KS_API, "Kustomization", ks_obj), live_claim(**{RECONCILE: "disabled"}))
    assert Code.KUSTOMIZATION_PRUNES_GUARDED not in codes(run(kustomization(), "", live=spared))
    pruned = live((KS_API, "Kustomization", ks_obj), live_claim())
    assert Code.KUSTOMIZATION_PRUNES_GUARDED in codes(run(kustomization(), "", live=pruned))


# --- SSA apply policies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("desired", "existing", "skipped"),
    [
        ({SSA: "IfNotPresent"}, ({}, {}), True),
        ({SSA: "ifnotpresent"}, ({}, {}), True),
        ({SSA: "IfNotPresent"}, None, False),
        ({SSA: "Ignore"}, None, True),
        ({RECONCILE: "disabled"}, ({}, {}), True),
        ({}, ({RECONCILE: "disabled"}, {}), True),
        ({}, ({SSA: "Ignore"}, {}), True),
        ({}, ({SSA: "IfNotPresent"}, {}), False),
        ({SSA: "Merge"}, ({}, {}), False),
    ],
)
def test_apply_skipped_as_fluxcd_pkg_ssa_decides(
    desired: dict[str, str], existing: tuple[dict[str, str], dict[str, str]] | None, skipped: bool
) -> None:
    assert (apply_skipped((desired, {}), existing) is not None) is skipped


def resized(size: str, annotation: str = "") -> str:
    """A claim whose storageClassName (immutable) changes with the size."""
    text = claim(size, extra_ann=annotation)
    return text.replace("spec:", f"spec:\n  storageClassName: sc-{size}", 1)


FLUX_APPLIES = kustomization(extra="").replace("path: ./apps", "path: ./")


@pytest.mark.parametrize(
    "mark", [f"{SSA}: IfNotPresent", f"{SSA}: Ignore", f"{RECONCILE}: disabled"]
)
def test_an_immutable_change_flux_does_not_apply_is_no_finding(mark: str) -> None:
    """Failed before: IMMUTABLE_FIELD_CHANGE on a claim Flux creates only (or never applies);
    the claim's file is under the spec.path of a Flux Kustomization both sides declare."""
    both = f"{FLUX_APPLIES}---\n"
    plain = run(both + resized("10Gi"), both + resized("20Gi"))
    assert Code.IMMUTABLE_FIELD_CHANGE in codes(plain)
    marked = run(both + resized("10Gi", mark), both + resized("20Gi", mark))
    assert Code.IMMUTABLE_FIELD_CHANGE not in codes(marked)
    forced = run(both + resized("10Gi", mark), both + resized("20Gi", mark), force=True)
    assert {Code.FORCED_REPLACEMENT, Code.NOT_RETIRED}.isdisjoint(codes(forced))


@pytest.mark.parametrize("mark", [f"{SSA}: IfNotPresent", f"{RECONCILE}: disabled"])
def test_flux_marks_on_an_object_nothing_ties_to_flux_are_not_trusted(mark: str) -> None:
    """No Flux Kustomization applies it and no live Flux labels: another tool may apply it,
    whatever Flux's keys say, so the change is judged (fail closed)."""
    result = run(resized("10Gi", mark), resized("20Gi", mark))
    assert Code.IMMUTABLE_FIELD_CHANGE in codes(result)
    flux_labels = {
        "kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    live_obj = {"metadata": {"name": "data", "namespace": "app", "labels": flux_labels}}
    labelled = live(("v1", "PersistentVolumeClaim", {**live_obj, "spec": {}}))
    result = run(resized("10Gi", mark), resized("20Gi", mark), live=labelled)
    assert Code.IMMUTABLE_FIELD_CHANGE not in codes(result)


def test_a_change_flux_does_not_apply_is_no_candidate_update_finding() -> None:
    """OWNER_REFERENCE_ADDED judges an update the deploy applies; with ssa: IfNotPresent on an
    existing object it does not."""
    mark = f"{SSA}: IfNotPresent"
    owned = "metadata:\n  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: x, uid: u}]\n"
    before = claim(extra_ann=mark)
    after = before.replace("metadata:\n", owned, 1)
    both = f"{FLUX_APPLIES}---\n"
    assert Code.OWNER_REFERENCE_ADDED in codes(run(both + claim(), both + after.replace(mark, "")))
    assert Code.OWNER_REFERENCE_ADDED not in codes(run(both + before, both + after))


def test_a_staying_suspended_kustomization_prunes_when_resumed() -> None:
    """Suspended, it prunes nothing now, and what left it when resumed: still a deletion."""
    ks = kustomization(extra="suspend: true")
    base = side({"clusters/apps.yaml": (ks, ENTRY), "apps/claim.yaml": (claim(), APPS)})
    head = side({"clusters/apps.yaml": (ks, ENTRY)})
    result = check(base, head)
    (f,) = [f for f in result.decision.findings if f.code is Code.NOT_RETIRED]
    assert any("the prune happens when it is resumed" in e for e in f.evidence)
