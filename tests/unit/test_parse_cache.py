"""Parsed manifests are kept between runs by content, and a damaged entry is read again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.sources import manifests, parsecache

TEXT = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n}\ndata: {on: yes}\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PRUNE_GATE_PARSE_CACHE", str(tmp_path))
    parsecache._folder.cache_clear()
    yield tmp_path
    parsecache._folder.cache_clear()


def test_a_second_read_comes_from_the_cache_relabelled(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = manifests.parse_stream(TEXT, "a.yaml")
    assert len(list(folder.rglob("*"))) >= 2  # the version folder and an entry

    def no_parse(*_: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(manifests, "load_documents", no_parse)
    again = manifests.parse_stream(TEXT, "b.yaml")
    assert [o.body for o in again] == [o.body for o in first]
    assert [str(o.source) for o in again] == ["b.yaml:1"]


def test_a_damaged_entry_is_read_again(folder: Path) -> None:
    manifests.parse_stream(TEXT, "a.yaml")
    (entry,) = [p for p in folder.rglob("*") if p.is_file()]
    entry.write_bytes(b"\x00garbage")
    assert parsecache.get(entry.name) is None
    assert [o.body["data"] for o in manifests.parse_stream(TEXT, "a.yaml")] == [{True: True}]


def test_errors_are_not_kept(folder: Path) -> None:
    with pytest.raises(Exception, match=r"a\.yaml:1: ConfigMap has no metadata.name"):
        manifests.parse_stream("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "a.yaml")
    assert not [p for p in folder.rglob("*") if p.is_file()]


def test_off_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRUNE_GATE_PARSE_CACHE", "off")
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path))
    parsecache._folder.cache_clear()
    try:
        manifests.parse_stream(TEXT, "a.yaml")
    finally:
        parsecache._folder.cache_clear()
    assert not list(tmp_path.rglob("*"))
