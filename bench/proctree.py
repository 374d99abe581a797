"""The processes under a process, read from /proc: what a command holds is all of them."""

from __future__ import annotations

import os
from pathlib import Path


def process_tree(root: int) -> list[int]:
    """`root` and every descendant, from the parent ids in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # it ended while read
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out
