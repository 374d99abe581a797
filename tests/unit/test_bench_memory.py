"""bench_check's memory of a whole process tree: a pipeline's processes are counted together,
and its largest process is found among them.

The tree is held still while it is read (each process allocates, says so, then waits on its
stdin), so the reading is of a known state, not of a race.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.bench_check import tree_memory

MIB = 2**20

# Allocates ARGV[1] MiB (written, so the pages are resident), starts ARGV[2] copies of itself
# that allocate as much and start none, waits until each says it is ready, says so itself, and
# holds it all until its stdin closes.
_HOLDER = """
import subprocess, sys
held = b"x" * (int(sys.argv[1]) * 2**20)
kids = [
    subprocess.Popen([sys.executable, __file__, sys.argv[1], "0"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for _ in range(int(sys.argv[2]))
]
for kid in kids:
    assert kid.stdout.readline() == b"ready\\n"
print("ready", flush=True)
sys.stdin.read()
for kid in kids:
    kid.stdin.close()
    kid.wait()
"""


def _hold(script: Path, mib: int, children: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(script), str(mib), str(children)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def _release(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.wait() == 0
    proc.stdout.close()


def test_a_tree_counts_every_process_under_its_root(tmp_path: Path) -> None:
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    alone, tree = _hold(script, 40, 0), _hold(script, 40, 2)
    try:
        (one, one_peak), (three, three_peak) = tree_memory(alone.pid), tree_memory(tree.pid)
    finally:
        _release(alone)
        _release(tree)
    assert 40 * MIB <= one < 80 * MIB  # its 40 MiB and an interpreter
    assert three >= 3 * 40 * MIB  # the root's and both children's
    assert three > 2.5 * one
    # the largest process's peak: one holder's, not the sum
    assert 40 * MIB <= one_peak < 80 * MIB and 40 * MIB <= three_peak < 80 * MIB


def test_a_process_that_has_ended_counts_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert tree_memory(proc.pid) == (0, 0)
