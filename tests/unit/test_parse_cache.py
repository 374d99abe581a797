"""Parsed manifests are kept between runs by content, and a damaged entry is read again."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gate.sources import manifests, parsecache

TEXT = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n}\ndata: {on: yes}\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PRUNE_GATE_PARSE_CACHE", str(tmp_path))
    parsecache.reset()
    yield tmp_path
    parsecache.reset()


def _entries(folder: Path) -> list[tuple[str, bytes, bytes]]:
    files = list(folder.glob("*.sqlite"))
    if not files:
        return []
    (db,) = files
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT key, digest, data FROM entries"))


def _forget_this_process() -> None:
    """What a new process sees: only what was written."""
    parsecache.flush()
    parsecache.reset()


def test_a_second_read_comes_from_the_cache_relabelled(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = manifests.parse_stream(TEXT, "a.yaml")
    _forget_this_process()
    assert len(_entries(folder)) == 1

    def no_parse(*_: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(manifests, "load_documents", no_parse)
    again = manifests.parse_stream(TEXT, "b.yaml")
    assert [o.body for o in again] == [o.body for o in first]
    assert [str(o.source) for o in again] == ["b.yaml:1"]


def test_entries_are_written_when_the_process_exits(folder: Path) -> None:
    code = "from gate.sources import manifests; manifests.parse_stream(open('a.yaml').read(), 'a')"
    (folder / "a.yaml").write_text(TEXT)
    subprocess.run([sys.executable, "-c", code], cwd=folder, check=True)
    assert len(_entries(folder)) == 1


def test_a_damaged_entry_is_read_again(folder: Path) -> None:
    manifests.parse_stream(TEXT, "a.yaml")
    _forget_this_process()
    ((entry, _, data),) = _entries(folder)
    (db,) = folder.glob("*.sqlite")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE entries SET data = ?", (data[:-1] + bytes([data[-1] ^ 0xFF]),))
    parsecache.reset()
    assert parsecache.get(entry) is None
    assert [o.body["data"] for o in manifests.parse_stream(TEXT, "a.yaml")] == [{True: True}]


def test_a_database_that_is_not_one_is_no_cache(folder: Path) -> None:
    manifests.parse_stream(TEXT, "a.yaml")
    _forget_this_process()
    (db,) = folder.glob("*.sqlite")
    for extra in folder.glob("*.sqlite-*"):
        extra.unlink()
    db.write_bytes(b"\x00garbage" * 100)
    parsecache.reset()
    assert [o.body["data"] for o in manifests.parse_stream(TEXT, "a.yaml")] == [{True: True}]
    parsecache.flush()  # no error either


def test_errors_are_not_kept(folder: Path) -> None:
    with pytest.raises(Exception, match=r"a\.yaml:1: ConfigMap has no metadata.name"):
        manifests.parse_stream("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "a.yaml")
    _forget_this_process()
    assert _entries(folder) == []


def test_two_threads_share_one_cache(folder: Path) -> None:
    texts = [TEXT.replace("name: a", f"name: a{i}") for i in range(200)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda t: parsecache.put(parsecache.key(t, False), [({"t": t}, 1)]), texts))
    _forget_this_process()
    got = {parsecache.get(parsecache.key(t, False))[0][0]["t"] for t in texts}  # type: ignore[index]
    assert got == set(texts)


def test_off_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRUNE_GATE_PARSE_CACHE", "off")
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path))
    parsecache.reset()
    try:
        manifests.parse_stream(TEXT, "a.yaml")
        parsecache.flush()
    finally:
        parsecache.reset()
    assert not list(tmp_path.rglob("*"))
