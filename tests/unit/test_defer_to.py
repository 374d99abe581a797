"""`gate check --defer-to DIR`: the candidate as a speculative deploy should apply it, through the
real console script: a deferred deletion is kept exactly as base declares it, a block writes
nothing, and the artifact checked against base deletes nothing."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.engine.context import Context
from gate.engine.defer import plan_deferral
from gate.engine.policy import Policy
from gate.model.findings import Code
from gate.sources.manifests import parse_stream
from tests.unit.helpers import TODAY, GitRepo, claim, deployment, doc, run
from tests.unit.test_annotation_placement import needs_renderer
from tests.unit.test_cli import gate
from tests.unit.test_flux_roots import DROP as DROP_CLAIM

CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: app}
data: {mode: "on", since: 2027-02-30}
"""

RETIRED = claim(retire="moved to new-db, ticket 42")


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def retirement(tmp_path: Path) -> tuple[Path, Path]:
    """Stage 1 merged (the claim retired, nothing mounts it); the candidate removes it."""
    base = write(tmp_path / "base", {"app.yaml": doc(CONFIG, RETIRED), "web.yaml": deployment("x")})
    head = write(tmp_path / "head", {"app.yaml": CONFIG, "web.yaml": deployment("x")})
    return base, head


def defer(base: Path, head: Path, out: Path, *extra: str) -> Any:
    return gate(
        "check",
        "--base-manifests",
        str(base),
        "--head-manifests",
        str(head),
        "--context",
        "speculative",
        "--defer-to",
        str(out),
        *extra,
    )


def record_of(out: Path) -> Path:
    """The record of the artifact in `out`: beside it, never in it."""
    return out.with_name(out.name + ".deferred.json")


def documents(path: Path) -> list[dict[str, Any]]:
    """The objects of a file, read as gate reads them (an invalid date stays a string)."""
    return [r.body for r in parse_stream(path.read_text("utf-8"), str(path))]


def test_the_artifact_is_plain_yaml_any_reader_takes(tmp_path: Path) -> None:
    """PyYAML's YAML 1.1 reader would make dates of unquoted dates and booleans of `on`: the
    artifact quotes such strings, so every reader sees what Kubernetes saw."""
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    assert defer(base, head, out).returncode == 0
    config = next(yaml.safe_load_all((out / "app.yaml").read_text("utf-8")))
    assert config["data"] == {"mode": "on", "since": "2027-02-30"}


