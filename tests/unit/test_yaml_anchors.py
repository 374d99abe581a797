"""Anchors and aliases of scalars read the fast way, exactly as the careful reader reads them.

Flux repositories name an app once (`name: &app web`) and repeat it (`*app`); those files went
the careful way, 35x slower per byte than the fast readers. Both fast readers (the Python one
and the native one) now read anchors, and aliases of scalars, with the careful reader's rules:
anchors per document, a second anchor of one name refused, an alias of a collection left to the
careful reader (it bounds their expansion), and no more aliases than the caller's limit.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gate.model.errors import InputError
from gate.sources import yamlevents
from gate.sources.manifests import MAX_ALIAS_NODES, MAX_DEPTH, parse_stream
from tests.unit.test_yamlevents import _block_line, careful_or_error, typed

_NATIVE = yamlevents._NATIVE is not None


def readings(text: str, max_aliases: int = MAX_ALIAS_NODES) -> list[Any]:
    """What each fast reader gives (typed, or None for 'read it carefully'): the Python one, and
    the native one by its scanner and by libyaml's events when it is installed."""
    found = [yamlevents.python_documents(text, MAX_DEPTH, max_aliases)]
    if _NATIVE:
        found.append(yamlevents.native_documents(text, MAX_DEPTH, max_aliases=max_aliases))
        found.append(
            yamlevents.native_documents(text, MAX_DEPTH, max_aliases=max_aliases, scanner=False)
        )
    return [None if docs is None else [(line, typed(doc)) for line, doc in docs] for docs in found]


def assert_reads_as_the_careful_reader(text: str) -> Any:
    """Every fast reader agrees with the others, and what they accept the careful reader reads
    alike; the common reading."""
    first, *others = readings(text)
    assert all(other == first for other in others), (text, first, others)
    if first is not None:
        assert first == careful_or_error(text), text
    return first


FLUX_STYLE = """\
---
# a HelmRelease as home-operations write them
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: &app smartctl-exporter
  namespace: &ns o11y
spec:
  interval: 1h
  values:
    fullnameOverride: *app
    serviceMonitor:
      selector: {app: *app, namespace: *ns}
    ports: [&port 9633, *port]
"""


def test_a_flux_style_release_reads_the_fast_way() -> None:
    docs = assert_reads_as_the_careful_reader(FLUX_STYLE)
    assert docs is not None
    (_, release), *_ = docs
    values = release[("str", "spec")][("str", "values")]
    assert values[("str", "fullnameOverride")] == ("str", "smartctl-exporter")
    assert values[("str", "ports")] == [("int", 9633), ("int", 9633)]


def test_a_manifest_with_anchors_is_read_without_the_careful_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(text: str, path: str) -> list[tuple[int, Any]]:
        raise AssertionError(f"{path} went the careful way")

    monkeypatch.setattr("gate.sources.manifests._careful_documents", refuse)
    (release,) = parse_stream(FLUX_STYLE, "release.yaml", cache_key="anchors-test")
    assert release.body["spec"]["values"]["fullnameOverride"] == "smartctl-exporter"
    assert release.source.line == 3


@pytest.mark.parametrize(
    ("text", "fast"),
    [
        ("a: &x 1\nb: *x\n", True),
        ("&k a: *k\n", True),  # an anchored key, then its alias as a value
        ("- &x 1\n- *x\n- [*x, {y: *x}]\n", True),
        ("--- &root\na: &x 01\nb: *x\n", True),  # an anchor on the root; 01 is an int
        ("a: &x\nb: *x\n", True),  # an anchored null
        ("a: &x '01'\nb: *x\n", True),  # quoted stays a string through the alias
        ("a: &x {b: 1}\nc: 2\n", True),  # a collection's anchor that is never named again
        ("a: &x 1\nb: &x 2\n", False),  # a second anchor of one name: the careful error
        ("a: *x\n", False),  # undefined
        ("a: &x 1\n---\nb: *x\n", False),  # anchors are per document
        ("--- *x\n", False),  # an alias as a root
        ("a: &x {b: 1}\nc: *x\n", False),  # a collection's alias: the careful reader bounds it
        ("a: &x [*x]\n", False),  # an alias of the collection it is in
        ("a: &x b\n*x : 1\n", False),  # an alias as a key
        ("a: &x <<\n", False),  # a merge key stays the careful reader's
        ("a: &x !!str 1\nb: *x\n", False),  # a tag
    ],
)
def test_what_reads_the_fast_way_and_what_goes_the_careful_way(text: str, fast: bool) -> None:
    assert (assert_reads_as_the_careful_reader(text) is not None) is fast


