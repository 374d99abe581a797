"""The prune plan as a tree (issue 37): what a deploy deletes, force-replaces and orphans,
grouped by deployer root, namespace and object, each object once, with its verdict and what
makes it matter; the exact text is held by the golden files in tests/golden/report."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.livestate import LiveState
from gate.engine.plantree import CASCADE, ORPHAN, build_plan_tree, root_label
from gate.engine.policy import Policy
from gate.model.objects import RawObject, Source
from gate.report import render_report
from gate.report.tree import SourceLinks, plan_text
from gate.sources.manifests import parse_stream
from tests.unit.helpers import GitRepo
from tests.unit.test_cli import gate
from tests.unit.test_report import load_case, render_case

TODAY = dt.date(2026, 12, 2)


def _tree_lines(text: str) -> list[str]:
    """The text report's plan: from its `plan:` line to the blank line after it."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("plan: "))
    end = lines.index("", start)
    return lines[start:end]


def test_three_namespaces_removed_read_as_a_short_tree_and_one_block_per_object() -> None:
    text = render_case("three-namespaces", "text")
    tree = _tree_lines(text)
    assert len(tree) < 30
    assert tree[0] == "plan: 12 deleted (3 guarded)"
    result = load_case("three-namespaces")[0]
    for change in result.changes:  # every deleted object, once, in the tree
        assert change.base is not None
        said = f" {change.ref.kind} {change.ref.name}  "
        shown = [line for line in tree if said in line and f"({change.base.source})" in line]
        assert len(shown) == 1, (change.ref, tree)
    # namespaces are branches of the root, their objects branches of them
    assert [line for line in tree if line[:4] in ("├── ", "└── ")] == [
        line for line in tree if " Namespace " in line
    ]
    headers = [line for line in text.split("\n") if re.match(r"(block|defer|warn) ", line)]
    flagged = {f.ref.display() for f in result.decision.findings}
    assert len(headers) == len(flagged)  # one block per object, not one per finding
    for ref in flagged:
        assert sum(1 for h in headers if h.split(" (")[0].endswith(ref)) == 1


def test_evidence_said_once_per_object() -> None:
    text = render_case("incident", "text")
    data_line = next(line for line in text.split("\n") if line.startswith("  - data: "))
    assert text.count(data_line) == 1  # three findings carry it; the block says it once


def test_markdown_plan_is_nested_lists_and_details_collapse() -> None:
    md = render_case("three-namespaces", "markdown")
    assert "### What this deploy does: 12 deleted (3 guarded)" in md
    assert (
        "  - Namespace `billing` · delete · **block** `NAMESPACE_HOLDS_CLAIMS` "
        "`SPECULATIVE_PRUNE` · `clusters/prod/apps.yaml:44`"
    ) in md
    assert "      - mounted by Deployment ledger (deleted too)" in md
    assert md.count("<details><summary>") == md.count("</details>") == 7  # one per object


def test_json_plan_lists_every_change_once() -> None:
    data = json.loads(render_case("three-namespaces", "json"))
    plan = data["plan"]
    assert (plan["deletes"], plan["replaces"], plan["orphans"]) == (12, 0, 0)
    entries = [
        e
        for root in plan["roots"]
        for ns in root["namespaces"]
        for e in [ns["namespaceObject"], *ns["objects"]]
        if e is not None
    ]
    names = [(e["object"]["kind"], e["object"]["namespace"], e["object"]["name"]) for e in entries]
    assert len(names) == len(set(names)) == 12
    claim = next(e for e in entries if e["object"]["kind"] == "PersistentVolumeClaim")
    assert claim["verdict"] == "block" and claim["guarded"] is True
    assert claim["codes"] == ["NOT_RETIRED", "SPECULATIVE_PRUNE"]


def test_keep_mark_reads_as_orphaned_not_deleted() -> None:
    tree = build_plan_tree(load_case("warn")[0])
    (entry,) = tree.entries()
    assert entry.action == ORPHAN
    assert tree.deletes == 0 and tree.orphans == 1


def _check(base: str, head: str, live: LiveState | None = None) -> CheckResult:
    return check_objects(
        parse_stream(base, "apps/db.yaml"),
        parse_stream(head, "apps/db.yaml"),
        context=Context.MERGED,
        policy=Policy(),
        today=TODAY,
        live=live,
    )


CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: db}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"""
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: db}\n"


def _live(*objs: tuple[str, str, dict[str, Any]]) -> LiveState:
    state = LiveState(Policy().guarded_kinds)
    for api_version, kind, obj in objs:
        state.upsert(obj, api_version, kind)
    return state


def test_live_details_name_the_pod_its_node_and_the_volume() -> None:
    live = _live(
        (
            "v1",
            "PersistentVolumeClaim",
            {
                "metadata": {"name": "data", "namespace": "db"},
                "spec": {"volumeName": "pv-data"},
                "status": {"phase": "Bound"},
            },
        ),
        (
            "v1",
            "PersistentVolume",
            {
                "metadata": {"name": "pv-data"},
                "spec": {
                    "persistentVolumeReclaimPolicy": "Delete",
                    "claimRef": {"namespace": "db", "name": "data"},
                },
            },
        ),
        (
            "v1",
            "Pod",
            {
                "metadata": {"name": "db-0", "namespace": "db"},
                "spec": {
                    "nodeName": "node-a",
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
                },
                "status": {"phase": "Running"},
            },
        ),
    )
    result = _check(CLAIM, "", live)
    (entry,) = build_plan_tree(result).entries()
    assert any(d.startswith("used by pod db/db-0 on node node-a (Running") for d in entry.details)
    assert "volume pv-data, reclaimPolicy Delete: deleted with the claim" in entry.details


def test_a_deleted_namespace_takes_live_claims_no_manifest_declares() -> None:
    live = _live(
        ("v1", "Namespace", {"metadata": {"name": "db"}}),
        (
            "v1",
            "PersistentVolumeClaim",
            {
                "metadata": {"name": "data-pg-0", "namespace": "db"},
                "spec": {},
            },
        ),
    )
    tree = build_plan_tree(_check(NAMESPACE, "", live))
    cascaded = [e for e in tree.entries() if e.action == CASCADE]
    assert [e.ref.name for e in cascaded] == ["data-pg-0"]
    assert tree.cascades == 1
    (root,) = tree.roots
    (ns,) = root.namespaces
    assert ns.entry is not None and ns.entry.ref.kind == "Namespace"
    assert ns.objects == tuple(cascaded)


def test_objects_without_a_finding_are_counted_past_a_few() -> None:
    maps = "---\n".join(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: db}}\n"
        for i in range(8)
    )
    result = _check(maps + "---\n" + CLAIM, CLAIM)
    lines = plan_text(build_plan_tree(result), lambda _style, text: text)
    assert lines[-1] == "    └── 8 more without a finding (8 delete): 8 ConfigMap"


def test_flux_roots_are_named_as_kustomizations() -> None:
    assert root_label("flux:flux-system/apps") == "Kustomization flux-system/apps"
    assert root_label("clusters/prod") == "clusters/prod"
    raw = [
        RawObject(o.body, o.source, "flux:flux-system/apps") for o in parse_stream(CLAIM, "a.yaml")
    ]
    result = check_objects(raw, [], context=Context.MERGED, policy=Policy(), today=TODAY)
    text = render_report(result, "text", context=Context.MERGED, base="a", head="b")
    assert "\nKustomization flux-system/apps\n└── namespace db\n" in text


def test_markdown_links_each_place_to_its_line_at_its_revision() -> None:
    result, context, base, head = load_case("incident")
    links = SourceLinks("https://github.example/acme/fleet", base, head)
    md = render_report(result, "markdown", context=context, base=base, head=head, links=links)
    url = f"https://github.example/acme/fleet/blob/{base}/deploy/headlamp.yaml#L6"
    assert f"[`deploy/headlamp.yaml:6`]({url})" in md
    assert links.url(Source("<stdin>", 1), base) is None
    assert links.url(Source("../outside.yaml", 1), base) is None


def test_link_paths_are_percent_encoded_as_urllib_would() -> None:
    from urllib.parse import quote as urllib_quote

    from gate.report.tree import quote

    for path in ("apps/db.yaml", "odd name/ü#?%.yaml", "a,b:c|d.yaml"):
        assert quote(path) == urllib_quote(path, safe="/~")


def test_on_github_the_markdown_links_to_the_lines_of_both_commits(tmp_path: Path) -> None:
    """`gate check -o markdown` in git mode on GitHub Actions: each place links to its line at
    the commit that has it; outside GitHub, plain code spans."""
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"apps/db.yaml": CLAIM + "---\n" + NAMESPACE}, "base")
    head = repo.commit({"apps/db.yaml": NAMESPACE}, "drop the claim")
    args = ("check", "--base", base, "--head", head, "--render", "none", "-o", "markdown")
    github = {"GITHUB_SERVER_URL": "https://github.example", "GITHUB_REPOSITORY": "acme/fleet"}
    done = gate(*args, cwd=repo.root, env_extra=github)
    assert done.returncode == 1, done.stderr
    blob = "https://github.example/acme/fleet/blob"
    assert f"[`apps/db.yaml:1`]({blob}/{base}/apps/db.yaml#L1)" in done.stdout
    assert f"[`removed from apps/db.yaml`]({blob}/{head}/apps/db.yaml)" in done.stdout
    plain = gate(*args, cwd=repo.root)
    assert "`apps/db.yaml:1`" in plain.stdout and blob not in plain.stdout
