"""The native YAML reader (native/, `prune_gate_yaml`) reads as the Python one and the careful one.

Whatever the native reader accepts must read exactly as PyYAML's careful loader reads it, and
exactly as the Python event reader does, types included; whatever it refuses is read the careful
way. `make test` builds it (scripts/build-native) and sets PRUNE_GATE_REQUIRE_NATIVE=1, so there
these tests run, as they do in CI (`tests.ci.ci()`); elsewhere, without the module, they are
skipped with the way to build it (marked `native`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.model.errors import InputError
from gate.sources import yamlevents
from gate.sources.manifests import MAX_DEPTH, parse_stream
from tests.ci import ci
from tests.unit.test_yamlevents import MARKER_LINES, TOKENS, _block_line, careful_or_error, typed

pytestmark = pytest.mark.native

if yamlevents._NATIVE is None:
    if os.environ.get("PRUNE_GATE_REQUIRE_NATIVE") == "1" or ci():
        raise RuntimeError(
            "PRUNE_GATE_REQUIRE_NATIVE=1 or CI, but prune_gate_yaml is not importable (or "
            "PRUNE_GATE_NATIVE_YAML=off): run scripts/build-native .venv/bin/python"
        )
    pytest.skip(
        "the native reader is not built: `make native` (needs cargo) builds it",
        allow_module_level=True,
    )


def native(text: str, max_depth: int = MAX_DEPTH) -> list[tuple[int, Any]] | None:
    assert yamlevents._NATIVE is not None
    yamlevents._NATIVE.scanned(text)  # the scanner alone: a panic there is raised, not absorbed
    return yamlevents.native_documents(text, max_depth)


def python(text: str, max_depth: int = MAX_DEPTH) -> list[tuple[int, Any]] | None:
    return yamlevents.python_documents(text, max_depth)


def both_typed(docs: list[tuple[int, Any]] | None) -> Any:
    return None if docs is None else [(line, typed(doc)) for line, doc in docs]


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.lists(_block_line(), max_size=8).map("".join))
def test_the_native_reader_reads_as_the_python_reader_and_the_careful_one(text: str) -> None:
    fast = native(text)
    assert both_typed(fast) == both_typed(python(text))
    if fast is not None:
        assert both_typed(fast) == careful_or_error(text)


@given(st.text(alphabet=st.sampled_from(list("ab:- \n#'\"[]{},&*!|>?%@`\t~01yn.\\")), max_size=60))
def test_any_text_reads_alike_or_goes_the_careful_way(text: str) -> None:
    fast = native(text)
    assert both_typed(fast) == both_typed(python(text))
    if fast is not None:
        assert both_typed(fast) == careful_or_error(text)


#: Scalars as they are written after `key: ` or `- ` in block style, and keys.
BLOCK_SCALARS = [
    *TOKENS, "a b", "it's", "'it''s'", "''", '""', '"a \\" b"', "x #c", "x#y", "x # c", "a:b",
    "http://x:80/y", "-1", "-x", "- x", "a: b", "a:", "'a' b", "{a: b}", "[a, b]", "{a: [1, 2]}",
    "[a, {b: c}]", "[]", "{}", "[a,]", "[a b, c]", "{a: }", '{"a": 1}', '{"a":1}', "[a:b]",
    "[a: b]", "{a: b, a: c}", "%x", "@x", "`x", "!x", "|", "|-", "|+", "|2", ">", ">-", "| #c",
]  # fmt: skip
BLOCK_KEYS = [
    "a", "b", "on", "1", "'k'", '"k"', "k k", "-k", "?k", "k#", "k #", "[k]", "'k' ", "'1'",
]  # fmt: skip


@st.composite
def _block_node(draw: st.DrawFn, indent: int, depth: int) -> str:
    """A block mapping or sequence at `indent`, as a person or a tool writes one, now and then
    a space off, a comment or a blank line in it, and a literal block's lines."""
    lines: list[str] = []
    sequence = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        pad = " " * max(0, indent + draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1, -1])))
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(["", "# c", "  # c", " "])))
        head = f"{pad}- " if sequence else f"{pad}{draw(st.sampled_from(BLOCK_KEYS))}: "
        choice = draw(st.integers(0, 9)) if depth > 0 else 0
        if choice <= 5:
            value = draw(st.sampled_from(BLOCK_SCALARS))
            lines.append(head + value)
            if value.startswith("|"):
                body_pad = " " * (indent + draw(st.sampled_from([2, 2, 1, 0, 4])))
                for _ in range(draw(st.integers(0, 3))):
                    text = draw(st.sampled_from(["x", "  y", "#z", "---", "", " ", "a: b"]))
                    lines.append(body_pad + text if text.strip() else text)
        elif choice <= 7:  # a nested collection on the next lines
            lines.append(head.rstrip())
            step = draw(st.sampled_from([2, 2, 4, 0, 1]))
            lines.append(draw(_block_node(indent + step, depth - 1)))
        else:  # a compact mapping in a sequence entry, or a key's value mapping
            inner = draw(_block_node(len(head), depth - 1)).lstrip(" ")
            lines.append(head + inner)
    return "\n".join(lines)


