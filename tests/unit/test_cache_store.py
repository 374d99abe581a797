"""A CacheStore keeps bytes between runs, bounded, safe to delete, and shared by concurrent runs
without waiting on them for long. Concurrency is tested with real processes; no test measures
time (a deadline on a subprocess only guards against a hang)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gate.sources import cachestore
from gate.sources.cachestore import CacheStore, digest
from tests.unit.helpers import run_together

ENV = "PRUNE_GATE_TEST_CACHE"
#: The deadline of a subprocess: far beyond what it takes, there only to end a hang.
GUARD = 120

Make = Callable[[], CacheStore]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    monkeypatch.delenv(cachestore.MAX_ENV, raising=False)
    return tmp_path / "store"


@pytest.fixture
def make(folder: Path) -> Iterator[Make]:
    """A factory of stores on `folder`, each a new run's view; all forgotten afterwards, so
    that no exit handler writes into a deleted folder."""
    made: list[CacheStore] = []

    def new() -> CacheStore:
        made.append(CacheStore("test", "v1", env=ENV))
        return made[-1]

    yield new
    for store in made:
        store.reset()


def _run(store: CacheStore, writes: dict[str, bytes]) -> None:
    """One run that writes `writes`, then exits (its flush)."""
    for key, data in writes.items():
        store.write(key, data)
    store.flush()


def _db(folder: Path) -> Path:
    (db,) = folder.glob("*.sqlite")
    return db


def _connect(db: Path) -> contextlib.closing[sqlite3.Connection]:
    """A connection of the test's own, closed after its block (a transaction each statement)."""
    return contextlib.closing(sqlite3.connect(db, isolation_level=None))


def _keys(folder: Path) -> set[str]:
    with _connect(_db(folder)) as conn:
        return {k for (k,) in conn.execute("SELECT key FROM entries")}


def _holder(db: Path) -> subprocess.Popen[str]:
    """Another run holding the write lock of `db` until its stdin closes (or, should the test
    hang on it, the guard's alarm ends it); started when it says so on stdout."""
    code = (
        "import signal, sqlite3, sys\n"
        f"signal.alarm({GUARD})\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN IMMEDIATE')\n"
        "db.execute(\"INSERT OR REPLACE INTO entries VALUES ('held', x'00', x'00')\")\n"
        "print('holding', flush=True)\n"
        "sys.stdin.read()\n"
        "db.execute('COMMIT')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "holding\n"
    return proc


# --- what it keeps ---------------------------------------------------------------------------


def test_an_entry_is_read_back_pending_then_from_the_file(make: Make, folder: Path) -> None:
    first = make()
    first.write("a", b"alpha")
    assert first.read(["a", "absent"]) == {"a": b"alpha"}  # pending
    assert _keys(folder) == set()  # nothing written before the exit
    first.flush()
    assert make().read(["a", "absent", "a"]) == {"a": b"alpha"}
    assert make().read([]) == {}


def test_the_file_is_the_name_and_version_under_the_cache_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path))
    store = CacheStore("builds", "1234", env=ENV)
    try:
        _run(store, {"k": b"v"})
    finally:
        store.reset()
    assert [p.name for p in (tmp_path / "builds").glob("*.sqlite")] == ["1234.sqlite"]


def test_a_damaged_entry_is_left_out(make: Make, folder: Path) -> None:
    _run(make(), {"good": b"kept", "bad": b"flipped", "text": b"x"})
    with _connect(_db(folder)) as conn:
        conn.execute("UPDATE entries SET data = x'00' WHERE key = 'bad'")
        conn.execute("UPDATE entries SET data = CAST(x'ff00ff' AS TEXT) WHERE key = 'text'")
    assert make().read(["good", "bad", "text"]) == {"good": b"kept"}


@pytest.mark.parametrize("setting", ["off", "0", "false", "No"])
def test_the_variable_turns_it_off(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, setting)
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path))
    store = CacheStore("test", "v1", env=ENV)
    try:
        assert not store.enabled
        _run(store, {"k": b"v"})
        assert store.read(["k"]) == {}
    finally:
        store.reset()
    assert not list(tmp_path.rglob("*"))


# --- bounded ---------------------------------------------------------------------------------


