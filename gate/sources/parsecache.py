"""Parsed manifests kept between runs, by content: a merge queue reads the same base every time.

Each entry is the checked objects of one text (bodies and lines), keyed by a hash of the text and
of the code that reads it (the loader, the YAML library, the shape checks), so a change to either
is a new key rather than a stale answer. Only texts that parsed cleanly are kept; an error is
found again, with its file and line, on every run. Entries are `marshal` data: plain dicts,
lists and scalars, nothing that runs code when read, each with its digest, so a damaged entry is
read from its text again. They live in a `CacheStore` (`gate.sources.cachestore`: one SQLite
file per code version, bounded, written in one transaction when the process exits, shared
safely by concurrent runs). A directory or a git tree asks for all its entries in a few queries
(`get_many`), not one per file. The folder is safe to delete at any time;
`PRUNE_GATE_PARSE_CACHE=off` turns it off, a path moves it, and `PRUNE_GATE_CACHE` moves it with
the binaries'.
"""

from __future__ import annotations

import marshal
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gate.sources import cachestore, yamlevents
from gate.sources.cachestore import CacheStore
from gate.speed import blake2b  # not hashlib's: gate.speed says why

#: Files whose code decides what a text parses to: a change to one is a new cache.
_READERS = (
    "sources/manifests.py",
    "sources/yamlevents.py",
    "sources/yamlread.py",
    "model/shapes.py",
)

Entry = list[tuple[dict[str, Any], int]]

#: The variable that turns the cache off or moves it.
ENV = "PRUNE_GATE_PARSE_CACHE"


def _code_version() -> str:
    h = blake2b(yaml.__version__.encode(), digest_size=8)
    h.update(f"store {cachestore.FORMAT}".encode())  # never a file of another layout
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


_MADE: list[CacheStore] = []
_MAKING = threading.Lock()


def _store() -> CacheStore:
    """The parse cache's store, made on first use: its version reads the readers' files,
    which a run with the cache off never does."""
    if not _MADE:
        with _MAKING:
            if not _MADE:
                version = "off" if cachestore.turned_off(ENV) else _code_version()
                _MADE.append(CacheStore("parsed", version, env=ENV))
    return _MADE[0]


def __getattr__(name: str) -> Any:
    """`_STORE`: the store (`_store`), for the benchmarks that count its reads."""
    if name == "_STORE":
        return _store()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(entry: str) -> Entry | None:
    """The (body, line) pairs stored under `entry`, or None (absent, unreadable or damaged)."""
    return get_many((entry,)).get(entry)


def get_many(entries: Iterable[str]) -> dict[str, Entry]:
    """What `get` gives for each of `entries`, in a few queries; absent, unreadable and damaged
    entries are left out."""
    found: dict[str, Entry] = {}
    for entry, raw in _store().read(list(entries)).items():
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
    store = _store()
    if not store.enabled:
        return
    try:
        data = marshal.dumps(objects)
    except ValueError:
        return
    store.write(entry, data)


def flush() -> None:
    """Write what `put` kept now rather than at exit."""
    _store().flush()


def reset() -> None:
    """Forget the open database, the settings read and the parses kept: what a new process
    sees (tests change the environment)."""
    with _MAKING:
        for store in _MADE:
            store.reset()
        _MADE.clear()
    _KNOWN.clear()