_BLOCK_TEXTS = st.lists(
    st.tuples(st.sampled_from(["", "---\n", "--- #c\n", "# c\n---\n"]), _block_node(0, 3)),
    min_size=1,
    max_size=3,
).map(lambda docs: "".join(sep + doc + "\n" for sep, doc in docs))


@given(_BLOCK_TEXTS)
def test_the_scanner_reads_block_yaml_as_libyaml_and_the_careful_reader_do(text: str) -> None:
    scanned = native(text)
    assert both_typed(scanned) == both_typed(
        yamlevents.native_documents(text, MAX_DEPTH, scanner=False)
    )
    if scanned is not None:
        assert both_typed(scanned) == careful_or_error(text)


@given(_BLOCK_TEXTS, st.integers(0, 10_000), st.sampled_from([" ", "", ":", "-", "#", "'", "\n"]))
def test_a_text_one_character_off_reads_as_libyaml_reads_it(text: str, at: int, char: str) -> None:
    at %= len(text) + 1
    for mutant in (text[:at] + char + text[at:], text[:at] + text[at + 1 :]):
        scanned = native(mutant)
        assert both_typed(scanned) == both_typed(
            yamlevents.native_documents(mutant, MAX_DEPTH, scanner=False)
        )


#: Keys the scanner reads (`1` and `'1'` are one key twice to the careful reader).
PLAIN_KEYS = ["a", "b", "c", "k k", "1", "'1'", "on", '"on"']
#: Values the scanner reads (so a text of them is the scanner's, unless something else is in it).
PLAIN_VALUES = ["x", "a b", "1", "on", "~", "'q'", '"d"', "[a, 1]", "{a: 1}", "x # c", ""]


@st.composite
def _plain_node(draw: st.DrawFn, indent: int, depth: int) -> list[str]:
    """The lines of a block mapping or sequence at `indent` that the scanner reads: keys unique,
    indentation right, values one-line or literal blocks."""
    pad = " " * indent
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(PLAIN_KEYS), min_size=1, max_size=3, unique=True))
        heads = [f"{pad}{key}:" for key in keys]
    else:
        heads = [f"{pad}-"] * draw(st.integers(1, 3))
    lines: list[str] = []
    for head in heads:
        choice = draw(st.integers(0, 5)) if depth > 0 else 0
        if choice <= 2:
            value = draw(st.sampled_from(PLAIN_VALUES))
            lines.append(f"{head} {value}".rstrip())
        elif choice == 3:  # a literal block
            lines.append(f"{head} |")
            body = draw(st.lists(st.sampled_from(["x", "y: z"]), min_size=1, max_size=3))
            lines += [f"{pad}  {text}" for text in body]
        else:  # a nested collection on the next lines
            lines.append(head)
            lines += draw(_plain_node(indent + 2, depth - 1))
    return lines


