"""Parsed manifests are kept between runs by content, and a damaged entry is read again; runs
share the cache at once, and a run never hangs on it. No test measures time: a deadline on a
subprocess only guards against a hang."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gate.sources import manifests, parsecache
from tests.unit.helpers import run_together

#: The deadline of a subprocess: far beyond what it takes, there only to end a hang.
GUARD = 120

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
    _forget_this_process()
    manifests.parse_stream(TEXT, "a.yaml")  # a later run caches again: the file was replaced
    _forget_this_process()
    assert len(_entries(folder)) == 1


def test_the_folder_deleted_during_a_run_loses_nothing(folder: Path) -> None:
    manifests.parse_stream(TEXT, "a.yaml")
    _forget_this_process()
    assert parsecache.get(parsecache.key(TEXT, False)) is not None  # the file is open
    shutil.rmtree(folder)
    other = TEXT.replace("name: a", "name: b")
    manifests.parse_stream(other, "b.yaml")
    _forget_this_process()  # no error: written to a new file
    assert [k for k, _, _ in _entries(folder)] == [parsecache.key(other, False)]


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


# --- runs at once --------------------------------------------------------------------------------

#: A run in its own process: it waits for a line on stdin (all start together), looks up the
#: shared texts, keeps those it missed and its own, and ends as `gate` does (the exit handlers,
#: then os._exit), printing how many shared ones it found.
RUN = """
import sys
from gate.sources import parsecache
from gate.speed import quick_exit
me, n, size = (int(a) for a in sys.argv[1:4])
sys.stdin.readline()
shared = [parsecache.key(f"shared {i}", False) for i in range(n)]
have = parsecache.get_many(shared)
for key in shared:
    if key not in have:
        parsecache.put(key, [({"pad": "s" * size}, 1)])
for i in range(n):
    parsecache.put(parsecache.key(f"run {me} text {i}", False), [({"pad": str(me) * size}, 1)])
print(len(have), flush=True)
quick_exit(0)
"""


def _runs(count: int, n: int, size: int) -> list[str]:
    """`count` runs of `RUN` started together; what each printed."""
    return run_together(RUN, [[str(me), str(n), str(size)] for me in range(count)], None, GUARD)


def test_runs_exiting_at_once_share_the_cache(folder: Path) -> None:
    _runs(6, 100, 100)
    keys = {k for k, _, _ in _entries(folder)}
    assert {parsecache.key(f"shared {i}", False) for i in range(100)} <= keys
    assert {parsecache.key(f"run {me} text {i}", False) for me in range(6) for i in range(100)} <= (
        keys
    )
    assert _runs(2, 100, 100) == ["100", "100"]


def test_runs_exiting_at_once_write_a_bounded_share_into_a_bounded_file(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hang: each run wrote everything it parsed in one transaction at exit, while the
    others waited on SQLite's lock, into a file and a log that only grew."""
    monkeypatch.setenv("PRUNE_GATE_CACHE_MAX_MB", "1")
    _runs(6, 40, 20_000)  # 1.6 MB parsed each
    (db,) = folder.glob("*.sqlite")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.stat().st_size <= 1.25 * (1 << 20)


#: A process that forks while its thread `reader` is inside the parse cache (opening the file,
#: the store's lock held); the child parses, writes and reads its entry back, exiting 0 when it
#: did. An alarm ends a child that hangs.
FORK = """
import os, signal, sqlite3, threading
from gate.sources import manifests, parsecache
inside, release = threading.Event(), threading.Event()
real = sqlite3.connect
def connect(*args, **kwargs):
    if threading.current_thread().name == "reader":
        inside.set()
        release.wait()
    return real(*args, **kwargs)
sqlite3.connect = connect
reader = threading.Thread(target=parsecache.get_many, args=(["k"],), name="reader")
reader.start()
inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(60)
    text = "apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: c, namespace: n}\\n"
    manifests.parse_stream(text, "c.yaml")
    parsecache.flush()
    os._exit(0 if parsecache.get(parsecache.key(text, False)) else 3)
release.set()
reader.join()
print(os.waitpid(pid, 0)[1])
"""


def test_a_child_forked_while_a_thread_is_in_the_cache_uses_it(folder: Path) -> None:
    """A fork copies the store's lock as the thread holding it left it, but not the thread: the
    child waited for it forever."""
    done = subprocess.run(
        [sys.executable, "-c", FORK], capture_output=True, text=True, timeout=GUARD, check=True
    )
    status = int(done.stdout)
    assert not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGALRM, "child hung"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
