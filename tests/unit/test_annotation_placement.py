"""GitHub annotations land where the reader looks: in the candidate, not at base's file:line.

GitHub shows a step's annotations on the head commit's files. Base's `path:line` of a removed
object is another object there, or a file that is gone. Real `gate check -o github` through
the CLI entry point, in a real git repository: an object removed from a file that stays is
annotated on that file as a whole (the line where its text was is a `---` or another object's,
and says nothing of it); a file removed with its kustomization entry,
at that entry's line in the candidate's kustomization; a file removed with nothing naming it,
on the file as a whole with base's location in the message.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from gate.cli import main
from gate.model.errors import RenderError
from gate.sources import render
from tests.ci import needs_binaries
from tests.unit.helpers import GitRepo

NS = "app"


def _object(kind: str, name: str, extra: str = "") -> str:
    return f"apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {NS}\n{extra}"


def _claim(name: str) -> str:
    return _object(
        "PersistentVolumeClaim",
        name,
        "spec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests: {storage: 1Gi}\n",
    )


CM_A, CM_B = _object("ConfigMap", "a"), _object("ConfigMap", "b")


def _annotations(output: str) -> dict[str, dict[str, str]]:
    """Each `::error` annotation's properties (file, line, ...) and message, by object."""
    out: dict[str, dict[str, str]] = {}
    for line in output.splitlines():
        match = re.fullmatch(r"::error (.*?)::(.*)", line)
        if match is None:
            continue
        props = dict(p.split("=", 1) for p in match.group(1).split(","))
        props["message"] = match.group(2)
        out[props["title"].split(" ", 1)[1]] = props
    return out


def _check(monkeypatch: pytest.MonkeyPatch, repo: GitRepo, *args: str, fmt: str = "github") -> str:
    """`gate check` as a person runs it, outside GitHub Actions: the report in `fmt`."""
    for name in list(os.environ):
        if name.startswith("GITHUB_"):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(
        main, ["check", "--repo", str(repo.root), "--context", "preview", "-o", fmt, *args]
    )
    assert result.exit_code == 1, result.output
    return result.output


def _removals(tmp_path: Path) -> tuple[GitRepo, str, str]:
    """Claim data leaves deploy/app.yaml (which stays); deploy/gone.yaml goes with claim gone."""
    repo = GitRepo(tmp_path / "repo")
    app = "---\n".join([CM_A, _claim("data"), CM_B])
    base = repo.commit({"deploy/app.yaml": app, "deploy/gone.yaml": _claim("gone")}, "base")
    head = repo.commit(
        {"deploy/app.yaml": "---\n".join([CM_A, CM_B]), "deploy/gone.yaml": None}, "remove"
    )
    return repo, base, head


def test_removed_objects_are_annotated_in_the_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, base, head = _removals(tmp_path)
    found = _annotations(_check(monkeypatch, repo, "--base", base, "--head", head))

    # From a file that stays: base's line 7 is ConfigMap b's first line in the candidate, and
    # the line where the claim's text was is a bare `---`: the annotation is on the file.
    data = found[f"PersistentVolumeClaim {NS}/data"]
    assert data["file"] == "deploy/app.yaml"
    assert "line" not in data
    assert "was at deploy/app.yaml:7 in base (removed from this file)" in data["message"]

    # With its file, nothing naming it: the file as a whole, base's location in the text.
    gone = found[f"PersistentVolumeClaim {NS}/gone"]
    assert gone["file"] == "deploy/gone.yaml"
    assert "line" not in gone
    assert "was at deploy/gone.yaml:1 (removed with its file)" in gone["message"]


def test_the_json_and_text_reports_say_where_the_candidate_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, base, head = _removals(tmp_path)
    report = json.loads(_check(monkeypatch, repo, "--base", base, "--head", head, fmt="json"))
    schema = resources.files("gate").joinpath("schemas/report.schema.json").read_text("utf-8")
    jsonschema.Draft202012Validator(json.loads(schema)).validate(report)
    by_name = {f["object"]["name"]: f for f in report["findings"]}
    assert by_name["data"]["source"] == {"path": "deploy/app.yaml", "line": 7}
    assert by_name["data"]["headSource"] == {"path": "deploy/app.yaml", "line": None}
    assert by_name["gone"]["headSource"] == {"path": "deploy/gone.yaml", "line": None}

    text = _check(monkeypatch, repo, "--base", base, "--head", head, fmt="text")
    assert (
        f"PersistentVolumeClaim {NS}/data (deploy/app.yaml:7, removed from deploy/app.yaml)" in text
    )
    assert f"{NS}/gone (deploy/gone.yaml:1, removed with its file)" in text


def _has_renderer() -> bool:
    try:
        render.find_kustomize()
    except RenderError:
        return False
    return True


needs_renderer = needs_binaries(
    _has_renderer(),
    reason="no kustomize renderer on PATH (run `make test`, which puts the pinned one there)",
)

KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"


@needs_renderer
def test_a_file_dropped_from_its_kustomization_is_annotated_at_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "apps/kustomization.yaml": KUSTOMIZATION
            + "resources:\n  - claim.yaml\n  - settings.yaml\n  - old.yaml\nnamespace: app\n",
            "apps/claim.yaml": _claim("data"),
            "apps/settings.yaml": CM_A,
            "apps/old.yaml": _claim("old"),
        },
        "base",
    )
    head_kustomization = KUSTOMIZATION + "resources:\n  - settings.yaml\nnamespace: app\n"
    head = repo.commit(
        {"apps/kustomization.yaml": head_kustomization, "apps/claim.yaml": None}, "drop"
    )
    out = _check(
        monkeypatch, repo, "--base", base, "--head", head, "--render", "kustomize", "--path", "apps"
    )
    found = _annotations(out)
    lines = head_kustomization.splitlines()

    # The file is gone: the line where its `resources:` entry was, in the candidate.
    data = found[f"PersistentVolumeClaim {NS}/data"]
    assert data["file"] == "apps/kustomization.yaml"
    assert lines[int(data["line"]) - 1] == "  - settings.yaml"
    assert "was at apps/claim.yaml:1 in base" in data["message"]

    # The file stays, unchanged, but the build no longer includes it: the entry, not the file.
    old = found[f"PersistentVolumeClaim {NS}/old"]
    assert old["file"] == "apps/kustomization.yaml"
    assert lines[int(old["line"]) - 1] == "namespace: app"


def test_rendered_mode_annotates_the_head_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    (tmp_path / "base" / "app.yaml").write_text("---\n".join([CM_A, _claim("data"), CM_B]))
    (tmp_path / "head" / "app.yaml").write_text("---\n".join([CM_A, CM_B]))
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("GITHUB_"):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(
        main, ["check", "--base-manifests", "base", "--head-manifests", "head", "-o", "github"]
    )
    assert result.exit_code == 1, result.output
    data = _annotations(result.output)[f"PersistentVolumeClaim {NS}/data"]
    assert data["file"] == "head/app.yaml"
    assert "line" not in data
    assert "was at base/app.yaml:7 in base (removed from this file)" in data["message"]
