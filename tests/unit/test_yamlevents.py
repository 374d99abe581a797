"""The fast reader reads every text it accepts exactly as PyYAML's careful loader does."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.sources.manifests import MAX_DEPTH, _careful_documents, parse_stream
from gate.sources.yamlevents import load_documents

#: Scalars whose reading differs between YAML 1.1, 1.2 and Kubernetes, quoted and not.
TOKENS = [
    "yes", "no", "on", "off", "y", "n", "true", "False", "TRUE", "~", "null", "Null", "",
    "0x1F", "0o17", "017", "0b101", "1_000", "1:20", "190:20:30", "-0", "+12", "1e3", "1.5e-3",
    ".inf", "-.Inf", ".NaN", ".5", "2027-02-30", "2026-12-04", "2001-12-14t21:59:43.10-05:00",
    "=", "<<", "a b", "nginx:1.27", "'yes'", '"on"', '"0x1F"', "'2026-12-04'", '"a\\tb"',
    "&a x", "*a", "!!str 1", "!!int '3'", "? k", "- x", "{", "]", "#c", "a: b",
]  # fmt: skip

#: Keys; `'1'`, `"true"` and `'~'` are strings of the same text as `1`, `true` and `~`, which
#: the careful reader and kustomize take for one key twice.
KEYS = ["a", "b", "on", "1", "true", "'x'", '"a"', "<<", "~", "1.0", "[k]", "'1'", '"true"', "'~'"]

#: Lines that are, or look like, a document marker. `---` and `...` at column 0, then a blank or
#: the line's end, end every open block whatever follows on the line (text after `...` is an
#: error, not a key); `---x` and `...x` are plain scalars; `%` at column 0 starts a directive;
#: a byte order mark may come before a marker. Indented, they are plain scalars.
MARKER_LINES = [
    "---", "--- ", "--- # c", "--- a: b", "--- {a: 1}", "--- [a]", "--- !t", "--- |", "--- >",
    "--- - x", "--- x", "---x: 1", "----: x", "...", "... ", "... # c", "... a: b",
    "... resources: {x: 1}", "... : x", "...: x", "...x: 1", "....: x", "... ---", "... ...",
    "%YAML 1.1", "%TAG ! tag:x,2000:", "%x: y", "\ufeff---", "\ufeff...", "\ufeff... a: b",
    "  ... a: b", "  --- a: b", "  ...", "- ... x", "- --- x", "-  ...: x",
]  # fmt: skip


def _flow(depth: int) -> st.SearchStrategy[str]:
    scalar = st.sampled_from(TOKENS)
    if depth == 0:
        return scalar
    inner = _flow(depth - 1)
    pair = st.tuples(st.sampled_from(KEYS), inner).map(lambda kv: f"{kv[0]}: {kv[1]}")
    return st.one_of(
        scalar,
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(pair, max_size=4).map(lambda xs: "{" + ", ".join(xs) + "}"),
    )


def _block_line() -> st.SearchStrategy[str]:
    entry = st.tuples(st.sampled_from(KEYS), _flow(3)).map(lambda kv: f"{kv[0]}: {kv[1]}")
    nested = st.tuples(st.sampled_from(KEYS), st.lists(entry, min_size=1, max_size=3)).map(
        lambda kv: kv[0] + ":\n" + "".join(f"  {e}\n" for e in kv[1])
    )
    literal = st.sampled_from(["data: |\n  ---\n  x: 1\n", "s: >-\n  on\n  off\n"])
    marker = st.sampled_from(MARKER_LINES).map(lambda m: m + "\n")
    return st.one_of(entry.map(lambda e: e + "\n"), nested, literal, st.just("---\n"), marker)


def typed(value: Any) -> Any:
    """`value` with every scalar's type made part of it (1, 1.0 and True compare equal)."""
    if isinstance(value, dict):
        return {typed(k): typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def careful_or_error(text: str) -> Any:
    try:
        return [(line, typed(doc)) for line, doc in _careful_documents(text, "t.yaml")]
    except Exception as exc:  # the careful reading refuses: the fast one must not accept
        return type(exc)


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.lists(_block_line(), max_size=8).map("".join))
def test_what_the_fast_reader_accepts_reads_as_the_careful_reader_reads_it(text: str) -> None:
    fast = load_documents(text, MAX_DEPTH)
    if fast is not None:
        assert [(line, typed(doc)) for line, doc in fast] == careful_or_error(text)


#: Tokens a manifest is made of: none of them sends a text the careful way.
PLAIN_TOKENS = [t for t in TOKENS if t[:1] not in ("&", "*", "!", "?", "-", "{", "]", "#")]
PLAIN_TOKENS = [t for t in PLAIN_TOKENS if t not in ("<<", "a: b")]


@given(st.dictionaries(st.sampled_from(["a", "b", "name", "x"]), st.sampled_from(PLAIN_TOKENS)))
def test_plain_manifests_take_the_fast_way(pairs: dict[str, str]) -> None:
    """The fast reader is not a no-op: what manifests are made of is read by it, and right."""
    text = "kind: X\nmetadata:\n" + "".join(f"  {k}: {v}\n" for k, v in pairs.items())
    fast = load_documents(text, MAX_DEPTH)
    assert fast is not None
    assert [(line, typed(doc)) for line, doc in fast] == careful_or_error(text)


@pytest.mark.parametrize(
    "text",
    [
        "a: &x {b: 1}\nc: *x\n",  # an alias of a collection (aliases of scalars are read)
        "a: !!str 1\n",  # an explicit tag
        "base: &b {x: 1}\nd:\n  <<: *b\n",  # a merge key
        "a: 1\na: 2\n",  # a duplicate key
        "? [k]\n: v\n",  # a complex key
        "a: [\n",  # a syntax error
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),  # too deep
    ],
)
def test_what_it_does_not_cover_goes_the_careful_way(text: str) -> None:
    assert load_documents(text, MAX_DEPTH) is None


def test_values_read_as_kubernetes_reads_them() -> None:
    docs = load_documents(
        "a: yes\nb: 'yes'\nc: 2027-02-30\nd: =\ne: 017\nf: ~\ng: 1.5\n---\n\n---\nk: [1, on]\n",
        MAX_DEPTH,
    )
    assert docs is not None
    assert [line for line, _ in docs] == [1, 10, 11]
    assert typed(docs[0][1]) == typed(
        {"a": True, "b": "yes", "c": "2027-02-30", "d": "=", "e": 15, "f": None, "g": 1.5}
    )
    assert docs[1][1] is None
    assert typed(docs[2][1]) == typed({"k": [1, True]})


def test_errors_still_name_file_and_line_through_the_careful_way() -> None:
    with pytest.raises(Exception, match=r"t\.yaml:3"):
        parse_stream("kind: A\napiVersion: v1\nmetadata: {name: x]\n", "t.yaml")
    with pytest.raises(Exception, match=r"duplicate key 'a'.*t\.yaml:1.*line 2"):
        parse_stream("a: 1\na: 2\n", "t.yaml")