def test_a_deferred_deletion_is_kept_as_base_declares_it(tmp_path: Path) -> None:
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    result = defer(base, head, out, "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "defer"  # the verdict stays defer
    assert f"defer: wrote {out}" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["app.yaml", "web.yaml"]
    kept = documents(out / "app.yaml")
    assert [d["kind"] for d in kept] == ["ConfigMap", "PersistentVolumeClaim"]
    (base_claim,) = [
        d for d in documents(base / "app.yaml") if d["kind"] == "PersistentVolumeClaim"
    ]
    assert kept[1] == base_claim  # exactly as base declares it, retire mark and all
    assert kept[0]["data"] == {"mode": "on", "since": "2027-02-30"}  # strings stay strings
    record = json.loads(record_of(out).read_text("utf-8"))
    assert record["verdict"] == "defer" and record["context"] == "speculative"
    assert record["files"] == ["app.yaml", "web.yaml"]
    (entry,) = record["kept"]
    assert entry["object"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "app",
        "name": "data",
    }
    assert entry["codes"] == ["SPECULATIVE_PRUNE"]
    assert entry["from"] == {"path": f"{base}/app.yaml", "line": 6}
    assert entry["file"] == "app.yaml"


def test_every_file_of_the_artifact_is_a_manifest(tmp_path: Path) -> None:
    """`kubectl apply -R -f DIR` reads every .json, .yaml and .yml file under DIR and stops on
    one without apiVersion and kind: the record lives beside DIR, and DIR holds only objects."""
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    result = defer(base, head, out)
    assert result.returncode == 0, result.stderr
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert [p.name for p in files] == ["app.yaml", "web.yaml"]
    for path in files:
        assert all(d.get("apiVersion") and d.get("kind") for d in documents(path)), path
    assert json.loads(record_of(out).read_text("utf-8"))["files"] == ["app.yaml", "web.yaml"]
    assert str(record_of(out)) in result.stderr
    apply = "kubectl apply --server-side --field-manager=merge-queue --force-conflicts -R -f"
    assert f"{apply} {out}" in result.stderr
    # A stale record beside a new DIR is replaced (nothing deploys it); the DIR must be new.
    again = tmp_path / "again"
    record_of(again).write_text("stale", encoding="utf-8")
    assert defer(base, head, again).returncode == 0
    assert json.loads(record_of(again).read_text("utf-8"))["verdict"] == "defer"


def test_the_artifact_deletes_nothing_that_was_deferred(tmp_path: Path) -> None:
    """Checked as the candidate it replaces, the artifact is a plain allow; the merged deploy
    (the real candidate, merged context) still deletes the claim."""
    base, head = retirement(tmp_path)
    out = tmp_path / "artifact"
    assert defer(base, head, out).returncode == 0
    again = gate(
        "check", "--base-manifests", str(base), "--head-manifests", str(out), "--context",
        "speculative",
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith("ALLOW")
    merged = gate(
        "check", "--base-manifests", str(base), "--head-manifests", str(head), "--context", "merged"
    )
    assert merged.returncode == 0, merged.stdout  # retired: the merged deploy may delete it


def test_a_block_still_blocks_and_writes_nothing(tmp_path: Path) -> None:
    base = write(tmp_path / "base", {"app.yaml": doc(claim(), deployment())})
    head = write(tmp_path / "head", {"app.yaml": deployment()})
    out = tmp_path / "artifact"
    result = defer(base, head, out)
    assert result.returncode == 1
    assert not out.exists()
    assert "nothing written" in result.stderr and "a block is not deferred" in result.stderr


def test_nothing_to_defer_is_the_candidate_itself(tmp_path: Path) -> None:
    base = write(tmp_path / "base", {"app.yaml": doc(CONFIG, claim())})
    head = write(tmp_path / "head", {"app.yaml": doc(CONFIG, claim("20Gi"))})
    out = tmp_path / "artifact"
    result = defer(base, head, out)
    assert result.returncode == 0, result.stderr
    assert documents(out / "app.yaml") == documents(head / "app.yaml")
    assert json.loads(record_of(out).read_text("utf-8"))["kept"] == []


def test_a_directory_with_files_in_it_is_refused(tmp_path: Path) -> None:
    base, head = retirement(tmp_path)
    out = write(tmp_path / "artifact", {"stale.yaml": CONFIG})
    result = defer(base, head, out)
    assert result.returncode == 2
    assert "is not an empty directory" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["stale.yaml"]  # untouched
    empty = tmp_path / "empty"
    empty.mkdir()
    assert defer(base, head, empty).returncode == 0


def test_a_single_file_input_and_the_github_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = write(tmp_path, {"base.yaml": doc(CONFIG, RETIRED)}) / "base.yaml"
    head = write(tmp_path, {"head.yaml": CONFIG}) / "head.yaml"
    output = tmp_path / "output.txt"
    out = tmp_path / "artifact"
    result = gate(
        "check", "--base-manifests", str(base), "--head-manifests", str(head), "--context",
        "speculative", "--defer-to", str(out), "-o", "github",
        env_extra={"GITHUB_OUTPUT": str(output)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "::warning " in result.stdout  # the deferral is still shown as such
    # Each input file keeps its own name; the claim goes into the candidate's file of that name
    # when there is one, else into a file named as base's.
    assert sorted(p.name for p in out.iterdir()) == ["base.yaml", "head.yaml"]
    assert [d["kind"] for d in documents(out / "base.yaml")] == ["PersistentVolumeClaim"]
    lines = output.read_text().splitlines()
    assert "verdict=defer" in lines and f"deferred-dir={out}" in lines
    assert f"deferred-record={record_of(out)}" in lines


def test_git_mode_writes_each_file_at_its_repository_path(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {"deploy/app.yaml": doc(CONFIG, RETIRED), "deploy/web.yaml": deployment("x")}
    )
    head = repo.commit({"deploy/app.yaml": CONFIG})
    out = tmp_path / "artifact"
    result = gate(
        "check", "--repo", str(repo.root), "--base", base, "--head", head, "--context",
        "speculative", "--defer-to", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert [d["kind"] for d in documents(out / "deploy" / "app.yaml")] == [
        "ConfigMap",
        "PersistentVolumeClaim",
    ]
    assert [d["kind"] for d in documents(out / "deploy" / "web.yaml")] == ["Deployment"]


@needs_renderer
def test_kustomize_mode_writes_the_build_of_each_path(tmp_path: Path) -> None:
    kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "apps/db/kustomization.yaml": kustomization + "resources: [claim.yaml, cm.yaml]\n",
            "apps/db/claim.yaml": RETIRED,
            "apps/db/cm.yaml": CONFIG,
        }
    )
    head = repo.commit(
        {
            "apps/db/kustomization.yaml": kustomization + "resources: [cm.yaml]\n",
            "apps/db/claim.yaml": None,
        }
    )
    out = tmp_path / "artifact"
    result = gate(
        "check", "--repo", str(repo.root), "--base", base, "--head", head, "--path", "apps/db",
        "--render", "kustomize", "--context", "speculative", "--defer-to", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = [d["kind"] for d in documents(out / "apps" / "db.yaml")]
    assert sorted(kinds) == ["ConfigMap", "PersistentVolumeClaim"]
    (entry,) = json.loads(record_of(out).read_text("utf-8"))["kept"]
    assert entry["file"] == "apps/db.yaml"


# --- what cannot be kept ----------------------------------------------------------------------


def test_what_a_chart_renders_cannot_be_kept_in_the_artifact() -> None:
    base = [replace(r, root="helm:db/db") for r in parse_stream(RETIRED, "chart.yaml")]
    from gate.engine.check import check_objects

    result = check_objects(base, [], context=Context.SPECULATIVE, policy=Policy(), today=TODAY)
    assert {f.code for f in result.decision.findings} == {Code.SPECULATIVE_PRUNE}
    deferral = plan_deferral(result)
    assert deferral.kept == ()
    ((_finding, why),) = deferral.unkeepable
    assert "HelmRelease db/db" in why and "helm-controller" in why


def test_an_object_only_the_cluster_holds_cannot_be_kept() -> None:
    result = run(RETIRED, "", context=Context.SPECULATIVE)
    assert {f.code for f in result.decision.findings} == {Code.SPECULATIVE_PRUNE}
    empty_base = run("", "", context=Context.SPECULATIVE)
    only_live = replace(empty_base, decision=result.decision)  # the same finding, no base
    ((_finding, why),) = plan_deferral(only_live).unkeepable
    assert "no manifest in base declares it" in why


def test_an_artifact_path_cannot_leave_the_directory(tmp_path: Path) -> None:
    from gate.engine.defer import Deferral
    from gate.model.errors import InputError
    from gate.sources.deferral import write_artifact

    raw = parse_stream(textwrap.dedent(CONFIG), "../../etc/x.yaml")
    with pytest.raises(InputError, match="cannot be a file of the artifact"):
        write_artifact(
            str(tmp_path / "out"),
            raw,
            [],
            Deferral((), ()),
            head_file=lambda r: r.source.path,
            base_file=lambda r: r.source.path,
            namespace="default",
            meta={},
        )


def test_a_removed_kustomization_is_kept_with_what_it_applies() -> None:
    """The candidate removes a Kustomization (prune on) with a retired claim: keeping only the
    claim, the Kustomization's finalizer would delete it anyway, so the Kustomization is kept
    too, and said why."""
    from gate.engine.check import check_objects
    from tests.unit.test_flux_force import kustomization

    flux = parse_stream(kustomization("apps", "./apps", force=None), "clusters/apps.yaml")
    base = [replace(r, root="flux:flux-system/flux-system") for r in flux] + [
        replace(r, root="flux:flux-system/apps") for r in parse_stream(RETIRED, "apps/claim.yaml")
    ]
    result = check_objects(base, [], context=Context.SPECULATIVE, policy=Policy(), today=TODAY)
    assert {f.code for f in result.decision.findings} == {Code.SPECULATIVE_PRUNE}
    deferral = plan_deferral(result)
    kept = {k.manifest.ref.display(): k for k in deferral.kept}
    assert set(kept) == {"PersistentVolumeClaim app/data", "Kustomization flux-system/apps"}
    parent = kept["Kustomization flux-system/apps"]
    assert parent.findings == () and "its finalizer would delete" in parent.reason


# --- Flux: the artifact takes base's word for every Kustomization ------------------------------
#
# The deploy command applies DIR, and kustomize-controller then builds each Kustomization in it
# from its source, which the cluster follows at base until the merge: a Kustomization written as
# the candidate has it builds base's files with the candidate's spec, and prunes (or replaces)
# what the artifact keeps. tests/e2e/test_defer_artifact.py shows it with the real controller.

RETIRED_FLUX_CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: "${APP}-data"
  annotations: {prune-gate.io/retire: "moved to db-v2, ticket 7"}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""
REPOINT_APPS = """\
  patches:
    - target: {kind: Kustomization, name: apps}
      patch: |
        apiVersion: kustomize.toolkit.fluxcd.io/v1
        kind: Kustomization
        metadata: {name: apps}
        spec: {path: ./apps/staging}
"""


CLAIM_KEY = ("PersistentVolumeClaim", "shop", "web-data")


def KS(name: str) -> tuple[str, str, str]:  # noqa: N802 (a key, like CLAIM_KEY)
    return ("Kustomization", "flux-system", name)


def flux_repo(tmp_path: Path, *, nested: bool = False, prune: str = "true") -> GitRepo:
    """flux-system applies clusters/prod; apps (directly, or through infra when `nested`: three
    Kustomizations in a chain) applies apps/prod, where a retired claim is."""
    from tests.unit.test_flux_roots import SYNC, apps

    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {
        "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
        "apps/prod/claim.yaml": RETIRED_FLUX_CLAIM,
        "apps/prod/settings.yaml": CONFIG.replace("namespace: app", "namespace: shop"),
        "apps/staging/settings.yaml": CONFIG.replace("namespace: app", "namespace: shop"),
    }
    if nested:
        files["clusters/prod/infra.yaml"] = infra()
        files["infra/apps.yaml"] = apps(prune=prune)
    else:
        files["clusters/prod/apps.yaml"] = apps(prune=prune)
    repo.commit(files, "base")
    return repo


def infra(extra: str = "") -> str:
    return (
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n"
        "metadata: {name: infra, namespace: flux-system}\n"
        "spec:\n  interval: 10m\n  path: ./infra\n  prune: true\n"
        "  sourceRef: {kind: GitRepository, name: flux-system}\n" + extra
    )


def defer_flux(repo: GitRepo, out: Path, *extra: str) -> Any:
    return gate(
        "check", "--base", "HEAD~1", "--head", "HEAD", "--flux-root", "clusters/prod",
        "--context", "speculative", "-o", "json", "--defer-to", str(out), *extra, cwd=repo.root,
    )  # fmt: skip


def artifact_objects(out: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every object of the artifact by (kind, namespace, name); an object two Kustomizations
    both apply is written by each, the same."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in sorted(out.rglob("*.yaml")):
        for body in documents(path):
            meta = body["metadata"]
            key = (body["kind"], meta.get("namespace", ""), meta["name"])
            assert found.setdefault(key, body) == body, f"{key} twice, and the copies differ"
    return found


def base_objects(repo: GitRepo, tmp_path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """What base applies, as the artifact of base against itself (nothing deferred)."""
    out = tmp_path / "base-artifact"
    result = gate(
        "check", "--base", "HEAD~1", "--head", "HEAD~1", "--flux-root", "clusters/prod",
        "--context", "speculative", "--defer-to", str(out), cwd=repo.root,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return artifact_objects(out)


def apps_spec(prune: str = "true", extra: str = "", **fields: str) -> str:
    from tests.unit.test_flux_roots import apps

    return apps(prune=prune, **fields) + extra


#: A candidate's change to the apps Kustomization, and the field the record names.
REPOINTS: dict[str, tuple[str, str]] = {
    "spec.path": (apps_spec(path="./apps/staging"), "spec.path"),
    "targetNamespace": (apps_spec(namespace="store"), "spec.targetNamespace"),
    "sourceRef": (apps_spec(source="OCIRepository"), "spec.sourceRef"),
    "patches only": (apps_spec(extra=DROP_CLAIM), "spec.patches"),
}


@needs_renderer
@pytest.mark.parametrize("how", sorted(REPOINTS))
def test_a_repointed_kustomization_is_written_as_base_declares_it(tmp_path: Path, how: str) -> None:
    """The candidate re-points apps so it no longer applies the retired claim: the deletion is
    deferred, and the artifact holds the claim AND apps as base declares them."""
    repo = flux_repo(tmp_path)
    changed, field = REPOINTS[how]
    repo.commit({"clusters/prod/apps.yaml": changed}, "re-point apps")
    out = tmp_path / "artifact"
    # Re-pointed to a source prune-gate does not read: out of scope only when said so.
    ignore = ("--flux-ignore-source", "OCIRepository/flux-system/flux-system")
    result = defer_flux(repo, out, *(ignore if how == "sourceRef" else ()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "defer"
    base = base_objects(repo, tmp_path)
    written = artifact_objects(out)
    assert written[CLAIM_KEY] == base[CLAIM_KEY]
    assert written[KS("apps")] == base[KS("apps")]
    record = json.loads(record_of(out).read_text("utf-8"))
    kept = {e["object"]["name"]: e for e in record["kept"]}
    assert set(kept) == {"web-data", "apps"}
    assert kept["apps"]["codes"] == [] and field in kept["apps"]["why"][0]
    assert kept["apps"]["file"] == "flux/flux-system/flux-system.yaml"


@needs_renderer
def test_prune_switched_on_is_written_as_base_declares_it(tmp_path: Path) -> None:
    """base's apps does not prune; the candidate switches prune on and drops the claim's file:
    the artifact's apps still does not prune."""
    repo = flux_repo(tmp_path, prune="false")
    repo.commit(
        {"clusters/prod/apps.yaml": apps_spec(prune="true"), "apps/prod/claim.yaml": None},
        "prune, and drop the claim",
    )
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    written = artifact_objects(out)
    assert written[KS("apps")]["spec"]["prune"] is False
    assert CLAIM_KEY in written


@needs_renderer
def test_a_chain_of_three_is_written_as_base_declares_it(tmp_path: Path) -> None:
    """flux-system -> infra -> apps -> claim; the candidate changes only infra's patches, which
    re-point apps: both infra and apps are written as base declares them (infra as the
    candidate has it would re-point apps again when Flux builds it)."""
    repo = flux_repo(tmp_path, nested=True)
    repo.commit({"clusters/prod/infra.yaml": infra(REPOINT_APPS)}, "re-point apps from infra")
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "defer"
    base = base_objects(repo, tmp_path)
    written = artifact_objects(out)
    for name in ("infra", "apps", "flux-system"):
        assert written[KS(name)] == base[KS(name)], name
    assert CLAIM_KEY in written
    record = json.loads(record_of(out).read_text("utf-8"))
    assert {e["object"]["name"] for e in record["kept"]} == {"web-data", "apps", "infra"}


@needs_renderer
def test_a_new_kustomization_is_left_out(tmp_path: Path) -> None:
    """The candidate drops the claim's file and adds db, a Kustomization of the same directory
    with force and a patch on an immutable field: built from base's files, db would replace the
    claim the artifact keeps. base declares no db: the artifact has none."""
    from tests.unit.test_flux_roots import apps

    repo = flux_repo(tmp_path)
    db = apps().replace("name: apps", "name: db") + "  force: true\n"
    repo.commit({"apps/prod/claim.yaml": None, "clusters/prod/db.yaml": db}, "db takes over")
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    written = artifact_objects(out)
    assert KS("db") not in written
    assert CLAIM_KEY in written
    record = json.loads(record_of(out).read_text("utf-8"))
    (left_out,) = record["withheld"]
    assert left_out["object"]["name"] == "db" and "new in the candidate" in left_out["why"]
    assert "Kustomization flux-system/db" in result.stderr


@needs_renderer
def test_a_claim_moved_to_a_new_kustomization_stays_with_base_s(tmp_path: Path) -> None:
    """The candidate moves the claim's file to apps/db, applied by a new Kustomization db, after
    stage 1 (base marks it `kustomize.toolkit.fluxcd.io/prune: disabled` where apps applies it;
    without it the move is FLUX_MOVE_PRUNES, a block, and nothing is written: test_flux_moves):
    the claim is not deleted (same object), and the artifact leaves db out, so until the merge
    only base's apps applies it (built from base's files, where it still is)."""
    from tests.unit.test_flux_roots import apps

    repo = flux_repo(tmp_path)
    marked = RETIRED_FLUX_CLAIM.replace(
        "annotations: {", "annotations: {kustomize.toolkit.fluxcd.io/prune: disabled, "
    )
    assert marked != RETIRED_FLUX_CLAIM
    repo.commit({"apps/prod/claim.yaml": marked}, "stage 1 of the move")
    db = apps(path="./apps/db").replace("name: apps", "name: db")
    repo.commit(
        {
            "apps/prod/claim.yaml": None,
            "apps/db/claim.yaml": marked,
            "clusters/prod/db.yaml": db,
        },
        "move the claim to db",
    )
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "allow"
    written = artifact_objects(out)
    assert KS("db") not in written and KS("apps") in written
    assert written[CLAIM_KEY] == base_objects(repo, tmp_path)[CLAIM_KEY]
    record = json.loads(record_of(out).read_text("utf-8"))
    assert [e["object"]["name"] for e in record["withheld"]] == ["db"]


@needs_renderer
def test_a_kustomization_that_moves_with_its_files_is_written_as_base_declares_it(
    tmp_path: Path,
) -> None:
    """Nothing is deferred (the claim moves with apps' path), but apps re-pointed, built from
    base's files, would prune the claim: the artifact keeps base's apps all the same."""
    repo = flux_repo(tmp_path)
    repo.commit(
        {
            "clusters/prod/apps.yaml": apps_spec(path="./apps/staging"),
            "apps/prod/claim.yaml": None,
            "apps/staging/claim.yaml": RETIRED_FLUX_CLAIM,
        },
        "move apps",
    )
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "allow"
    assert artifact_objects(out)[KS("apps")]["spec"]["path"] == "./apps/prod"


@needs_renderer
def test_the_variables_a_kustomization_reads_are_written_as_base_declares_them(
    tmp_path: Path,
) -> None:
    """apps names its claim from a ConfigMap (postBuild.substituteFrom); the candidate changes
    only the ConfigMap. kustomize-controller reads it from the cluster: with the candidate's,
    base's files name another claim and apps prunes the kept one. The artifact holds base's."""
    from tests.unit.test_flux_roots import apps

    variables = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: vars, namespace: flux-system}\n"
    reads = apps().replace(
        "    substitute: {APP: web}", "    substituteFrom: [{kind: ConfigMap, name: vars}]"
    )
    repo = flux_repo(tmp_path)
    repo.commit(
        {
            "clusters/prod/apps.yaml": reads,
            "clusters/prod/vars.yaml": variables + "data: {APP: web}\n",
        },
        "variables from a ConfigMap",
    )
    repo.commit({"clusters/prod/vars.yaml": variables + "data: {APP: shop}\n"}, "rename")
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "defer"
    written = artifact_objects(out)
    assert written[("ConfigMap", "flux-system", "vars")]["data"] == {"APP": "web"}
    assert CLAIM_KEY in written
    record = json.loads(record_of(out).read_text("utf-8"))
    (why,) = next(e["why"] for e in record["kept"] if e["object"]["name"] == "vars")
    assert "postBuild variables of Kustomization flux-system/apps" in why


VALUES = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: db-values, namespace: shop}}
data: {{size: {size}}}
"""


@pytest.mark.parametrize(("source", "kept"), [("GitRepository", True), ("HelmRepository", False)])
def test_the_values_a_release_of_the_repository_reads_are_written_as_base_declares_them(
    source: str, kept: bool
) -> None:
    chart = "./charts/db" if source == "GitRepository" else "db"
    release = HELM_RELEASE.format(chart=chart, source=source, size="10Gi") + (
        "  valuesFrom: [{kind: ConfigMap, name: db-values}]\n"
    )
    result = run(
        doc(release, VALUES.format(size="10Gi")),
        doc(release, VALUES.format(size="20Gi")),
        context=Context.SPECULATIVE,
    )
    deferral = plan_deferral(result)
    assert [k.manifest.ref.display() for k in deferral.kept] == (
        ["ConfigMap shop/db-values"] if kept else []
    )
    if kept:
        assert "values of HelmRelease shop/db" in deferral.kept[0].reason
        assert "helm-controller" in deferral.kept[0].reason


HELM_RELEASE = """\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: db, namespace: shop}}
spec:
  chart:
    spec:
      chart: {chart}
      sourceRef: {{kind: {source}, name: flux-system, namespace: flux-system}}
  values: {{size: {size}}}
"""


@pytest.mark.parametrize(("source", "kept"), [("GitRepository", True), ("HelmRepository", False)])
def test_a_release_of_a_chart_in_the_repository_is_written_as_base_declares_it(
    source: str, kept: bool
) -> None:
    """helm-controller builds a GitRepository's chart from what the cluster follows (base until
    the merge): the candidate's values on base's chart are what neither revision declares. A
    chart from a chart repository is the candidate's own: its release goes as the candidate has
    it."""
    chart = "./charts/db" if source == "GitRepository" else "db"
    base = HELM_RELEASE.format(chart=chart, source=source, size="10Gi")
    head = HELM_RELEASE.format(chart=chart, source=source, size="20Gi")
    result = run(base, head, context=Context.SPECULATIVE)
    deferral = plan_deferral(result)
    assert [k.manifest.ref.display() for k in deferral.kept] == (
        ["HelmRelease shop/db"] if kept else []
    )
    if kept:
        assert "spec.values" in deferral.kept[0].reason


def test_a_kustomization_only_a_chart_declares_in_base_is_left_out() -> None:
    """base's apps comes from a chart (helm-controller applies it, the artifact cannot): the
    candidate's own apps, changed, is left out rather than written over it."""
    from gate.engine.check import check_objects
    from tests.unit.test_flux_force import kustomization

    base = [
        replace(r, root="helm:flux-system/platform")
        for r in parse_stream(kustomization("apps", "./apps", force=None), "chart.yaml")
    ]
    head = parse_stream(kustomization("apps", "./apps/v2", force=None), "apps.yaml")
    result = check_objects(base, head, context=Context.SPECULATIVE, policy=Policy(), today=TODAY)
    deferral = plan_deferral(result)
    assert deferral.kept == ()
    ((left_out),) = deferral.withheld
    assert left_out.manifest.ref.display() == "Kustomization flux-system/apps"
    assert "HelmRelease flux-system/platform" in left_out.reason


# --- every object that tells a deployer what to build and from where -------------------------
#
# Flux's source objects say which revision, which files and which artifact the Kustomizations
# and releases build from; a release's chartRef names its chart; an Argo CD Application or
# ApplicationSet names its repository, revision and path. Written as the candidate has them,
# the cluster builds base's Kustomizations from another revision or other files (or syncs base's
# repository at the candidate's path), and prunes what the artifact keeps.


@needs_renderer
def test_a_source_that_ignores_the_kept_claim_is_written_as_base_declares_it(
    tmp_path: Path,
) -> None:
    """The reviewer's reproduction: the candidate drops the claim's file and makes the
    GitRepository ignore it. With the candidate's GitRepository, source-controller produces
    base's commit without the file and apps (base's) prunes the claim the artifact keeps."""
    from tests.unit.test_flux_roots import SYNC

    repo = flux_repo(tmp_path)
    ignoring = SYNC.replace(
        "ref: {branch: main}}", 'ref: {branch: main}, ignore: "/apps/prod/claim.yaml"}'
    )
    assert ignoring != SYNC
    repo.commit(
        {"clusters/prod/flux-system/gotk-sync.yaml": ignoring, "apps/prod/claim.yaml": None},
        "ignore the claim",
    )
    out = tmp_path / "artifact"
    result = defer_flux(repo, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "defer"
    base = base_objects(repo, tmp_path)
    written = artifact_objects(out)
    source = ("GitRepository", "flux-system", "flux-system")
    assert written[source] == base[source] and "ignore" not in written[source]["spec"]
    assert written[CLAIM_KEY] == base[CLAIM_KEY]
    record = json.loads(record_of(out).read_text("utf-8"))
    (why,) = next(e["why"] for e in record["kept"] if e["object"]["kind"] == "GitRepository")
    assert "spec.ignore" in why and "source-controller" in why


GIT_SOURCE = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: flux-system, namespace: flux-system}}
spec: {{interval: 1m, url: "{url}", ref: {ref}{extra}}}
"""

#: Each Flux source kind, base's and the candidate's, and the field the record names.
SOURCES: dict[str, tuple[str, str, str]] = {
    "GitRepository ref": (
        GIT_SOURCE.format(url="https://example.com/repo", ref="{branch: main}", extra=""),
        GIT_SOURCE.format(url="https://example.com/repo", ref="{tag: v0.1.0}", extra=""),
        "spec.ref",
    ),
    "GitRepository include": (
        GIT_SOURCE.format(url="https://example.com/repo", ref="{branch: main}", extra=""),
        GIT_SOURCE.format(
            url="https://example.com/repo",
            ref="{branch: main}",
            extra=", include: [{repository: {name: other}, toPath: apps/prod}]",
        ),
        "spec.include",
    ),
    "GitRepository url": (
        GIT_SOURCE.format(url="https://example.com/repo", ref="{branch: main}", extra=""),
        GIT_SOURCE.format(url="https://example.com/fork", ref="{branch: main}", extra=""),
        "spec.url",
    ),
    **{
        kind: (
            f"apiVersion: source.toolkit.fluxcd.io/{version}\nkind: {kind}\n"
            f"metadata: {{name: flux-system, namespace: flux-system}}\nspec: {{{spec}: a}}\n",
            f"apiVersion: source.toolkit.fluxcd.io/{version}\nkind: {kind}\n"
            f"metadata: {{name: flux-system, namespace: flux-system}}\nspec: {{{spec}: b}}\n",
            f"spec.{spec}",
        )
        for kind, version, spec in [
            ("OCIRepository", "v1", "url"),
            ("Bucket", "v1", "bucketName"),
            ("HelmChart", "v1", "version"),
            ("HelmRepository", "v1", "url"),
        ]
    },
}


@pytest.mark.parametrize("how", sorted(SOURCES))
def test_a_changed_source_is_written_as_base_declares_it(how: str) -> None:
    base, head, field = SOURCES[how]
    deferral = plan_deferral(run(base, head, context=Context.SPECULATIVE))
    (kept,) = deferral.kept
    assert kept.manifest.ref.group == "source.toolkit.fluxcd.io"
    assert kept.manifest.body == parse_stream(textwrap.dedent(base), "b.yaml")[0].body
    assert field in kept.reason and "source-controller" in kept.reason


def test_a_removed_source_is_kept_and_a_new_one_left_out() -> None:
    base = GIT_SOURCE.format(url="https://example.com/repo", ref="{branch: main}", extra="")
    new = base.replace("name: flux-system", "name: other")
    deferral = plan_deferral(run(base, new, context=Context.SPECULATIVE))
    (kept,) = deferral.kept
    assert kept.manifest.ref.display() == "GitRepository flux-system/flux-system"
    assert "the candidate removes it" in kept.reason
    (left_out,) = deferral.withheld
    assert left_out.manifest.ref.display() == "GitRepository flux-system/other"
    assert "new in the candidate" in left_out.reason


CHART_REF = """\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: db, namespace: shop}}
spec:
  chartRef: {{kind: {kind}, name: db, namespace: flux-system}}
  values: {{size: {size}}}
