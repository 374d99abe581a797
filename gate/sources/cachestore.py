"""Bytes kept between runs by key, in one bounded SQLite file that concurrent runs share.

The storage under the parse cache (`gate.sources.parsecache`) and the build cache
(`gate.sources.buildcache`). A file per entry cost more to create than the parse it saved, so a
cache is one SQLite file per code version, `cache_root()/NAME/VERSION.sqlite`; what a run adds is
kept in memory and written in one transaction when it exits. Each entry carries its digest, so a
damaged one is left out as if absent. The environment variable a cache names turns it off
(`off`, `0`, `false`, `no`) or moves it (a folder).

A cache must never cost a run more than it saves, nor stop one, however many runs share it:

- Bounded on disk. Past `PRUNE_GATE_CACHE_MAX_MB` (256 MiB a file by default) the write that
  crosses it evicts the entries used longest ago. Use is a run counter in a side table (`uses`),
  bumped for the keys a run read in its exit transaction: a column of `entries` would rewrite
  each blob it is read. A run writes at most a quarter of the cap, so its exit transaction stays
  small; and the write-ahead log, past 16 MiB (or a quarter of the cap), is cut back to nothing
  by the write that finds it so (runs end without closing their connection, and with readers
  about SQLite only ever appends to it).
- Bounded waits. Every wait is a bounded one, and none holds up the process. Reads wait for
  another run at most 2 s (in WAL mode only a log's recovery or a journal switch makes them
  wait); the exit's write waits 5 s for the write lock, then gives its entries up (the next run
  parses them again), and its cut of the log 0.25 s for readers; the store's own lock, shared
  by the threads of a run, is waited for at most 30 s. Any other SQLite or OS error turns the
  store off for the process: a cache that cannot be used is no cache, never an error.
- Safe to delete at any time. A run whose file went away (its folder deleted) writes to a new one
  at exit; a file that is not a database, or is damaged, is removed, and the next run starts
  a new one. A new file is made whole under a name of its own and linked into place, so runs
  starting together never race to set it up. The connection is never closed at exit: closing
  the last one checkpoints the whole log under an exclusive lock, which would make starting
  runs wait.
- Fork-safe. A child forked while a thread of its parent held the store's lock would wait for
  it forever (no such thread runs there), and SQLite connections must not cross a fork: the
  child starts with a lock and a connection of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from gate.sources.cachedirs import cache_root
from gate.speed import blake2b  # not hashlib's: gate.speed says why

#: The schema this module writes (`PRAGMA user_version`); a file with another is made anew.
FORMAT = 1

#: The environment variable for the cap of each store, in MiB, and its default.
MAX_ENV = "PRUNE_GATE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 256

_OFF = ("off", "0", "false", "no")

#: Seconds a read waits for another run's lock; the exit's write for the write lock; a thread
#: for the store's own lock. Module constants, so that a test can shorten them.
READ_WAIT = 2.0
WRITE_WAIT = 5.0
LOCK_WAIT = 30.0
#: Seconds the log's cut waits for readers to leave it (holding the write lock meanwhile).
TRIM_WAIT = 0.25

#: Keys asked for in one query: SQLite's bound on variables is 999 in older builds.
_BATCH = 500
#: What eviction leaves of the cap, so that a full store does not evict on every write.
_KEEP = 0.75
#: The part of the cap one run may write.
_RUN_SHARE = 4
#: Bytes counted for an entry besides its key, digest and data (SQLite's record and b-tree).
_OVERHEAD = 64
#: Read keys remembered to mark as used, at most (`gate history` reads many).
_USED_MAX = 100_000
#: The largest the write-ahead log is left at the end of a write: at most this, and a quarter
#: of the cap.
_LOG_MAX = 16 << 20

_SCHEMA = (
    "CREATE TABLE entries (key TEXT PRIMARY KEY, digest BLOB NOT NULL, data BLOB NOT NULL)"
    " WITHOUT ROWID",
    "CREATE TABLE uses (key TEXT PRIMARY KEY, used INTEGER NOT NULL, size INTEGER NOT NULL)"
    " WITHOUT ROWID",
    "CREATE INDEX uses_by_age ON uses (used, size)",
)


def turned_off(env: str) -> bool:
    """Whether the environment variable `env` turns its cache off."""
    return os.environ.get(env, "").lower() in _OFF


def max_bytes() -> int:
    """The cap of each store: `PRUNE_GATE_CACHE_MAX_MB` (a positive number), else 256 MiB."""
    try:
        mib = float(os.environ.get(MAX_ENV, ""))
    except ValueError:
        mib = DEFAULT_MAX_MB
    if not mib > 0:  # also NaN
        mib = DEFAULT_MAX_MB
    return int(mib * (1 << 20))


def digest(data: bytes) -> bytes:
    """The digest kept with `data`."""
    return blake2b(data, digest_size=16).digest()


class CacheStore:
    """One cache's file: `read` and `write` entries, written at exit or on `flush`.

    Thread-safe: base and candidate are read in two threads."""

    def __init__(self, name: str, version: str, *, env: str) -> None:
        self.name, self.version, self.env = name, version, env
        self._lock = threading.Lock()
        self._registered = False
        self._clear()
        _STORES.append(self)

    def _clear(self) -> None:
        """The state of a store nothing has used yet."""
        self._db: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None  # of the file opened (device, inode)
        self._off = False
        self._settings: tuple[Path | None, int] | None = None  # the file (None: off), the cap
        self._pending: dict[str, bytes] = {}
        self._pending_bytes = 0
        self._used: set[str] = set()

    @property
    def enabled(self) -> bool:
        """Whether entries are kept: not turned off by its variable, nor by an error."""
        return not self._off and self._path() is not None

    def _path(self) -> Path | None:
        return self._read_settings()[0]

    def _cap(self) -> int:
        return self._read_settings()[1]

    def _read_settings(self) -> tuple[Path | None, int]:
        """The file (None when its variable turns it off) and the cap, read once."""
        if self._settings is None:
            setting = os.environ.get(self.env, "")
            if setting.lower() in _OFF:
                path = None
            else:
                base = Path(setting) if setting else cache_root() / self.name
                path = base / f"{self.version}.sqlite"
            self._settings = (path, max_bytes())
        return self._settings

    def read(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The data kept under each of `keys`, pending writes included; absent and damaged
        entries are left out."""
        if not keys:
            return {}
        with self._held() as held:
            if not held:
                return {}
            found = {k: self._pending[k] for k in keys if k in self._pending}
            asked = [k for k in dict.fromkeys(keys) if k not in found]
            db = self._connect() if asked else None
            rows = self._select(db, asked) if db is not None else []
        stored = {
            k: data
            for k, kept, data in rows
            if isinstance(k, str) and isinstance(data, bytes) and kept == digest(data)
        }
        if len(self._used) < _USED_MAX:
            self._used.update(stored)  # one call: atomic under the GIL
        return found | stored

    def write(self, key: str, data: bytes) -> None:
        """Keep `data` under `key`, written at exit (or on `flush`); beyond this run's share of
        the cap, a write is dropped (the first ones are kept)."""
        if not self.enabled:
            return
        with self._held() as held:
            if not held:
                return
            size = self._pending_bytes - len(self._pending.get(key, b"")) + len(data)
            if size > self._cap() // _RUN_SHARE:
                return
            if not self._registered:
                atexit.register(self.flush)
                self._registered = True
            self._pending[key] = data
            self._pending_bytes = size

    def flush(self) -> None:
        """Write the pending entries, and mark what this run read as used, in one transaction
        (at exit; or now). One that cannot get the write lock in time is given up."""
        with self._held() as held:
            if not held:
                return  # a thread of this run stuck with the lock: no wait at exit
            pending, used = self._pending, self._used - self._pending.keys()
            self._pending, self._pending_bytes, self._used = {}, 0, set()
            if not pending and not used:
                return
            db = self._reconnect_if_gone()
            if db is not None:
                self._store(db, pending, used)

    def reset(self) -> None:
        """Forget the connection, the settings read and the pending entries: what a new process
        sees (tests change the environment)."""
        with self._lock:
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
            self._clear()

    # --- the file ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _held(self) -> Iterator[bool]:
        """The store's lock, if it comes within `LOCK_WAIT`: whether it did."""
        held = self._lock.acquire(timeout=LOCK_WAIT)
        try:
            yield held
        finally:
            if held:
                self._lock.release()

    def _connect(self) -> sqlite3.Connection | None:
        """The open database, opened (and its schema made) on first use; None when off."""
        if self._off:
            return None
        if self._db is None:
            path = self._path()
            if path is None:
                return None
            try:
                self._db = _open(path)
                self._identity = _identity(path)
            except (OSError, sqlite3.Error) as exc:
                self._fail(exc)
        return self._db

    def _reconnect_if_gone(self) -> sqlite3.Connection | None:
        """The database to write to: a new one when the file opened was deleted since (its
        folder removed during the run), so that this run's entries are not lost with it."""
        path = self._path()
        if self._db is not None and path is not None and _identity(path) != self._identity:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()  # of a file that is gone
            self._db, self._off = None, False
        return self._connect()

    def _select(self, db: sqlite3.Connection, asked: list[str]) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = []
        try:
            for at in range(0, len(asked), _BATCH):
                part = asked[at : at + _BATCH]
                rows.extend(
                    db.execute(
                        # a blob whatever was stored: text that is not UTF-8 would fail the
                        # whole query, not just its entry
                        "SELECT key, digest, CAST(data AS BLOB) FROM entries WHERE key IN"
                        f" ({','.join('?' * len(part))})",
                        part,
                    ).fetchall()
                )
        except sqlite3.Error as exc:
            self._fail(exc)
            return []
        return rows

    def _store(self, db: sqlite3.Connection, pending: dict[str, bytes], used: set[str]) -> None:
        """One write transaction: the uses of what this run read, room made for the new
        entries (the entries used longest ago evicted), the new entries; then the log cut
        back when it grew past its limit."""
        try:
            if not _begin_write(db):
                return  # another run held the write lock too long: these entries are given up
            try:
                run = _mark_used(db, used)
                _evict(db, self._cap(), sum(_size(k, v) for k, v in pending.items()))
                _insert(db, pending, run)
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            _trim_log(db, self._path(), self._cap())
        except sqlite3.Error as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Off for this process; a file that is not a database, or is damaged, is removed (the
        next run makes a new one; runs that have it open keep their handle)."""
        self._off = True
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        path = self._path()
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) and path is not None:
            for extra in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    Path(f"{path}{extra}").unlink()

    def _after_fork(self) -> None:
        """In a forked child: a lock of its own, no connection (the parent's is left unused and
        never closed, since closing would act on the parent's locks), nothing pending."""
        if self._db is not None:
            _ABANDONED.append(self._db)
        self._lock = threading.Lock()
        settings, off = self._settings, self._off
        self._clear()
        self._settings, self._off = settings, off


def _open(path: Path) -> sqlite3.Connection:
    """A connection to `path` (made first when absent), with the schema of `FORMAT`."""
    if not path.exists():
        _create(path)
    db = sqlite3.connect(path, timeout=READ_WAIT, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA synchronous=OFF")  # a lost entry is computed again
        db.execute("PRAGMA secure_delete=OFF")  # evicted entries need no overwriting: I/O saved
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version != FORMAT:
            db.execute(f"PRAGMA busy_timeout={int(WRITE_WAIT * 1000)}")
            _make_schema(db)
            db.execute(f"PRAGMA busy_timeout={int(READ_WAIT * 1000)}")
    except BaseException:
        db.close()
        raise
    return db


def _create(path: Path) -> None:
    """Make the file whole under a name of this thread's, then link it into place unless
    another run did first: runs starting together on a new file would otherwise all switch it
    to WAL at once, and SQLite may refuse the switch instead of waiting for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.new")
    try:
        db = sqlite3.connect(new, isolation_level=None)
        try:
            _make_schema(db)
        finally:
            db.close()  # the last connection: its log is checkpointed and removed
        with contextlib.suppress(FileExistsError):
            path.hardlink_to(new)
    except (OSError, sqlite3.Error):
        pass  # no link (a file system without them): the file is made in place, as it comes
    finally:
        for extra in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                Path(f"{new}{extra}").unlink()


def _make_schema(db: sqlite3.Connection) -> None:
    """WAL mode and this module's tables, once per file; tables of another format are
    dropped."""
    if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != FORMAT:
            for table in ("entries", "uses"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version={FORMAT}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _begin_write(db: sqlite3.Connection) -> bool:
    """Take the write lock, waiting at most `WRITE_WAIT`: whether it came."""
    db.execute(f"PRAGMA busy_timeout={int(WRITE_WAIT * 1000)}")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
            raise
        return False
    finally:
        db.execute(f"PRAGMA busy_timeout={int(READ_WAIT * 1000)}")
    return True


def _size(key: str, data: bytes) -> int:
    """The bytes counted for an entry: key, digest, data and SQLite's overhead."""
    return len(key) + 16 + len(data) + _OVERHEAD


def _mark_used(db: sqlite3.Connection, used: set[str]) -> int:
    """This run's number (one more than the last), stamped on the entries it read."""
    (run,) = db.execute("SELECT coalesce(max(used), 0) + 1 FROM uses").fetchone()
    keys = list(used)
    for at in range(0, len(keys), _BATCH):
        part = keys[at : at + _BATCH]
        db.execute(
            f"UPDATE uses SET used = ? WHERE key IN ({','.join('?' * len(part))})", [run, *part]
        )
    return int(run)


def _insert(db: sqlite3.Connection, pending: dict[str, bytes], run: int) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO entries VALUES (?, ?, ?)",
        [(k, digest(v), v) for k, v in pending.items()],
    )
    db.executemany(
        "INSERT OR REPLACE INTO uses VALUES (?, ?, ?)",
        [(k, run, _size(k, v)) for k, v in pending.items()],
    )


def _evict(db: sqlite3.Connection, cap: int, incoming: int) -> None:
    """When the pages in use and `incoming` bytes would pass `cap`, remove the entries used
    longest ago until `_KEEP` of it would be left; freed pages are reused, so the file stays
    within the cap."""
    page = db.execute("PRAGMA page_size").fetchone()[0]
    in_use = page * (
        db.execute("PRAGMA page_count").fetchone()[0]
        - db.execute("PRAGMA freelist_count").fetchone()[0]
    )
    if in_use + incoming <= cap:
        return
    excess = in_use + incoming - int(cap * _KEEP)
    victims: list[str] = []
    oldest = db.execute("SELECT key, size FROM uses ORDER BY used, key")
    try:
        for key, size in oldest:
            if excess <= 0:
                break
            victims.append(key)
            excess -= size
    finally:
        oldest.close()
    for at in range(0, len(victims), _BATCH):
        part = victims[at : at + _BATCH]
        marks = ",".join("?" * len(part))
        db.execute(f"DELETE FROM entries WHERE key IN ({marks})", part)
        db.execute(f"DELETE FROM uses WHERE key IN ({marks})", part)


def _trim_log(db: sqlite3.Connection, path: Path | None, cap: int) -> None:
    """Past its limit, checkpoint the write-ahead log and cut it to nothing, waiting for
    readers at most `TRIM_WAIT`. Runs that end with `os._exit` never close their connection,
    so nothing else would: with readers always about, SQLite only ever appends to it."""
    try:
        size = Path(f"{path}-wal").stat().st_size
    except OSError:
        return
    if size > min(_LOG_MAX, cap // _RUN_SHARE):
        db.execute(f"PRAGMA busy_timeout={int(TRIM_WAIT * 1000)}")
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # busy: left for the next
        finally:
            db.execute(f"PRAGMA busy_timeout={int(READ_WAIT * 1000)}")


#: Every store made, for the fork hook; connections a forked child inherited, kept so that
#: they are never closed there.
_STORES: list[CacheStore] = []
_ABANDONED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for store in _STORES:
        store._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
