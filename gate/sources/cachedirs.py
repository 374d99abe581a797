"""Where prune-gate keeps what it fetched or built between runs.

`PRUNE_GATE_CACHE` moves everything; else `$XDG_CACHE_HOME/prune-gate`, else
`~/.cache/prune-gate`. One place, so that every cache moves together (a CI job caches one folder).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The folder every cache of prune-gate lives under."""
    explicit = os.environ.get("PRUNE_GATE_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path("~/.cache").expanduser()) / "prune-gate"
