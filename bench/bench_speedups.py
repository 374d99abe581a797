"""The process-level speed-ups of `gate.speed`, each measured with and without, in the same run.

`gate check` runs as a fresh process (what a CI step pays), on the bundled incident
(examples/incident) and on bench_check's rendered input (10,000 objects in 2,000 files a side),
with the parse cache off so each run reads and parses. Variants, interleaved run by run so a
change in the machine's load colours them all alike:

- `all`: the `gate` console script as installed (every speed-up on);
- `normal-exit`: the same command ended by Python's own exit instead of `quick_exit`;
- `gc-on`: the collector left on (`without_cyclic_gc` replaced by nothing before the check loads);
- `hashlib`: `hashlib` imported first, as the parse cache did before it took `_blake2`: the
  OpenSSL module that costs memory and start-up.

Printed per variant: the median wall time, the median CPU time (user + system: less swayed by
the machine's other work), the peak RSS of the process (its own `ru_maxrss`, read in an exit
handler), and the full collections (generation 2) the collector ran. The figures quoted in
`gate/speed.py` come from here.

Run: `python -m bench.bench_speedups [--files N] [--runs R]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_check import write_tree

REPO = Path(__file__).resolve().parents[1]
INCIDENT = REPO / "examples" / "incident"

#: Runs `gate ARGV[2:]` as variant ARGV[1]; writes its peak RSS and collections as JSON to the
#: file $BENCH_SPEEDUPS_OUT from an exit handler (the quick exit runs those too).
DRIVER = """
import atexit, gc, json, os, resource, sys
variant = sys.argv[1]
if variant == "hashlib":
    import hashlib
if variant == "gc-on":
    import gate.speed
    gate.speed.without_cyclic_gc = lambda f: f
def report():
    with open(os.environ["BENCH_SPEEDUPS_OUT"], "w") as out:
        json.dump({"rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   "full_collections": gc.get_stats()[2]["collections"],
                   "hashlib": "_hashlib" in sys.modules}, out)
atexit.register(report)
sys.argv = ["gate", *sys.argv[2:]]
from gate.cli import main, run
if variant == "normal-exit":
    main()  # standalone: ends in SystemExit, then Python's own exit
run()
"""

VARIANTS = ("all", "normal-exit", "gc-on", "hashlib")


def run_variant(variant: str, args: list[str], out: Path) -> tuple[float, float, dict[str, object]]:
    """One fresh process: its wall time, its CPU time (user + system: less swayed by what
    else the machine runs) and what it reported."""
    env = {**os.environ, "PRUNE_GATE_PARSE_CACHE": "off", "GITHUB_ACTIONS": ""}
    env["BENCH_SPEEDUPS_OUT"] = str(out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, variant, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # 0 pass, 1 blocked: anything else is a broken run
        sys.exit(f"{variant}: gate exited {done.returncode}: {done.stderr.decode()}")
    figures: dict[str, object] = json.loads(out.read_text())
    return seconds, cpu, figures


def measure(title: str, args: list[str], runs: int, scratch: Path) -> None:
    """Every variant `runs` times, interleaved; print one line per variant."""
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpus: dict[str, list[float]] = {v: [] for v in VARIANTS}
    last: dict[str, dict[str, object]] = {}
    for _ in range(runs):
        for variant in VARIANTS:
            seconds, cpu, last[variant] = run_variant(variant, args, scratch / "out.json")
            times[variant].append(seconds)
            cpus[variant].append(cpu)
    base = statistics.median(times["all"])
    base_cpu = statistics.median(cpus["all"])
    print(f"{title} (median of {runs}):")
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        cpu = statistics.median(cpus[variant])
        figures = last[variant]
        rss = int(str(figures["rss_kib"])) / 1024
        print(
            f"  {variant:<12} {median:6.3f} s ({median - base:+.3f} s)"
            f"  CPU {cpu:6.3f} s ({cpu - base_cpu:+.3f} s)  peak RSS {rss:5.1f} MiB"
            f"  full collections {figures['full_collections']}"
            f"  OpenSSL loaded {'yes' if figures['hashlib'] else 'no'}",
            flush=True,
        )


def import_microseconds(module: str, runs: int) -> int:
    """Median cumulative import time of `module` in a fresh interpreter (`-X importtime`)."""
    times = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            check=True,
        )
        # "import time: self [us] | cumulative | imported package": the last line is `module`
        last = done.stderr.strip().splitlines()[-1]
        times.append(int(last.split("|")[1]))
    return int(statistics.median(times))


def main() -> None:
    """Measure on the incident, then on the generated input."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    check = ["check", "--context", "speculative", "-o", "json"]
    blake2, hashlib = (import_microseconds(m, args.runs) for m in ("_blake2", "hashlib"))
    print(
        f"import _blake2: {blake2 / 1000:.1f} ms, import hashlib (OpenSSL): {hashlib / 1000:.1f} ms"
        f" (median of {args.runs}, -X importtime)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="prune-gate-speedups-") as tmp:
        root = Path(tmp)
        incident = [*check, "--base-manifests", str(INCIDENT / "base")]
        incident += ["--head-manifests", str(INCIDENT / "candidate")]
        measure("gate check, the incident (5 objects)", incident, args.runs, root)
        removed = set(range(0, args.files, max(1, args.files // 10)))
        write_tree(root / "base", args.files, args.per_file, set())
        write_tree(root / "head", args.files, args.per_file, removed)
        generated = [*check, "--base-manifests", str(root / "base")]
        generated += ["--head-manifests", str(root / "head")]
        objects = args.files * args.per_file
        title = f"gate check, {objects:,} objects in {args.files:,} files a side"
        measure(title, generated, args.runs, root)


if __name__ == "__main__":
    main()
