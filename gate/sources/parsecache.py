"""Parsed manifests kept between runs, by content: a merge queue reads the same base every time.

Each entry is the checked objects of one text (bodies and lines), keyed by a hash of the text and
of the code that reads it (the loader, the YAML library, the shape checks), so a change to either
is a new key rather than a stale answer. Only texts that parsed cleanly are kept; an error is
found again, with its file and line, on every run. Entries are `marshal` data: plain dicts,
lists and scalars, nothing that runs code when read. The folder is safe to delete at any time;
`PRUNE_GATE_PARSE_CACHE=off` turns it off, and `PRUNE_GATE_CACHE` moves it with the binaries'.
"""

from __future__ import annotations

import hashlib
import marshal
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

#: Files whose code decides what a text parses to: a change to one is a new cache.
_READERS = (
    "sources/manifests.py",
    "sources/yamlevents.py",
    "sources/yamlread.py",
    "model/shapes.py",
)


@cache
def _folder() -> Path | None:
    setting = os.environ.get("PRUNE_GATE_PARSE_CACHE", "")
    if setting.lower() in ("off", "0", "false", "no"):
        return None
    if setting:
        base = Path(setting)
    else:
        cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = os.environ.get("PRUNE_GATE_CACHE") or Path(cache_home) / "prune-gate"
        base = Path(root) / "parsed"
    return base / _code_version()


def _code_version() -> str:
    h = hashlib.blake2b(yaml.__version__.encode(), digest_size=8)
    package = Path(__file__).resolve().parent.parent
    for name in _READERS:
        h.update((package / name).read_bytes())
    return h.hexdigest()


def key(text: str, only_objects: bool) -> str:
    """The cache key of `text` read with `only_objects` (directories skip non-manifests)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
    digest.update(b"1" if only_objects else b"0")
    return digest.hexdigest()


def blob_key(blob_id: str, only_objects: bool) -> str:
    """The cache key of a git blob: its id names its content, so it is read only on a miss."""
    return key(f"git blob {blob_id}", only_objects)


def get(entry: str) -> list[tuple[dict[str, Any], int]] | None:
    """The (body, line) pairs stored under `entry`, or None (absent, unreadable or damaged)."""
    folder = _folder()
    if folder is None:
        return None
    try:
        data = marshal.loads((folder / entry[:2] / entry).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(data, list) or not all(
        isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], dict) and type(x[1]) is int
        for x in data
    ):
        return None  # not what this module writes: read the text again
    return data


def put(entry: str, objects: list[tuple[dict[str, Any], int]]) -> None:
    """Store `objects` under `entry`; a cache that cannot be written is no cache, not an error."""
    folder = _folder()
    if folder is None:
        return
    path = folder / entry[:2] / entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{entry}.{os.getpid()}")
        tmp.write_bytes(marshal.dumps(objects))
        tmp.replace(path)
    except (OSError, ValueError):
        return