"""


@pytest.mark.parametrize("kind", ["HelmChart", "OCIRepository"])
def test_a_release_with_a_chart_ref_is_written_as_base_declares_it(kind: str) -> None:
    """The chart a chartRef names is built by source-controller from what its source follows,
    and the source is written as base declares it: the candidate's values on base's chart are
    what neither revision declares."""
    base = CHART_REF.format(kind=kind, size="10Gi")
    head = CHART_REF.format(kind=kind, size="20Gi")
    deferral = plan_deferral(run(base, head, context=Context.SPECULATIVE))
    assert [k.manifest.ref.display() for k in deferral.kept] == ["HelmRelease shop/db"]
    assert "spec.values" in deferral.kept[0].reason
    assert "helm-controller" in deferral.kept[0].reason


def test_a_release_whose_helm_repository_changes_is_written_as_base_declares_it() -> None:
    """The HelmRepository is written as base has it: the candidate's chart and values from
    base's repository are what neither revision declares, so the release is base's too."""
    repository = (
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: HelmRepository\n"
        "metadata: {{name: flux-system, namespace: flux-system}}\nspec: {{url: {url}}}\n"
    )
    base = doc(
        HELM_RELEASE.format(chart="db", source="HelmRepository", size="10Gi"),
        repository.format(url="https://a.example.com"),
    )
    head = doc(
        HELM_RELEASE.format(chart="db", source="HelmRepository", size="20Gi"),
        repository.format(url="https://b.example.com"),
    )
    deferral = plan_deferral(run(base, head, context=Context.SPECULATIVE))
    assert sorted(k.manifest.ref.display() for k in deferral.kept) == [
        "HelmRelease shop/db",
        "HelmRepository flux-system/flux-system",
    ]


APPLICATION = """\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: shop, namespace: argocd}}
spec:
  project: default
  destination: {{server: https://kubernetes.default.svc, namespace: shop}}
  syncPolicy: {{automated: {{prune: true}}}}
  source: {{repoURL: https://example.com/repo, targetRevision: main, path: {path}}}
"""
APPLICATION_SET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {{name: shop, namespace: argocd}}
spec:
  generators: [{{list: {{elements: [{{env: prod}}]}}}}]
  template:
    metadata: {{name: "shop-{{{{env}}}}"}}
    spec:
      project: default
      destination: {{server: https://kubernetes.default.svc, namespace: shop}}
      syncPolicy: {{automated: {{prune: true}}}}
      source: {{repoURL: https://example.com/repo, targetRevision: main, path: {path}}}
"""


@pytest.mark.parametrize(
    ("kind", "field"), [("Application", "source"), ("ApplicationSet", "template")]
)
def test_an_argo_cd_application_whose_path_changes_is_written_as_base_declares_it(
    kind: str, field: str
) -> None:
    """Argo CD syncs the repository at the revision the cluster follows (base until the merge):
    an Application re-pointed to another path syncs base's files there and prunes what the
    artifact keeps; an ApplicationSet's template does the same to the Applications it makes."""
    text = APPLICATION if kind == "Application" else APPLICATION_SET
    base, head = text.format(path="apps/prod"), text.format(path="apps/staging")
    deferral = plan_deferral(run(base, head, context=Context.SPECULATIVE))
    assert [k.manifest.ref.display() for k in deferral.kept] == [f"{kind} argocd/shop"]
    assert deferral.kept[0].manifest.body == parse_stream(base, "b.yaml")[0].body
    assert f"spec.{field}" in deferral.kept[0].reason and "Argo CD" in deferral.kept[0].reason


OTHER_BUILDER = """\
apiVersion: {api}
kind: {kind}
metadata: {{name: gen, namespace: flux-system}}
spec:
  path: PATH
"""


@pytest.mark.parametrize(
    ("api", "kind", "who"),
    [
        ("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", "source extensions"),
        ("fluxcd.controlplane.io/v1", "FluxInstance", "flux-operator"),
        ("fluxcd.controlplane.io/v1", "ResourceSet", "flux-operator"),
        ("fleet.cattle.io/v1alpha1", "GitRepo", "Fleet"),
        ("kappctrl.k14s.io/v1alpha1", "App", "kapp-controller"),
    ],
)
def test_other_controllers_builders_are_written_as_base_declares_them(
    api: str, kind: str, who: str
) -> None:
    """An ArtifactGenerator whose copy rules leave the kept claim out, a FluxInstance whose
    sync.path moves, a ResourceSet, Fleet's GitRepo or kapp-controller's App re-pointed: each
    makes its controller build base's files another way and prune what the artifact keeps."""
    text = OTHER_BUILDER.format(api=api, kind=kind)
    base, head = text.replace("PATH", "apps/prod"), text.replace("PATH", "apps/staging")
    deferral = plan_deferral(run(base, head, context=Context.SPECULATIVE))
    assert [k.manifest.ref.display() for k in deferral.kept] == [f"{kind} flux-system/gen"]
    assert deferral.kept[0].manifest.body == parse_stream(base, "b.yaml")[0].body
    assert "spec.path" in deferral.kept[0].reason and who in deferral.kept[0].reason
    added = plan_deferral(run("", base, context=Context.SPECULATIVE))
    assert [w.manifest.ref.display() for w in added.withheld] == [f"{kind} flux-system/gen"]
