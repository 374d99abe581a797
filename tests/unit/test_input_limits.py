"""Hostile manifests are a clear exit-2 error, never a hang, a crash or a silent pass (issue 8,
attack 11).

Every test runs the real CLI on a candidate directory: an alias bomb, deep nesting, an oversize
file and duplicate keys must each name the file (and line where there is one); a file name that
holds a workflow command must not become one in the log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.model.errors import InputError
from gate.sources.manifests import MAX_ALIAS_NODES, MAX_DEPTH, MAX_MANIFEST_BYTES, parse_stream
from tests.unit.helpers import claim
from tests.unit.test_cli import gate, write

#: The classic "billion laughs" in 611 bytes: nine levels, each nine aliases of the one before.
#: Expanded it is 9**9 (387 million) strings; before the limits it took 101 s of CPU and passed.
ALIAS_BOMB = "\n".join(
    [
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata: {name: lol, namespace: app}",
        'x0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"x{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]"  # each level nine of the one above
            for i in range(1, 9)
        ),
        "data: {a: b}",
        "",
    ]
)


def _check_head(tmp_path: Path, name: str, text: str | None = None) -> tuple[int, str]:
    """`gate check` with the claim in the base and `name` (holding `text`) as the candidate."""
    base = write(tmp_path / "base" / "app.yaml", claim())
    head = tmp_path / "head"
    head.mkdir(exist_ok=True)
    if text is not None:
        write(head / name, text)
    result = gate(
        "check", "--base-manifests", str(base), "--head-manifests", str(head), cwd=tmp_path
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout + result.stderr


def test_alias_bomb_is_a_file_and_line_error(tmp_path: Path) -> None:
    assert len(ALIAS_BOMB.encode()) < 700  # the attack is small; the damage was not
    code, out = _check_head(tmp_path, "bomb.yaml", ALIAS_BOMB)
    assert code == 2, out
    assert "bomb.yaml:" in out and "alias bomb" in out
    assert f"more than {MAX_ALIAS_NODES} nodes" in out


def test_ordinary_anchors_and_merge_keys_still_parse() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: app}\n"
        "x: &defaults {tier: web, team: shop}\n"
        "data:\n  <<: *defaults\n  tier: api\n"
        "---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: app}\n"
        "data: {tier: web}\n"  # the same key in another mapping is no duplicate
    )
    objs = parse_stream(text, "ok.yaml")
    assert [o.body["metadata"]["name"] for o in objs] == ["a", "b"]
    assert objs[0].body["data"] == {"tier": "api", "team": "shop"}


def test_aliases_are_counted_across_a_stream() -> None:
    """Many documents each under the limit add up: the bound is on what the stream expands to."""
    one = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{n}, namespace: app}}\n"
        "x: &big [{items}]\ndata: {{a: b}}\ny: [{aliases}]\n"
    )
    items = ",".join(["1"] * 1000)
    aliases = ",".join(["*big"] * 30)  # 30 000 nodes a document
    text = "---\n".join(one.format(n=n, items=items, aliases=aliases) for n in range(4))
    with pytest.raises(InputError) as err:
        parse_stream(text, "many.yaml")
    assert "many.yaml:" in str(err.value) and "alias" in str(err.value)


def test_deep_flow_nesting_is_a_file_and_line_error(tmp_path: Path) -> None:
    depth = 50_000  # libyaml's composer recursed on this and crashed the interpreter
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata:\n  a: " + (
        "[" * depth + "]" * depth + "\n"
    )
    code, out = _check_head(tmp_path, "deep.yaml", text)
    assert code == 2, out
    assert "deep.yaml:5" in out and "nest" in out


def test_deep_block_nesting_is_refused_at_the_limit(tmp_path: Path) -> None:
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: deep}", "data:"]
    lines += [" " * (2 * i + 2) + f"k{i}:" for i in range(MAX_DEPTH + 10)]
    code, out = _check_head(tmp_path, "deep.yaml", "\n".join(lines) + " end\n")
    assert code == 2, out
    assert f"nested deeper than {MAX_DEPTH} levels" in out
    assert f"deep.yaml:{4 + MAX_DEPTH}" in out  # the mapping that opens level MAX_DEPTH + 1


def test_oversize_manifest_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "head" / "huge.yaml"
    big.parent.mkdir()
    with big.open("wb") as f:  # sparse: 200 MB that take no disk and would take 1 GiB to parse
        f.truncate(200 * 1024 * 1024)
    code, out = _check_head(tmp_path, "huge.yaml")
    assert code == 2, out
    assert "huge.yaml" in out
    assert f"over the {MAX_MANIFEST_BYTES // 1024 // 1024} MiB limit" in out
    assert "split it" in out


def test_oversize_stream_from_git_or_stdin_is_refused() -> None:
    with pytest.raises(InputError) as err:
        parse_stream("a: b\n" * 100, "blob.yaml", max_chars=100)
    assert "blob.yaml" in str(err.value) and "limit" in str(err.value)


def test_oversize_stdin_is_refused(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", claim())
    text = "# filler\n" * (MAX_MANIFEST_BYTES // 9 + 10)
    result = gate(
        "check", "--base-manifests", str(base), "--head-manifests", "-", stdin=text, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert "<stdin>" in result.stderr and "limit" in result.stderr


def test_duplicate_keys_are_an_error_naming_both_lines(tmp_path: Path) -> None:
    text = (
        "apiVersion: v1\n"
        "kind: PersistentVolumeClaim\n"
        "metadata:\n"
        "  name: data\n"
        "  namespace: app\n"
        "  annotations:\n"
        "    prune-gate.io/allow-delete: 'false'\n"
        "    prune-gate.io/allow-delete: 'true'\n"  # which one wins depends on the tool
        "spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}\n"
    )
    code, out = _check_head(tmp_path, "dup.yaml", text)
    assert code == 2, out
    assert "duplicate key 'prune-gate.io/allow-delete'" in out
    assert "dup.yaml:7" in out and "line 8" in out


def test_a_file_name_cannot_inject_workflow_commands(tmp_path: Path) -> None:
    """A candidate names a broken file `x\\n::warning::...`: the error names it, inertly."""
    name = "x\n::warning title=ok::all clear\n##[warning]legacy.yaml"
    code, out = _check_head(tmp_path, name, "a: [unclosed\n")
    assert code == 2, out
    assert "all clear" in out  # the name is shown ...
    for line in out.splitlines():  # ... but no line is a command the runner would act on
        assert not line.lstrip().startswith("::"), line
        assert "##[" not in line, line


def test_github_report_cannot_be_steered_by_file_names(tmp_path: Path) -> None:
    """File names end up in annotations: one holding `::` or `##[` stays data."""
    base = write(tmp_path / "base" / "x\n::warning::all-clear\n##[group]a.yaml", claim())
    head = write(tmp_path / "head.yaml", "")
    result = gate(
        "check",
        "--base-manifests",
        str(base.parent),
        "--head-manifests",
        str(head),
        "--format",
        "github",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    commands = [line.lstrip() for line in lines if line.lstrip().startswith("::")]
    assert any(c.startswith("::error") for c in commands), lines  # the gate's own annotation
    assert all(not c.startswith("::warning::all-clear") for c in commands), commands
    # The runner parses a `::` line as that command first; `##[` elsewhere would be a legacy one.
    assert all("##[" not in line for line in lines if not line.startswith("::")), lines
    assert "all-clear" in result.stdout  # the name is still shown, as data
