"""`gate` start-up: what a command pays before it does anything, paid again on every CI step.

Wall time of fresh `gate` processes (the console script beside this interpreter, else
`python -m gate`), every command `--runs` times, interleaved run by run so a change in the
machine's load colours them all alike; printed as the best run, the median, and the median CPU
time (user + system: less swayed by the machine's other work). Two floors no change to gate
can remove are timed beside them: `python -c pass` (the interpreter and its site) and `python -c
'import click'` (what any click command line pays before its first line runs).

Then what the imports cost, from `-X importtime` (each process `--import-runs` times, the
median per module): `gate check --help` is what loading the check command costs, and a check
of the bundled incident (examples/incident, 5 objects: the work itself is a few milliseconds)
adds what the run imports where it needs it (the application, the rules, the YAML readers, the
report format). Printed per process: the modules imported, their total, the share by package
(self times summed), and the top modules by cumulative time (a module's own time plus what it
imported first); then what the check's run imported that loading the command did not.

Bytecode is as an install has it (pip compiles a wheel's; the image's is compiled at build):
written by a first, untimed round into a directory of its own (PYTHONPYCACHEPREFIX), not the
checkout. `--source` runs with PYTHONDONTWRITEBYTECODE=1 instead, as this project's machines
set it: each process compiles the modules of gate it imports (unless a __pycache__ has them).

`-X importtime` adds its own overhead and times a loaded machine too: read its figures as
shares, and the wall times above as what a user waits.

Run: `python -m bench.bench_startup [--runs N] [--import-runs N] [--top N] [--source]`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INCIDENT = REPO / "examples" / "incident"

#: The incident check: a real run whose work is negligible beside its start.
CHECK = [
    *("check", "--context", "speculative", "-o", "json"),
    *("--base-manifests", str(INCIDENT / "base"), "--head-manifests", str(INCIDENT / "candidate")),
]

#: The floors: title, the code `python -c` runs.
FLOORS = (("python -c pass", "pass"), ("python -c 'import click'", "import click"))

#: What is timed after the floors, in the order printed: title, arguments to `gate`.
COMMANDS = (
    ("gate --version", ["--version"]),
    ("gate --help", ["--help"]),
    ("gate codes", ["codes"]),
    ("gate check --help", ["check", "--help"]),
    ("gate check (incident)", CHECK),
)


def gate_argv() -> list[str]:
    """How to start `gate`: the console script beside this interpreter (what CI runs), else
    `python -m gate` (which adds runpy, a few milliseconds)."""
    script = Path(sys.executable).parent / "gate"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gate"]


def environment(pycache: Path | None) -> dict[str, str]:
    """This environment without GitHub's (a check would read its event) and with the parse
    cache off, so every run does the same work; bytecode as an install has it (pip compiles a
    wheel's), kept in `pycache`, out of the checkout; None: none for gate (--source)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PRUNE_GATE_PARSE_CACHE"] = "off"
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One fresh process: its wall time and its CPU time (user + system), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 0 pass, 1 blocked (the incident): else a broken run
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def wall_times(runs: int, env: dict[str, str]) -> None:
    """Every command `runs` times, interleaved; one line per command."""
    gate = gate_argv()
    walls: dict[str, list[float]] = defaultdict(list)
    cpus: dict[str, list[float]] = defaultdict(list)
    argvs = [(title, [sys.executable, "-c", code]) for title, code in FLOORS]
    argvs += [(title, [*gate, *args]) for title, args in COMMANDS]
    for run in range(runs + 1):  # the first round only warms (and writes the bytecode)
        for title, argv in argvs:
            wall, cpu = timed(argv, env)
            if not run:
                continue
            walls[title].append(wall)
            cpus[title].append(cpu)
    source = "PYTHONPYCACHEPREFIX" not in env
    code = "gate compiled from source each run (--source)" if source else "bytecode"
    print(f"wall time, {runs} runs each ({' '.join(gate)}, {code}):")
    for title, _ in argvs:
        best, median = min(walls[title]) * 1000, statistics.median(walls[title]) * 1000
        cpu = statistics.median(cpus[title]) * 1000
        print(f"  {title:<25} best {best:6.1f} ms  median {median:6.1f} ms  CPU {cpu:6.1f} ms")
    print(flush=True)


@dataclass(frozen=True)
class Import:
    """One line of `-X importtime`: a module, its own time and its cumulative time (us)."""

    name: str
    level: int
    self_us: int
    cumulative_us: int


def parse_importtime(stderr: str) -> list[Import]:
    """The imports `-X importtime` printed, in the order they finished."""
    found = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        own, cumulative, name = line.removeprefix("import time:").split("|", 2)
        indent = len(name) - len(name.lstrip(" "))
        found.append(Import(name.strip(), (indent - 1) // 2, int(own), int(cumulative)))
    return found


def importtime(args: list[str], env: dict[str, str]) -> list[Import]:
    """The imports of one `gate ARGS` process run under `-X importtime`."""
    script = gate_argv()
    script = script[1:] if script[0] == sys.executable else script  # [-m, gate] or [SCRIPT]
    argv = [sys.executable, "-X", "importtime", *script, *args]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr}")
    return parse_importtime(done.stderr)


def package(name: str) -> str:
    """The share a module counts in: gate's second level (gate.engine), else its top package,
    the standard library as one."""
    parts = name.split(".")
    if parts[0] == "gate":
        return ".".join(parts[:2])
    return "stdlib" if parts[0].lstrip("_") in _STDLIB else parts[0]


_STDLIB = {name.lstrip("_") for name in sys.stdlib_module_names} | {"encodings", "sitecustomize"}


def summarize(
    title: str, args: list[str], runs: int, top: int, env: dict[str, str]
) -> dict[str, float]:
    """`gate ARGS` under `-X importtime`, `runs` times: median per module, printed; returned
    as each module's median own time (us)."""
    samples = [importtime(args, env) for _ in range(runs)]
    own: dict[str, list[int]] = defaultdict(list)
    cumulative: dict[str, list[int]] = defaultdict(list)
    totals = []
    for sample in samples:
        totals.append(sum(i.cumulative_us for i in sample if i.level == 0))
        for i in sample:
            own[i.name].append(i.self_us)
            cumulative[i.name].append(i.cumulative_us)
    self_us = {name: statistics.median(times) for name, times in own.items()}
    cumulative_us = {name: statistics.median(times) for name, times in cumulative.items()}
    gate_modules = sum(1 for name in self_us if name.split(".")[0] == "gate")
    print(
        f"{title}: {len(self_us)} modules imported ({gate_modules} of gate), "
        f"{statistics.median(totals) / 1000:.1f} ms median, {min(totals) / 1000:.1f} ms best "
        f"(-X importtime, {runs} runs)"
    )
    shares: dict[str, float] = defaultdict(float)
    for name, us in self_us.items():
        shares[package(name)] += us
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    print("  by package: " + ", ".join(f"{p} {us / 1000:.1f} ms" for p, us in ranked[:8]))
    if top:
        print(f"  top {top} by cumulative time (ms, self / cumulative):")
    for name in sorted(cumulative_us, key=lambda n: -cumulative_us[n])[:top]:
        print(f"    {self_us[name] / 1000:6.1f} {cumulative_us[name] / 1000:7.1f}  {name}")
    print(flush=True)
    return self_us


def main() -> None:
    """Time the commands, then break down the check's imports."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="runs per command, wall time")
    parser.add_argument("--import-runs", type=int, default=7, help="runs per -X importtime")
    parser.add_argument("--top", type=int, default=15, help="modules listed per process")
    parser.add_argument(
        "--source",
        action="store_true",
        help="no bytecode written or read for gate (PYTHONDONTWRITEBYTECODE=1, as in a checkout "
        "run that way): each process compiles gate's modules it imports",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prune-gate-startup-") as tmp:
        env = environment(None if args.source else Path(tmp))
        wall_times(args.runs, env)
        summarize("gate --help", ["--help"], args.import_runs, args.top, env)
        loading = "gate check --help (loading the check)"
        loaded = summarize(loading, ["check", "--help"], args.import_runs, 0, env)
        ran = summarize("gate check (incident)", CHECK, args.import_runs, args.top, env)
    added = {name: us for name, us in ran.items() if name not in loaded}
    ours = sum(1 for name in added if name.split(".")[0] == "gate")
    print(
        f"imported by the check's run, not by loading the command: {len(added)} modules "
        f"({ours} of gate), {sum(added.values()) / 1000:.1f} ms of their own time"
    )


if __name__ == "__main__":
    main()
