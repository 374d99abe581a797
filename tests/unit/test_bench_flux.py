"""bench_flux's pure parts: the comparison of cached and uncached reports (timing fields aside,
a real difference is caught and named), and the naive script's scan for Flux Kustomization
paths, on a tiny generated tree. No timing, no network, no mirror."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from bench.bench_flux import cache_sizes, flux_kustomization_paths, report_differences


def _history() -> dict[str, Any]:
    row = {
        "sha": "a" * 40,
        "verdict": "allow",
        "codes": [],
        "objects": 412,
        "seconds": 1.234,
        "findings": [],
    }
    block = {**row, "sha": "b" * 40, "verdict": "block", "codes": ["PVC_REMOVED"]}
    block["findings"] = [{"code": "PVC_REMOVED", "object": {"name": "data"}, "seconds": 0.1}]
    return {
        "range": "x..y",
        "commits": [row, block],
        "summary": {"commits": 2, "allow": 1, "block": 1, "seconds": 9.9, "secondsPerCommit": 4.9},
    }


def test_reports_that_differ_only_in_timing_are_identical() -> None:
    a, b = _history(), _history()
    b["commits"][0]["seconds"] = 0.001
    b["commits"][1]["findings"][0]["seconds"] = 7.0
    b["summary"]["seconds"] = 1.0
    b["summary"]["secondsPerCommit"] = 0.5
    del b["summary"]["secondsPerCommit"]  # a timing field missing on one side is no difference
    assert report_differences(a, b) == []


def test_a_changed_verdict_is_named_with_its_place() -> None:
    a, b = _history(), _history()
    b["commits"][1]["verdict"] = "allow"
    assert report_differences(a, b) == ["$.commits[1].verdict: 'block' != 'allow'"]


def test_missing_findings_keys_and_types_are_differences() -> None:
    a = _history()
    fewer = copy.deepcopy(a)
    fewer["commits"][1]["findings"] = []
    assert report_differences(a, fewer) == ["$.commits[1].findings: 1 items != 0"]
    extra = copy.deepcopy(a)
    extra["notes"] = ["remote resource read, not fetched"]
    assert report_differences(a, extra) == ["$.notes: only in the second"]
    typed = copy.deepcopy(a)
    typed["commits"][0]["objects"] = 412.0  # equal as numbers, not as JSON
    assert report_differences(a, typed) == ["$.commits[0].objects: 412 != 412.0"]


def test_the_differences_are_limited() -> None:
    a = {"commits": [{"verdict": "allow"} for _ in range(30)]}
    b = {"commits": [{"verdict": "block"} for _ in range(30)]}
    assert len(report_differences(a, b, limit=4)) == 4


FLUX_KS = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: {name}, namespace: flux-system}}
spec:
  path: {path}
  prune: true
  sourceRef: {{kind: GitRepository, name: flux-system}}
"""


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_scan_finds_each_flux_kustomization_path_once(tmp_path: Path) -> None:
    _write(tmp_path, "cluster/ks.yaml", FLUX_KS.format(name="apps", path="./apps"))
    two = (
        FLUX_KS.format(name="a", path="./apps/a/")
        + "---\n"
        + FLUX_KS.format(name="b", path="apps/b")
    )
    _write(tmp_path, "apps/ks.yml", two)
    # the same path from another file, written differently: one build
    _write(tmp_path, "apps/a/ks.yaml", FLUX_KS.format(name="a2", path="apps/./a"))
    _write(tmp_path, "root.yaml", FLUX_KS.format(name="root", path="./"))
    # kustomize's own Kustomization, a HelmRelease, a Flux Kustomization without a path: none
    _write(
        tmp_path,
        "apps/a/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [x.yaml]\n",
    )
    _write(
        tmp_path,
        "apps/a/release.yaml",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nspec: {path: ./nope}\n",
    )
    _write(tmp_path, "apps/b/nopath.yaml", FLUX_KS.format(name="c", path="''"))
    # a file that is not YAML, a hidden folder, a file of another extension: skipped
    _write(tmp_path, "apps/b/broken.yaml", "key: [unclosed\n")
    _write(tmp_path, ".github/ks.yaml", FLUX_KS.format(name="ci", path="./ci"))
    _write(tmp_path, "notes.txt", FLUX_KS.format(name="txt", path="./txt"))
    assert flux_kustomization_paths(tmp_path) == ["", "apps", "apps/a", "apps/b"]


def test_cache_sizes_are_per_entry_and_count_a_hard_link_once(tmp_path: Path) -> None:
    (tmp_path / "parsed").mkdir()
    (tmp_path / "parsed" / "db").write_bytes(b"x" * 100_000)
    (tmp_path / "empty").mkdir()
    (tmp_path / "builds").mkdir()
    (tmp_path / "builds" / "link").hardlink_to(tmp_path / "parsed" / "db")
    sizes = cache_sizes(tmp_path)
    assert list(sizes) == ["builds", "empty", "parsed"]
    assert max(sizes["builds"], sizes["parsed"]) >= 100_000
    assert sizes["builds"] + sizes["parsed"] < 150_000  # the file's blocks, counted once
    assert cache_sizes(tmp_path / "absent") == {}