def test_past_the_cap_the_entries_used_longest_ago_go(
    make: Make, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cachestore.MAX_ENV, "2")  # MiB; a run writes at most 512 KiB
    blob = bytes(100_000)

    def group(name: str) -> dict[str, bytes]:
        return {f"{name}{i}": blob + name.encode() for i in range(4)}

    for name in "abcd":
        _run(make(), group(name))
    reader = make()
    assert len(reader.read(list(group("a")))) == 4  # a is used again: now newer than b, c, d
    reader.flush()
    for name in "ef":
        _run(make(), group(name))
    kept = _keys(folder)
    assert not kept & set(group("b"))  # the oldest unused go first
    assert set(group("a")) | set(group("e")) | set(group("f")) <= kept
    assert _db(folder).stat().st_size <= 2.25 * (1 << 20)


def test_a_run_writes_at_most_a_quarter_of_the_cap(
    make: Make, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cachestore.MAX_ENV, "2")
    _run(make(), {f"k{i}": bytes(100_000) for i in range(10)})
    assert _keys(folder) == {f"k{i}" for i in range(5)}  # the first ones, within 512 KiB


def test_the_log_is_cut_back_once_no_reader_holds_it(
    make: Make, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cachestore.MAX_ENV, "1")  # the log's limit: 256 KiB
    _run(make(), {"a": bytes(200_000)})
    log = Path(f"{_db(folder)}-wal")
    with _connect(_db(folder)) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM entries").fetchall()  # a snapshot held
        _run(make(), {"b": bytes(200_000)})
        _run(make(), {"c": bytes(200_000)})
        assert log.stat().st_size > 256 << 10  # it could not be cut: a reader uses it
        reader.execute("COMMIT")
    _run(make(), {"d": b"small"})
    assert log.stat().st_size <= 256 << 10
    assert len(make().read(["a", "b", "c", "d"])) == 4


@pytest.mark.parametrize("setting", ["", "-1", "0", "nan", "lots"])
def test_a_cap_that_is_not_a_positive_number_is_the_default(
    setting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cachestore.MAX_ENV, setting)
    assert cachestore.max_bytes() == 256 << 20
    monkeypatch.setenv(cachestore.MAX_ENV, "0.5")
    assert cachestore.max_bytes() == 512 << 10


# --- safe to delete, safe when damaged -------------------------------------------------------


def test_the_folder_deleted_during_a_run_loses_nothing(make: Make, folder: Path) -> None:
    _run(make(), {"old": b"1"})
    run = make()
    assert run.read(["old"]) == {"old": b"1"}  # the file is open
    shutil.rmtree(folder)
    run.write("new", b"2")
    assert run.read(["old", "new"]) == {"old": b"1", "new": b"2"}
    run.flush()  # no error: a new file
    assert make().read(["old", "new"]) == {"new": b"2"}


def test_a_file_that_is_not_a_database_is_replaced(make: Make, folder: Path) -> None:
    _run(make(), {"k": b"v"})
    db = _db(folder)
    for extra in folder.glob("*.sqlite-*"):
        extra.unlink()
    db.write_bytes(b"\x00garbage" * 100)
    run = make()
    assert run.read(["k"]) == {}  # no error: no cache
    assert not run.enabled
    _run(run, {"k": b"v"})
    assert not db.exists()  # removed, for the next run to start anew
    _run(make(), {"k": b"v2"})
    assert make().read(["k"]) == {"k": b"v2"}


def test_a_file_of_another_layout_is_made_anew(make: Make, folder: Path) -> None:
    folder.mkdir()
    with _connect(folder / "v1.sqlite") as conn:  # the parse cache's first layout
        conn.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, digest BLOB, data BLOB)")
        conn.execute("INSERT INTO entries VALUES ('k', ?, x'00')", (digest(b"\x00"),))
    _run(make(), {"n": b"new"})
    assert make().read(["k", "n"]) == {"n": b"new"}


# --- shared by concurrent runs ---------------------------------------------------------------

#: A run in its own process: it waits for a line on stdin (all start together), reads the
#: shared keys, writes those it missed and its own, and ends as `gate` does (the exit
#: handlers, then os._exit), printing how many shared keys it found.
RUN = """
import sys
from gate.sources.cachestore import CacheStore
from gate.speed import quick_exit
me, n, size = (int(a) for a in sys.argv[1:4])
store = CacheStore("test", "v1", env="PRUNE_GATE_TEST_CACHE")
sys.stdin.readline()
shared = [f"shared-{i}" for i in range(n)]
have = store.read(shared)
for key in shared:
    if key not in have:
        store.write(key, key.encode() * size)
for i in range(n):
    store.write(f"own-{me}-{i}", bytes([me]) * size)
print(len(have), flush=True)
quick_exit(0)
"""


