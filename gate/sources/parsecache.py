"""Parsed manifests kept between runs, by content: a merge queue reads the same base every time.

Each entry is the checked objects of one text (bodies and lines), keyed by a hash of the text and
of the code that reads it (the loader, the YAML library, the shape checks), so a change to either
is a new key rather than a stale answer. Only texts that parsed cleanly are kept; an error is
found again, with its file and line, on every run. Entries are `marshal` data: plain dicts,
lists and scalars, nothing that runs code when read, each with its digest, so a damaged entry is
read from its text again. They live in one SQLite file per code version (a file per entry cost
more to create than the parse it saved), and new entries are written in one transaction when
the process exits. A directory or a git tree asks for all its entries in a few queries
(`get_many`), not one per file. The folder is safe to delete at any time;
`PRUNE_GATE_PARSE_CACHE=off` turns it off, a path moves it, and `PRUNE_GATE_CACHE` moves it with
the binaries'.
"""

from __future__ import annotations

import atexit
import marshal
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gate.sources import yamlevents
from gate.speed import blake2b  # not hashlib's: gate.speed says why

#: Files whose code decides what a text parses to: a change to one is a new cache.
_READERS = (
    "sources/manifests.py",
    "sources/yamlevents.py",
    "sources/yamlread.py",
    "model/shapes.py",
)

Entry = list[tuple[dict[str, Any], int]]

#: Keys asked for in one query: SQLite's bound on variables is 999 in older builds.
_BATCH = 500


@cache
def _database() -> Path | None:
    setting = os.environ.get("PRUNE_GATE_PARSE_CACHE", "")
    if setting.lower() in ("off", "0", "false", "no"):
        return None
    if setting:
        base = Path(setting)
    else:
        cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = os.environ.get("PRUNE_GATE_CACHE") or Path(cache_home) / "prune-gate"
        base = Path(root) / "parsed"
    return base / f"{_code_version()}.sqlite"


def _code_version() -> str:
    h = blake2b(yaml.__version__.encode(), digest_size=8)
    # The loader names itself (the native one: its version and build), since its code is not
    # among the files below.
    h.update(yamlevents.READER_ID.encode())
    package = Path(__file__).resolve().parent.parent
    for name in _READERS:
        h.update((package / name).read_bytes())
    return h.hexdigest()


def key(text: str, only_objects: bool) -> str:
    """The cache key of `text` read with `only_objects` (directories skip non-manifests)."""
    return bytes_key(text.encode("utf-8", "surrogatepass"), only_objects)


def bytes_key(data: bytes, only_objects: bool) -> str:
    """`key` of the text whose UTF-8 is `data` (a file's bytes: no need to encode it again)."""
    digest = blake2b(data, digest_size=16)
    digest.update(b"1" if only_objects else b"0")
    return digest.hexdigest()


def blob_key(blob_id: str, only_objects: bool) -> str:
    """The cache key of a git blob: its id names its content, so it is read only on a miss."""
    return key(f"git blob {blob_id}", only_objects)


