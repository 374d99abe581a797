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
