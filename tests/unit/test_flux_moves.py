"""FLUX_MOVE_PRUNES: a guarded object moved from one Flux Kustomization to another.

kustomize-controller prunes each Kustomization's own inventory: the old one deletes the moved
claim unless the new one has applied it (and taken its owner labels) first, which with
`dependsOn` on the old one never happens (tests/e2e/test_flux_move.py shows it with the real
controller). Safe only when `kustomize.toolkit.fluxcd.io/prune: disabled` was deployed first:
base's mark, and the live one too under a live view. Engine tests tag roots by hand; the CLI
tests build real repositories with `--flux-root`.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.model.findings import Code, Finding
from gate.model.objects import RawObject
from gate.sources.manifests import parse_stream
from tests.unit.helpers import TODAY, GitRepo, codes
from tests.unit.test_cli import gate
from tests.unit.test_flux_roots import CLAIM, apps, check, repo_with
from tests.unit.test_kustomize_trees import needs_renderer

APPS, DB = "flux:flux-system/apps", "flux:flux-system/db"
PRUNE_DISABLED = "kustomize.toolkit.fluxcd.io/prune: disabled"


def kustomization(name: str, path: str, prune: bool = True, extra: str = "") -> str:
    return (
        textwrap.dedent(
            f"""\
        apiVersion: kustomize.toolkit.fluxcd.io/v1
        kind: Kustomization
        metadata: {{name: {name}, namespace: flux-system}}
        spec:
          path: {path}
          prune: {"true" if prune else "false"}
          sourceRef: {{kind: GitRepository, name: flux-system}}
        """
        )
        + extra
    )


DEPENDS_ON_APPS = "  dependsOn: [{name: apps}]\n"


def claim(annotation: str = "", kind: str = "PersistentVolumeClaim") -> str:
    ann = f"\n  annotations: {{{annotation}}}" if annotation else ""
    return textwrap.dedent(
        """\
        apiVersion: v1
        kind: {kind}
        metadata:
          name: data
          namespace: shop{ann}
        spec:
          accessModes: [ReadWriteOnce]
          resources: {{requests: {{storage: 1Gi}}}}
        """
    ).format(ann=ann, kind=kind)


def objects(text: str, path: str, root: str) -> list[RawObject]:
    return [replace(r, root=root) for r in parse_stream(text, path)]


def sides(
    *,
    base_claim: str | None = None,
    head_claim: str | None = None,
    apps_before: str | None = None,
    apps_after: str | None = None,
    db: str | None = None,
    head_root: str = DB,
) -> tuple[list[RawObject], list[RawObject]]:
    """Base: apps applies the claim; candidate: db (new, dependsOn apps) applies it."""
    before = apps_before or kustomization("apps", "./apps/prod")
    after = apps_before if apps_after is None else apps_after
    ks = "clusters/prod/apps.yaml"
    base = objects(before, ks, "clusters/prod") + objects(
        base_claim or claim(), "apps/prod/claim.yaml", APPS
    )
    head = objects(after or before, ks, "clusters/prod")
    head += objects(
        db or kustomization("db", "./apps/db", extra=DEPENDS_ON_APPS),
        "clusters/prod/db.yaml",
        "clusters/prod",
    )
    head += objects(head_claim or base_claim or claim(), "apps/db/claim.yaml", head_root)
    return base, head


def run(
    base: list[RawObject],
    head: list[RawObject],
    context: Context = Context.MERGED,
    live: LiveState | None = None,
) -> CheckResult:
    return check_objects(
        base, head, context=context, policy=Policy(), today=TODAY, default_namespace="shop",
        live=live,
    )  # fmt: skip


def moved(result: CheckResult) -> Finding:
    (found,) = [f for f in result.decision.findings if f.code is Code.FLUX_MOVE_PRUNES]
    return found


@pytest.mark.parametrize("context", [Context.MERGED, Context.SPECULATIVE, Context.PREVIEW])
def test_a_claim_moved_to_a_kustomization_that_depends_on_the_old_one_blocks(
    context: Context,
) -> None:
    """Before: no change at all (same object on both sides), so an allow in every context."""
    result = run(*sides(), context=context)
    f = moved(result)
    assert result.decision.verdict.value == "block"
    assert f.ref.display() == "PersistentVolumeClaim shop/data"
    assert "Kustomization flux-system/apps" in f.message
    assert "Kustomization flux-system/db" in f.message
    assert "dependsOn apps" in f.message and "always reconciles first" in f.message
    assert any("spec.prune: true (base, candidate)" in e for e in f.evidence)
    assert PRUNE_DISABLED in f.remediation and "two stages" in f.remediation
    assert f.source is not None and f.source.path == "apps/prod/claim.yaml"


def test_without_depends_on_it_is_a_race_and_still_blocks() -> None:
    result = run(*sides(db=kustomization("db", "./apps/db")))
    assert "a race" in moved(result).message


def test_prune_disabled_on_base_makes_the_move_safe() -> None:
    """Stage 1 deployed (no live view: base's word, as for NOT_RETIRED): the move may drop it."""
    marked = claim(PRUNE_DISABLED)
    result = run(*sides(base_claim=marked, head_claim=claim()))
    assert Code.FLUX_MOVE_PRUNES not in codes(result)
    assert result.decision.verdict.value == "allow"


@pytest.mark.parametrize(
    "mark", ["kustomize.toolkit.fluxcd.io/prune: enabled", "prune-gate.io/retire: old"]
)
def test_other_marks_are_not_stage_1_of_a_move(mark: str) -> None:
    assert Code.FLUX_MOVE_PRUNES in codes(run(*sides(base_claim=claim(mark))))


def test_a_mark_only_the_candidate_adds_does_not_count() -> None:
    """The candidate's mark reaches the cluster with the move itself: apps' prune may come first."""
    result = run(*sides(head_claim=claim(PRUNE_DISABLED)))
    assert Code.FLUX_MOVE_PRUNES in codes(result)


def _live(claim_annotations: dict[str, str], owner: str = "apps") -> LiveState:
    live = LiveState(Policy().guarded_kinds)
    labels = {
        "kustomize.toolkit.fluxcd.io/name": owner,
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    meta = {"name": "data", "namespace": "shop", "labels": labels}
    live.upsert(
        {"metadata": {**meta, "annotations": claim_annotations}}, "v1", "PersistentVolumeClaim"
    )
    return live


def test_under_live_the_mark_must_be_deployed_too() -> None:
    """Base's mark not live yet: kustomize-controller reads the live object, so not safe; the
    live object's mark without base's may be an evicted candidate's: not safe either."""
    mark = {"kustomize.toolkit.fluxcd.io/prune": "disabled"}
    marked = sides(base_claim=claim(PRUNE_DISABLED), head_claim=claim())
    f = moved(run(*marked, live=_live({})))
    assert any("merged but not deployed yet" in e for e in f.evidence)
    assert any("labels name flux-system/apps" in e for e in f.evidence)
    f = moved(run(*sides(), live=_live(mark)))
    assert any("not on the base revision" in e for e in f.evidence)
    assert Code.FLUX_MOVE_PRUNES not in codes(run(*marked, live=_live(mark)))


def test_an_old_kustomization_that_does_not_prune_leaves_it() -> None:
    off = kustomization("apps", "./apps/prod", prune=False)
    assert Code.FLUX_MOVE_PRUNES not in codes(run(*sides(apps_before=off)))
    # Prune switched on by the candidate: the first reconcile of the new revision may use it.
    on = kustomization("apps", "./apps/prod")
    result = run(*sides(apps_before=off, apps_after=on))
    assert any("spec.prune: true (candidate)" in e for e in moved(result).evidence)


def test_a_removed_old_kustomization_deletes_it_through_its_finalizer_unless_orphan() -> None:
    base, head = sides()
    head = [r for r in head if r.body["metadata"]["name"] != "apps"]
    f = moved(run(base, head))
    assert any("its finalizer deletes what it applied" in e for e in f.evidence)
    orphan = kustomization("apps", "./apps/prod", extra="  deletionPolicy: Orphan\n")
    base, head = sides(apps_before=orphan)
    head = [r for r in head if r.body["metadata"]["name"] != "apps"]
    assert Code.FLUX_MOVE_PRUNES not in codes(run(base, head))


def test_unguarded_objects_and_plain_roots_move_freely() -> None:
    """A ConfigMap is not guarded; `--path` roots are one deploy, a move between them a move."""
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: data, namespace: shop}\n"
    assert Code.FLUX_MOVE_PRUNES not in codes(run(*sides(base_claim=config)))
    base = objects(claim(), "a/claim.yaml", "a")
    head = objects(claim(), "b/claim.yaml", "b")
    assert codes(run(base, head)) == set()


def test_an_object_two_kustomizations_apply_moves_only_when_one_lets_it_go() -> None:
    """Declared by apps and db on both sides, in either order: nothing moves, whichever copy
    comes first. Base has both, the candidate only db: apps lets it go and prunes it when the
    live labels are its own (the last to apply it)."""
    ks = objects(kustomization("apps", "./apps/prod"), "clusters/prod/apps.yaml", "c")
    ks += objects(kustomization("db", "./apps/db"), "clusters/prod/db.yaml", "c")
    in_apps = objects(claim(), "apps/prod/claim.yaml", APPS)
    in_db = objects(claim(), "apps/db/claim.yaml", DB)
    both = run(ks + in_apps + in_db, ks + in_db + in_apps)
    assert Code.FLUX_MOVE_PRUNES not in codes(both)
    f = moved(run(ks + in_db + in_apps, ks + in_db))
    assert "moves from Kustomization flux-system/apps to" in f.message


# --- the CLI with --flux-root --------------------------------------------------------------------

DB_KS = apps(path="./apps/db").replace("name: apps", "name: db")
#: What apps still applies once the claim has moved (an empty path is a failed build).
SETTINGS = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n"


@needs_renderer
def test_gate_check_flux_root_blocks_the_move_and_defer_writes_nothing(tmp_path: Path) -> None:
    repo = repo_with(
        tmp_path,
        {
            "apps/prod/claim.yaml": None,
            "apps/prod/settings.yaml": SETTINGS,
            "apps/db/claim.yaml": CLAIM,
            "clusters/prod/db.yaml": DB_KS + "  dependsOn: [{name: apps}]\n",
        },
    )
    rc, data, stderr = check(repo)
    assert rc == 1, (data, stderr)
    (f,) = data["findings"]
    assert f["code"] == "FLUX_MOVE_PRUNES" and f["object"]["name"] == "web-data"
    out = tmp_path / "artifact"
    rc, data, stderr = check(repo, "--context", "speculative", "--defer-to", str(out))
    assert rc == 1 and data["verdict"] == "block"
    assert "nothing written" in stderr and not out.exists()


@needs_renderer
def test_gate_check_flux_root_allows_the_second_stage(tmp_path: Path) -> None:
    """Stage 1 (the mark, in apps) is base; stage 2 moves the claim and drops the mark."""
    repo = GitRepo(tmp_path / "repo")
    from tests.unit.test_flux_roots import SYNC

    marked = CLAIM.replace('metadata: {name: "${APP}-data"}', (
        'metadata:\n  name: "${APP}-data"\n'
        "  annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}"
    ))  # fmt: skip
    assert marked != CLAIM
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/apps.yaml": apps(),
            "apps/prod/claim.yaml": marked,
            "apps/prod/settings.yaml": SETTINGS,
        },
        "stage 1",
    )
    repo.commit(
        {
            "apps/prod/claim.yaml": None,
            "apps/db/claim.yaml": CLAIM,
            "clusters/prod/db.yaml": DB_KS + "  dependsOn: [{name: apps}]\n",
        },
        "stage 2",
    )
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--flux-root", "clusters/prod",
        "-o", "json", cwd=repo.root,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FLUX_MOVE_PRUNES" not in result.stdout
    assert json.loads(result.stdout)["verdict"] == "allow"