@st.composite
def _with_markers(draw: st.DrawFn) -> str:
    """Documents the scanner reads, with marker lines (and look-alikes) put anywhere: between
    documents, between keys, inside a nested block or a literal block's lines."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        lines += draw(st.sampled_from([[], ["---"], ["--- # c"]])) + draw(_plain_node(0, 2))
    for _ in range(draw(st.integers(1, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(MARKER_LINES)))
    return "".join(line + "\n" for line in lines)


@settings(derandomize=True, deadline=None, max_examples=400)
@given(_with_markers())
def test_a_document_marker_anywhere_reads_as_libyaml_reads_it(text: str) -> None:
    scanned = native(text)
    assert both_typed(scanned) == both_typed(
        yamlevents.native_documents(text, MAX_DEPTH, scanner=False)
    )
    assert both_typed(scanned) == both_typed(python(text))
    if scanned is not None:
        assert both_typed(scanned) == careful_or_error(text)


#: Text after a document end marker (`...` at column 0), with the line libyaml refuses it on: the
#: scanner read it as one more key (`... resources` = {x: 1}), a reading of a file that PyYAML,
#: kubectl and kustomize refuse.
AFTER_DOCUMENT_END = [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n... resources: {x: 1}\n", 5),
    ("kind: Kustomization\nresources:\n- a.yaml\n... resources: [b.yaml]\n", 4),
    ("a: |\n  x\n... b: c\n", 3),
    ("a:\n  b: 1\n... : x\n", 3),
    ("a: 1\n---\nb: 1\n... c: 2\n---\nd: 1\n", 4),
]


@pytest.mark.parametrize(("text", "line"), AFTER_DOCUMENT_END)
def test_text_after_a_document_end_marker_is_refused_with_its_line(text: str, line: int) -> None:
    assert yamlevents._NATIVE is not None
    assert not yamlevents._NATIVE.scanned(text)  # libyaml reads it, not the scanner
    assert native(text) is None
    with pytest.raises(yaml.YAMLError) as pyyaml:  # PyYAML's own loader, in Python
        list(yaml.load_all(text, Loader=yaml.SafeLoader))
    assert isinstance(pyyaml.value, yaml.MarkedYAMLError)
    assert pyyaml.value.problem_mark is not None
    assert pyyaml.value.problem_mark.line + 1 == line
    with pytest.raises(InputError, match=rf"^t\.yaml:{line}: invalid YAML: "):
        parse_stream(text, "t.yaml")


#: Keys of one text that Python takes for two (an int, a bool or None, and a string): the careful
#: reader refuses them as a duplicate, as kustomize does ("mapping key "1" already defined");
#: the fast readers read two keys.
SAME_TEXT_KEYS = [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  1: x\n  '1': y\n", 7),
    ("kind: X\nmetadata:\n  labels:\n    'true': x\n    true: y\n", 5),
    ("kind: X\nspec: {~: 1, '~': 2}\n", 2),
    ("kind: X\nspec:\n  1.0: a\n  b: c\n  '1.0': d\n", 5),
]


@pytest.mark.parametrize(("text", "line"), SAME_TEXT_KEYS)
def test_keys_of_one_text_are_a_duplicate_to_every_reader(text: str, line: int) -> None:
    assert native(text) is None
    assert python(text) is None
    with pytest.raises(InputError, match=rf"^t\.yaml:{line}: duplicate key "):
        parse_stream(text, "t.yaml")


@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [("{", "}"), ("{b: c, ", "}"), ("[{", "}]"), ("\n- {", "}"), ("\n  x: {'y': z, ", "}")],
)
@pytest.mark.parametrize("style", ["plain", "quoted", "spaced"])
@pytest.mark.parametrize("width", [1000, 1001, 1024, 1025, 1100])
def test_a_flow_key_past_libyamls_key_limit_reads_as_libyaml_reads_it(
    prefix: str, suffix: str, style: str, width: int
) -> None:
    """libyaml takes a key only when its `:` is at most 1024 characters after the key's start;
    past that, `{k...: v}` is an error, where the scanner read the key."""
    key = {
        "plain": "k" * width,
        "quoted": "'" + "k" * (width - 2) + "'",
        "spaced": "k" * (width - 9) + " " * 9,
    }[style]
    text = f"apiVersion: v1\nkind: X\nspec: {prefix}{key}: v{suffix}\n"
    fast = native(text)
    assert both_typed(fast) == both_typed(
        yamlevents.native_documents(text, MAX_DEPTH, scanner=False)
    )
    if fast is not None:
        assert both_typed(fast) == careful_or_error(text)
    if width > 1024:
        assert careful_or_error(text) is InputError


def test_markers_without_text_after_them_still_take_the_scanner() -> None:
    """The fix hands marker lines with text to libyaml, not every stream with documents."""
    assert yamlevents._NATIVE is not None
    for text in ("a: 1\n---\nb: 2\n", "--- # c\na: 1\n--- \nb: 2\n", "---\n---\na: 1\n"):
        assert yamlevents._NATIVE.scanned(text), text
        assert both_typed(native(text)) == careful_or_error(text)


def test_the_benchmarks_manifests_take_the_scanner() -> None:
    from bench.bench_check import app_file

    assert yamlevents._NATIVE is not None
    assert all(yamlevents._NATIVE.scanned(app_file(i, 5)) for i in range(3))
    assert not yamlevents._NATIVE.scanned("a: &x 1\n")  # an anchor: libyaml's


def test_the_reader_in_use_is_the_native_one() -> None:
    assert yamlevents.READER_ID.startswith("native ")
    assert yamlevents.load_documents("a: 1\n", MAX_DEPTH) == [(1, {"a": 1})]


MANIFESTS = """\
# a leading comment
apiVersion: v1
kind: ConfigMap
metadata:
  name: "ünïcode-名前"
  labels: {app: web, tier: "1", on: yes}