def _runs(count: int, n: int, size: int, env: dict[str, str]) -> list[str]:
    """`count` runs of `RUN` at once; what each printed."""
    return run_together(RUN, [[str(me), str(n), str(size)] for me in range(count)], env, GUARD)


def _consistent(db: Path) -> list[str]:
    """The keys of `db`, after checking it is sound and every entry matches its digest."""
    with _connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT key, digest, data FROM entries").fetchall()
    assert all(kept == digest(data) for _, kept, data in rows)
    return [k for k, _, _ in rows]


def test_runs_at_once_share_the_file(folder: Path) -> None:
    env = dict(os.environ)
    _runs(6, 200, 500, env)
    keys = set(_consistent(_db(folder)))
    assert {f"shared-{i}" for i in range(200)} <= keys
    assert {f"own-{me}-{i}" for me in range(6) for i in range(200)} <= keys
    assert _runs(2, 200, 500, env) == ["200", "200"]  # a later run finds them


def test_runs_at_once_past_the_cap_leave_a_bounded_file(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cachestore.MAX_ENV, "1")
    _runs(6, 40, 20_000, dict(os.environ))  # 1.6 MB wanted each, 256 KiB written each
    db = _db(folder)
    assert _consistent(db)
    assert db.stat().st_size <= 1.25 * (1 << 20)
    log = Path(f"{db}-wal")
    assert not log.exists() or log.stat().st_size <= 1 << 20


def test_a_write_that_cannot_get_the_lock_is_given_up_and_reads_go_on(
    make: Make, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(make(), {"old": b"1"})
    monkeypatch.setattr(cachestore, "WRITE_WAIT", 0.2)
    holder = _holder(_db(folder))
    try:
        run = make()
        assert run.read(["old"]) == {"old": b"1"}  # a reader does not wait on a writer
        _run(run, {"new": b"2"})  # returns: given up
        assert run.enabled
        assert run.read(["old", "new"]) == {"old": b"1"}
    finally:
        holder.communicate("", timeout=GUARD)
    _run(run, {"later": b"3"})
    assert make().read(["new", "later"]) == {"later": b"3"}


def test_a_thread_stuck_with_the_lock_does_not_hold_up_the_exit(
    make: Make, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make()
    inside, release = _block_in_connect(monkeypatch)
    reader = threading.Thread(target=store.read, args=(["k"],), name="reader")
    reader.start()
    guard = threading.Timer(GUARD, release.set)  # should the exit wait for the thread after all
    guard.start()
    try:
        inside.wait()
        monkeypatch.setattr(cachestore, "LOCK_WAIT", 0.2)
        _run(store, {"k": b"v"})  # the write and the flush give up instead of waiting
    finally:
        release.set()
        guard.cancel()
        reader.join()
    assert make().read(["k"]) == {}


def _block_in_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event]:
    """Make a thread named `reader` stop inside the store (holding its lock, opening the file)
    until `release` is set; `inside` says it got there."""
    inside, release = threading.Event(), threading.Event()
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        if threading.current_thread().name == "reader":
            inside.set()
            release.wait()
        conn: sqlite3.Connection = real(*args, **kwargs)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    return inside, release


#: A process that forks while its thread `reader` is inside the store (its lock held); the
#: child uses the store, then exits 0 if it read its entry back. An alarm ends a child that
#: hangs.
FORK = """
import os, signal, sqlite3, sys, threading
from gate.sources.cachestore import CacheStore
store = CacheStore("test", "v1", env="PRUNE_GATE_TEST_CACHE")
inside, release = threading.Event(), threading.Event()
real = sqlite3.connect
def connect(*args, **kwargs):
    if threading.current_thread().name == "reader":
        inside.set()
        release.wait()
    return real(*args, **kwargs)
sqlite3.connect = connect
reader = threading.Thread(target=store.read, args=(["k"],), name="reader")
reader.start()
inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(60)
    store.write("k", b"child")
    store.flush()
    os._exit(0 if store.read(["k"]) == {"k": b"child"} else 3)
release.set()
reader.join()
print(os.waitpid(pid, 0)[1])
"""


def test_a_child_forked_while_a_thread_holds_the_lock_uses_the_store(folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK], capture_output=True, text=True, timeout=GUARD, check=True
    )
    status = int(done.stdout)
    assert not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGALRM, "child hung"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