def test_aliases_past_the_limit_go_the_careful_way() -> None:
    text = "a: &x 1\nb: [*x, *x, *x]\n"
    assert all(docs is not None for docs in readings(text, max_aliases=3))
    assert readings(text, max_aliases=2) == [None] * len(readings(text, max_aliases=2))
    # each reader takes none unless told; the reader manifests use takes the careful limit
    assert yamlevents.python_documents(text, MAX_DEPTH) is None
    assert yamlevents.load_documents(text, MAX_DEPTH) is not None


def test_one_alias_past_the_limit_is_the_careful_readers_error() -> None:
    text = "a: &x 1\nb: [" + ", ".join(["*x"] * (MAX_ALIAS_NODES + 1)) + "]\n"
    assert all(docs is None for docs in readings(text))
    assert careful_or_error(text) is InputError


_VALUES = ["1", "x", "'1'", "~", "", "on", "0x1F", "a b"]


@st.composite
def _anchored_document(draw: st.DrawFn, d: int) -> str:
    """Document `d`: `key: value` lines whose values (now and then keys) define anchors on
    scalars and collections and name them, in block and flow style; mostly names defined
    earlier in it, now and then a name defined twice, never, in another document, or on a
    collection."""
    scalars: list[str] = []  # anchors on scalars defined so far
    others = [f"c{d}_0", f"s{d - 1}_0", "none"]  # a collection's, another document's, undefined

    def fresh() -> str:
        if scalars and draw(st.integers(0, 29)) == 0:
            return draw(st.sampled_from(scalars))  # a second anchor of one name
        scalars.append(f"s{d}_{len(scalars)}")
        return scalars[-1]

    def alias() -> str:
        if scalars and draw(st.integers(0, 19)) > 0:
            return "*" + draw(st.sampled_from(scalars))
        return "*" + draw(st.sampled_from(others))

    lines = []
    for i in range(draw(st.integers(1, 6))):
        key = draw(st.integers(0, 11))  # drawn in the order written: key, then value
        written = f"k{i}" if key < 8 else f"&{fresh()} k{i}" if key < 11 else alias()
        shape = draw(st.integers(0, 5))
        if shape <= 1:
            value = f"&{fresh()} {draw(st.sampled_from(_VALUES))}"
        elif shape <= 3:
            value = alias()
        elif shape == 4:
            value = f"[{alias()}, &{fresh()} z, &c{d}_{i} {{k: {alias()}}}]"
        else:
            value = f"\n  - {alias()}\n  - &{fresh()} {draw(st.sampled_from(_VALUES))}"
        lines.append(f"{written}: {value}\n")
    return draw(st.sampled_from(["", "--- &r\n"])) + "".join(lines)


_ANCHORED_TEXTS = st.integers(1, 3).flatmap(
    lambda n: st.tuples(*(_anchored_document(d) for d in range(n))).map("---\n".join)
)


@given(_ANCHORED_TEXTS)
def test_anchored_texts_read_alike_or_go_the_careful_way(text: str) -> None:
    assert_reads_as_the_careful_reader(text)


@given(st.lists(_block_line(), max_size=8).map("".join))
def test_generated_manifests_with_aliases_allowed_read_alike(text: str) -> None:
    assert_reads_as_the_careful_reader(text)


@given(st.text(alphabet=st.sampled_from(list("ab:- \n#'[]{},&*!|~01")), max_size=60))
def test_any_text_with_aliases_allowed_reads_alike_or_goes_the_careful_way(text: str) -> None:
    assert_reads_as_the_careful_reader(text)
