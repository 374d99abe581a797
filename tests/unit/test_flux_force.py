"""Flux force read from the repository: a Kustomization with `spec.force: true` force-replaces what
it applies (no `--force` flag needed), and an object's `force: disabled` does not switch it off."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.model.findings import Code, Severity
from gate.model.objects import RawObject
from gate.sources.manifests import parse_stream
from tests.unit.helpers import TODAY, codes


def kustomization(name: str, path: str, *, force: bool | None) -> str:
    forced = "" if force is None else f"\n  force: {'true' if force else 'false'}"
    return (
        textwrap.dedent(
            f"""\
        apiVersion: kustomize.toolkit.fluxcd.io/v1
        kind: Kustomization
        metadata:
          name: {name}
          namespace: flux-system
        spec:
          path: {path}
          prune: true
          sourceRef: {{kind: GitRepository, name: flux-system}}"""
        )
        + forced
        + "\n"
    )


def claim(storage_class: str, annotation: str = "") -> str:
    ann = (
        f"\n  annotations:\n    kustomize.toolkit.fluxcd.io/force: {annotation}"
        if annotation
        else ""
    )
    return textwrap.dedent(
        """\
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata:
          name: data
          namespace: db{ann}
        spec:
          accessModes: [ReadWriteOnce]
          storageClassName: {sc}
          resources: {{requests: {{storage: 10Gi}}}}
        """
    ).format(ann=ann, sc=storage_class)


def side(files: dict[str, str], root: str = "") -> list[RawObject]:
    out: list[RawObject] = []
    for path, text in files.items():
        out += [replace(r, root=root) for r in parse_stream(text, path)]
    return out


def check(base: list[RawObject], head: list[RawObject], **kw: bool) -> CheckResult:
    return check_objects(
        base,
        head,
        context=Context.MERGED,
        policy=Policy(),
        today=TODAY,
        force=kw.get("force", False),
    )


def sides(
    ks: list[str], *, annotation: str = "", claim_path: str = "apps/db/claim.yaml"
) -> tuple[list[RawObject], list[RawObject]]:
    """Base and candidate: the claim's class changes from fast to slow; `ks` declare in both."""
    flux = {f"clusters/prod/k{i}.yaml": k for i, k in enumerate(ks)}
    base = side({**flux, claim_path: claim("fast", annotation)})
    head = side({**flux, claim_path: claim("slow", annotation)})
    return base, head


def test_a_forcing_kustomization_replaces_without_the_flag() -> None:
    result = check(*sides([kustomization("apps", "./apps", force=True)]))
    (finding,) = [f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT]
    assert "Kustomization flux-system/apps has spec.force: true" in finding.message
    assert Code.IMMUTABLE_FIELD_CHANGE not in codes(result)


def test_without_force_it_is_an_immutable_change_that_wedges() -> None:
    for force in (False, None):
        result = check(*sides([kustomization("apps", "./apps", force=force)]))
        assert Code.IMMUTABLE_FIELD_CHANGE in codes(result)
        assert Code.FORCED_REPLACEMENT not in codes(result)


def test_any_kustomization_whose_path_holds_the_file_may_force() -> None:
    """Two Kustomizations whose paths hold the file may both apply it, and force from either
    replaces it: the shallower one forcing is force, whichever is deeper."""
    forced_root = kustomization("root", "./", force=True)
    gentle_db = kustomization("db", "./apps/db", force=False)
    assert Code.FORCED_REPLACEMENT in codes(check(*sides([forced_root, gentle_db])))
    forced_db = kustomization("db", "apps/db/", force=True)
    gentle_root = kustomization("root", ".", force=False)
    assert Code.FORCED_REPLACEMENT in codes(check(*sides([gentle_root, forced_db])))
    assert Code.FORCED_REPLACEMENT not in codes(check(*sides([gentle_root, gentle_db])))


def test_a_candidate_cannot_shadow_a_forcing_kustomization_with_a_gentle_one() -> None:
    """An attack on the lookup: the claim gains a storageClassName base left unset (the API
    server filled in the default at creation) and the candidate adds a deeper Kustomization
    without force. Under the real, forcing one the apply replaces the claim, so it must stay
    FORCED_REPLACEMENT; were force missed, an unset -> set change would pass as a no-op."""
    forcing = kustomization("apps", "./apps", force=True)
    decoy = kustomization("decoy", "./apps/db", force=False)
    unset = claim("fast").replace("  storageClassName: fast\n", "")
    base = side({"k.yaml": forcing, "apps/db/claim.yaml": unset})
    head = side({"k.yaml": forcing, "decoy.yaml": decoy, "apps/db/claim.yaml": claim("fast")})
    result = check(base, head)
    assert Code.FORCED_REPLACEMENT in codes(result), codes(result)
    assert result.decision.verdict.exit_code == 1


def test_a_path_that_only_shares_a_prefix_does_not_hold_the_file() -> None:
    result = check(*sides([kustomization("apps", "./app", force=True)]))
    assert Code.FORCED_REPLACEMENT not in codes(result)


def test_the_candidates_kustomization_decides() -> None:
    """Force is read from what the candidate applies with: switching it on in the same change
    replaces the claim."""
    claim_path = "apps/db/claim.yaml"
    base = side({"k.yaml": kustomization("apps", "./apps", force=False), claim_path: claim("fast")})
    head = side({"k.yaml": kustomization("apps", "./apps", force=True), claim_path: claim("slow")})
    assert Code.FORCED_REPLACEMENT in codes(check(base, head))