data:
  script: |
    #!/bin/sh
    echo "---"
  count: 0x1F
  big: 123456789012345678901234567890
  ratio: 1_000.5
  time: 1:20
  empty:
  nan: .NaN
  date: 2027-02-30
---
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Secret, metadata: {name: s}}
"""


def test_a_manifest_stream_reads_with_every_value_typed_and_every_line() -> None:
    docs = native(MANIFESTS)
    assert both_typed(docs) == both_typed(python(MANIFESTS)) == careful_or_error(MANIFESTS)
    assert docs is not None
    assert [line for line, _ in docs] == [2, 19, 20]  # the empty document too
    config = docs[0][1]
    assert config["metadata"]["labels"] == {"app": "web", "tier": "1", True: True}
    assert config["data"]["count"] == 31
    assert config["data"]["big"] == 123456789012345678901234567890
    assert config["data"]["time"] == 80
    assert config["data"]["date"] == "2027-02-30"  # no timestamps: Kubernetes reads a string


def test_a_byte_order_mark_and_an_empty_text_read_as_pyyaml_reads_them() -> None:
    assert native("\ufeffa: 1\n") == python("\ufeffa: 1\n") == [(1, {"a": 1})]
    assert native("") == python("") == []
    assert native("# only a comment\n") == []


@pytest.mark.parametrize(
    "text",
    [
        "a: &x 1\nb: *x\n",  # anchors and aliases
        "a: !!str 1\n",  # an explicit tag
        "a: !custom {b: 1}\n",  # a tag on a collection
        "<<: {a: 1}\n",  # a merge key
        "? [a]\n: 1\n",  # a complex key
        "a: 1\na: 2\n",  # a duplicate key
        "1: a\ntrue: b\n",  # keys Python takes for one (1 == True)
        "a: [1, 2\n",  # a syntax error
        "a: b: c\n",  # another
        "%YAML 1.1\n%TAG ! tag:x,2000:\n---\na: !b 1\n",  # directives and a local tag
        "1: a\n'1': b\n",  # keys of one text, an int and a string (one key to kustomize)
        "a: {'true': 1, true: 2}\n",  # the same, a string first, in a flow
    ],
)
def test_what_the_native_reader_leaves_to_the_careful_one(text: str) -> None:
    assert native(text) is None
    assert python(text) is None


def test_nesting_past_the_limit_goes_the_careful_way() -> None:
    nested = "[" * 10 + "1" + "]" * 10
    assert native(nested, max_depth=10) == [(1, [[[[[[[[[[1]]]]]]]]]])]
    assert native(nested, max_depth=9) is None
    # nothing recurses without bound, so no stack overflows either
    assert native("[" * 100_000 + "]" * 100_000) is None
    assert native("a: " + "[" * 100_000 + "]" * 100_000 + "\n") is None
    assert native("a: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n") is None
    deep = "".join(" " * i + "a:\n" for i in range(2_000))
    assert native(deep) is None


def test_repeated_scalars_are_one_object() -> None:
    docs = native("name: web-frontend-7\n---\nname: web-frontend-7\n---\nother: 'web-frontend-7'\n")
    assert docs is not None
    first, second, third = (doc for _, doc in docs)
    assert first["name"] is second["name"]  # plain, memoised
    assert next(iter(first)) is next(iter(second))  # keys too
    assert third["other"] == "web-frontend-7"


def test_the_python_reader_is_used_when_the_native_one_is_turned_off() -> None:
    code = "from gate.sources import yamlevents; print(yamlevents.READER_ID)"
    env = {**os.environ, "PRUNE_GATE_NATIVE_YAML": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "python"


_TWO_THREADS = """
import sys, threading
sys.setswitchinterval(1e-6)  # hand the GIL over as often as Python can
from gate.sources import yamlevents
text = "".join(
    f"---\\nkind: ConfigMap\\nmetadata: {{name: c{i}}}\\ndata: {{a: {i}, b: true, c: 1.5}}\\n"
    for i in range(2000)
)
def read():
    for _ in range(20):
        assert yamlevents.native_documents(text, 100) is not None
threads = [threading.Thread(target=read) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("read")
"""


def test_two_threads_reading_at_once_both_finish() -> None:
    """Base and candidate are read in two threads. The native reader calls back into Python
    for non-string scalars while it holds its memo's mutex; a second thread that entered it
    then waited for that mutex holding the GIL the first needed back, and `gate check` hung
    for good (seen on a real repository). Run in a process of its own: a hang is a failure."""
    done = subprocess.run(
        [sys.executable, "-c", _TWO_THREADS],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard: before the fix this never finished
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "read"), done.stderr