class _Store:
    """The open database and the entries not yet written; one lock, since base and candidate
    may be read in two threads. Any SQLite error turns the cache off for the process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, bytes] = {}
        self.db: sqlite3.Connection | None = None
        self.broken = False

    def connect(self) -> sqlite3.Connection | None:
        path = _database()
        if path is None or self.broken:
            return None
        if self.db is None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(path, timeout=10, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=OFF")  # a lost entry is parsed again
                db.execute(
                    "CREATE TABLE IF NOT EXISTS entries"
                    " (key TEXT PRIMARY KEY, digest BLOB NOT NULL, data BLOB NOT NULL)"
                    " WITHOUT ROWID"
                )
                db.commit()
            except (OSError, sqlite3.Error):
                self.broken = True
                return None
            self.db = db
        return self.db

    def read(self, entries: Sequence[str]) -> dict[str, bytes]:
        """The data kept under each of `entries` that has an entry whose digest matches."""
        rows: list[tuple[object, object, object]] = []
        with self.lock:
            found = {e: self.pending[e] for e in entries if e in self.pending}
            asked = [e for e in entries if e not in found]
            db = self.connect() if asked else None
            if db is None:
                return found
            try:
                for at in range(0, len(asked), _BATCH):
                    part = asked[at : at + _BATCH]
                    rows.extend(
                        db.execute(
                            # a blob whatever was stored: text that is not UTF-8 would
                            # fail the whole query, not just its entry
                            "SELECT key, digest, CAST(data AS BLOB) FROM entries WHERE key IN"
                            f" ({','.join('?' * len(part))})",
                            part,
                        )
                    )
            except sqlite3.Error:
                self.broken = True
                return found
        for entry, digest, data in rows:
            if isinstance(entry, str) and isinstance(data, bytes) and digest == _digest(data):
                found[entry] = data
        return found

    def write(self, entry: str, data: bytes) -> None:
        with self.lock:
            if not self.pending:
                atexit.register(self.flush)
            self.pending[entry] = data

    def flush(self) -> None:
        """Write the pending entries in one transaction (at exit; or now, for tests)."""
        with self.lock:
            pending, self.pending = self.pending, {}
            db = self.connect() if pending else None
            if db is None:
                return
            try:
                with db:
                    db.executemany(
                        "INSERT OR REPLACE INTO entries VALUES (?, ?, ?)",
                        [(k, _digest(v), v) for k, v in pending.items()],
                    )
            except sqlite3.Error:
                self.broken = True

    def close(self) -> None:
        with self.lock:
            if self.db is not None:
                self.db.close()
            self.db, self.broken, self.pending = None, False, {}


def _digest(data: bytes) -> bytes:
    return blake2b(data, digest_size=16).digest()


_STORE = _Store()


def get(entry: str) -> Entry | None:
    """The (body, line) pairs stored under `entry`, or None (absent, unreadable or damaged)."""
    return get_many((entry,)).get(entry)


def get_many(entries: Iterable[str]) -> dict[str, Entry]:
    """What `get` gives for each of `entries`, in a few queries; absent, unreadable and damaged
    entries are left out."""
    found: dict[str, Entry] = {}
    for entry, raw in _STORE.read(list(entries)).items():
        data = _load(raw)
        if data is not None:
            found[entry] = data
    return found


def _load(raw: bytes) -> Entry | None:
    try:
        data = marshal.loads(raw)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(data, list) or not all(
        isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], dict) and type(x[1]) is int
        for x in data
    ):
        return None  # not what this module writes: read the text again
    return data


#: The parses this process made or read for the readers of directories and git trees, by key,
#: shared as they are: base and candidate share most files, and then the same bodies, which
#: `build_inventory` relies on (so they are never mutated). Bounded: `gate history` reads many
#: revisions.
_KNOWN: dict[str, Entry] = {}
_KNOWN_MAX = 100_000


def recall(entries: Iterable[str]) -> dict[str, Entry]:
    """The parses kept under `entries`: this process's first (shared, see `_KNOWN`), then the
    database's in a few queries (kept for the process too). Absent ones are left out."""
    found: dict[str, Entry] = {}
    asked: list[str] = []
    for entry in dict.fromkeys(entries):  # each once, in order
        known = _KNOWN.get(entry)
        if known is None:
            asked.append(entry)
        else:
            found[entry] = known
    for entry, known in get_many(asked).items():
        remember(entry, known)
        found[entry] = known
    return found


def remember(entry: str, objects: Entry) -> None:
    """Keep a parse for this process (`recall`); the database is `put`'s."""
    if len(_KNOWN) >= _KNOWN_MAX:
        _KNOWN.clear()
    _KNOWN[entry] = objects


def put(entry: str, objects: Entry) -> None:
    """Keep `objects` under `entry`, written at exit; a cache that cannot be written is no
    cache, not an error."""
    if _database() is None:
        return
    try:
        data = marshal.dumps(objects)
    except ValueError:
        return
    _STORE.write(entry, data)


def flush() -> None:
    """Write what `put` kept now rather than at exit."""
    _STORE.flush()


def reset() -> None:
    """Forget the open database, the settings read and the parses kept: what a new process
    sees (tests change the environment)."""
    _STORE.close()
    _database.cache_clear()
    _KNOWN.clear()