def test_force_disabled_under_spec_force_is_void_and_said_so() -> None:
    result = check(*sides([kustomization("apps", "./apps", force=True)], annotation="disabled"))
    found = {f.code: f for f in result.decision.findings}
    assert "does not switch that off" in found[Code.FORCED_REPLACEMENT].message
    void = found[Code.FORCE_DISABLED_VOID]
    assert void.severity is Severity.WARN
    assert "Kustomization flux-system/apps has spec.force: true" in void.message
    assert void.source is not None and void.source.path == "apps/db/claim.yaml"
    assert any("spec.force: false" in a.text for a in void.actions)


def test_force_disabled_is_said_even_when_nothing_else_changes() -> None:
    k = kustomization("apps", "./apps", force=True)
    same = side({"k.yaml": k, "apps/db/claim.yaml": claim("fast", "disabled")})
    result = check(same, same)
    # Said as a standing warning (issue 33): present on base alike, it is not this change's.
    assert {f.code for f in result.decision.standing} == {Code.FORCE_DISABLED_VOID}
    assert not codes(result)
    assert result.decision.verdict.exit_code == 0  # a warning: the deploy may go ahead


def test_force_disabled_without_spec_force_is_quiet() -> None:
    result = check(*sides([kustomization("apps", "./apps", force=False)], annotation="disabled"))
    assert Code.FORCE_DISABLED_VOID not in codes(result)
    assert Code.IMMUTABLE_FIELD_CHANGE in codes(result)


def test_force_enabled_on_the_object_forces_without_a_kustomization() -> None:
    result = check(*sides([], annotation="enabled"))
    (finding,) = [f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT]
    assert "kustomize.toolkit.fluxcd.io/force: enabled" in finding.message


def test_flux_root_tags_name_the_kustomization_whatever_the_path() -> None:
    """Under --flux-root an object carries the Kustomization that applies it as its root; its
    file may be anywhere (a component, a shared base)."""
    k = side({"clusters/prod/apps.yaml": kustomization("apps", "./elsewhere", force=True)})
    base = k + side({"shared/claim.yaml": claim("fast")}, root="flux:flux-system/apps")
    head = k + side({"shared/claim.yaml": claim("slow")}, root="flux:flux-system/apps")
    assert Code.FORCED_REPLACEMENT in codes(check(base, head))


def test_what_a_helmrelease_renders_is_not_forced_by_a_kustomization() -> None:
    """helm-controller applies a chart's objects: a Kustomization's force does not reach them,
    even when the chart's directory lies under its path."""
    k = side({"clusters/prod/apps.yaml": kustomization("apps", "./charts", force=True)})
    base = k + side({"charts/db/templates/claim.yaml": claim("fast")}, root="helm:db/db")
    head = k + side({"charts/db/templates/claim.yaml": claim("slow")}, root="helm:db/db")
    assert Code.FORCED_REPLACEMENT not in codes(check(base, head))


def test_under_live_a_kustomization_the_repository_lacks_is_read_from_the_cluster() -> None:
    """Bootstrapped outside the repository, the Kustomization is only live: the live claim's
    Flux labels name it, and its live spec.force decides."""
    from gate.engine.livestate import LiveState

    base, head = (
        side({"apps/db/claim.yaml": claim("fast")}),
        side({"apps/db/claim.yaml": claim("slow")}),
    )
    for forced, expected in ((True, Code.FORCED_REPLACEMENT), (False, Code.IMMUTABLE_FIELD_CHANGE)):
        live = LiveState(Policy().guarded_kinds)
        labels = {
            "kustomize.toolkit.fluxcd.io/name": "apps",
            "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
        }
        live.upsert(
            {
                "metadata": {"name": "data", "namespace": "db", "labels": labels},
                "spec": {"storageClassName": "fast"},
            },
            "v1",
            "PersistentVolumeClaim",
        )
        live.upsert(
            {
                "metadata": {"name": "apps", "namespace": "flux-system"},
                "spec": {"path": "./apps", "prune": True, "force": forced},
            },
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
        )
        result = check_objects(
            base, head, context=Context.MERGED, policy=Policy(), today=TODAY, live=live
        )
        assert expected in codes(result), (forced, codes(result))
        if forced:
            (f,) = [f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT]
            assert "Kustomization flux-system/apps has spec.force: true (live)" in f.message


def test_force_turned_off_in_the_same_change_still_counts() -> None:
    """The candidate switches spec.force off and sets the class base left unset: the child may
    reconcile the new revision before its parent applies the new spec, so base's force counts."""
    unset = claim("fast").replace("  storageClassName: fast\n", "")
    base = side({"k.yaml": kustomization("apps", "./apps", force=True), "apps/db/c.yaml": unset})
    head = side(
        {"k.yaml": kustomization("apps", "./apps", force=False), "apps/db/c.yaml": claim("fast")}
    )
    result = check(base, head)
    (f,) = [f for f in result.decision.findings if f.code is Code.FORCED_REPLACEMENT]
    assert "Kustomization flux-system/apps has spec.force: true in base" in f.message
