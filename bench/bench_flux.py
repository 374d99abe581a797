"""The real workload: `gate check` and `gate history` with `--flux-root` on a pinned public Flux
repository, cold, cached and warm, against the script a user writes instead (issue 35: cost in
proportion to the change).

The repository is onedr0p/home-ops (519 objects a revision, 80 `prune-gate-kustomize` builds:
the entry point and each Flux Kustomization it reaches), at commits pinned below: ten consecutive
first-parent commits for `gate history`, and one merge-queue candidate (a commit and its parent)
for `gate check`. Its files are its own: the bench reads a clone given with `--repo` (else
`$PRUNE_GATE_BENCH_REPO`, else the project machine's mirror), never a copy inside this one. Every
gate run is a fresh process of the real CLI, timed whole (wall, and CPU of the process with its
helpers), in one of three cache states:

- `off`: every cache switched off (`PRUNE_GATE_PARSE_CACHE=off PRUNE_GATE_BUILD_CACHE=off`);
- `cold`: caches on, in an empty folder (`PRUNE_GATE_CACHE=<fresh folder>` moves every cache);
- `warm`: the folder an earlier run filled. For the merge queue that is the base checked already
  (its own check against its parent, as the queue checked it when it was the candidate), then
  the candidate's check; for the history, the same replay again.

Figures: a check's cold and warm times and the warm/cold ratio (target: at most 1/3; cold is the
faster of `off` and `cold`); the history's seconds per commit against one revision read cold
(target: at most 1/5). One revision is timed on its own in a fresh process with gate's
`read_revision` (what `gate doctor --rev` reads: the Flux build, without rules), since a check
builds its two sides at once on two threads and half its wall time is not one revision; half the
check is printed beside it. The naive alternative is what a user scripts: per revision,
`git archive | tar -x`, a scan of every YAML file for Flux Kustomizations (PyYAML, as yq would),
and `kubectl kustomize --load-restrictor LoadRestrictionsNone` of each distinct `spec.path`, one
after the other (no Flux patches, substitution, components, sources or rules: less work than the
gate does, so a floor; a path without a kustomization file, where Flux generates one, fails and
is counted). Then the size of each cache folder, and whether the verdicts agree: the JSON reports
(`-o json`) of the cached and uncached runs must be identical but for timing fields (`seconds`,
`secondsPerCommit`), else the bench names the difference and exits 1. A missed target is marked
(wall and CPU time each: on a shared machine wall time swings with the load) but fails nothing.

Run: `python -m bench.bench_flux [--repo PATH] [--commits N] [--runs R] [--naive-revisions N]`.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
BUILD_BINARIES = REPO / "scripts" / "build-binaries"

CLONE_URL = "https://github.com/onedr0p/home-ops"
#: Where the project's machine keeps a mirror of it (a bare git directory).
MIRROR = Path("/work/.mirror/onedr0p+home-ops/repo")
#: The history's end: the commit scripts/history-corpus pins for onedr0p too.
END = "d9078e4dd52174ad68a4408ca3398f731b2f889e"
#: The ten first-parent commits of `START..END`, oldest first (`gate history` replays each).
RANGE = (
    "98dd9976cfe580abc4ab916ad3cfd9730862b260",
    "847d1f01f1b016638cab28f0946c0d5422330c3b",
    "c7735b39225ed3e344411d578cb5742fb28ab8ab",
    "46b49140a0340f63f4819e4d56350330060f3300",
    "4ae7ccd90530f73638a095027863536bdd1a2ff9",
    "647041f7d17c715e7cc95d1a11dbf802062e5aae",
    "b5d6ce982b43ba0c7d5de20e75ad921aab9e25cf",
    "cbb6982b65e13960dd340be0f2b50ca99e24bcf4",
    "0f1b08657b0a73ad64a1cd0f3243c9e2f66cd76a",
    END,
)
START = "aba1444e43cb37802160e9495a0702e13d4cc127"
#: The merge queue's candidate, "feat(cleanrr): replace deduparr with cleanrr" (a Flux
#: Kustomization renamed: deduparr's objects go), on its base; the base's own parent is what the
#: base was checked against when it was the candidate.
CANDIDATE = "cbb6982b65e13960dd340be0f2b50ca99e24bcf4"
BASE = "b5d6ce982b43ba0c7d5de20e75ad921aab9e25cf"
BASE_PARENT = "647041f7d17c715e7cc95d1a11dbf802062e5aae"
#: The repository's Flux entry point, as scripts/history-corpus gives it (`--flux-root auto`
#: finds none: the repository installs Flux with helmfile, no FluxInstance or gotk-sync.yaml).
FLUX_ROOT = "kubernetes/flux/cluster"

#: The report fields that are times, not verdicts: left out of the comparison.
TIMING_KEYS = frozenset({"seconds", "secondsPerCommit"})
#: Every variable that moves or switches a cache: the bench sets them, the caller's are dropped.
CACHE_VARS = ("PRUNE_GATE_CACHE", "PRUNE_GATE_PARSE_CACHE", "PRUNE_GATE_BUILD_CACHE")
#: Targets of issue 35.
WARM_TARGET = 1 / 3
HISTORY_TARGET = 1 / 5

#: One revision read alone, in a fresh process: what `gate doctor --rev` reads, no rules.
ONE_REVISION = """
import sys
from gate.app.sides import GitReading, read_revision
objects = read_revision(GitReading(sys.argv[1], flux_roots=(sys.argv[3],)), sys.argv[2], ())
print(len(objects))
"""


# -- the pure parts (tests/unit/test_bench_flux.py) ------------------------------------------


def report_differences(a: Any, b: Any, where: str = "$", limit: int = 10) -> list[str]:
    """Where two JSON documents differ, ignoring the TIMING_KEYS of any object in them: up to
    `limit` lines `path: a != b` (empty when they agree)."""
    out: list[str] = []
    _differ(a, b, where, out, limit)
    return out


def _differ(a: Any, b: Any, where: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted((a.keys() | b.keys()) - TIMING_KEYS, key=str):
            if key not in a or key not in b:
                side = "second" if key in b else "first"
                out.append(f"{where}.{key}: only in the {side}")
            else:
                _differ(a[key], b[key], f"{where}.{key}", out, limit)
            if len(out) >= limit:
                return
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _differ(x, y, f"{where}[{i}]", out, limit)
        if len(a) != len(b) and len(out) < limit:
            out.append(f"{where}: {len(a)} items != {len(b)}")
    elif a != b or type(a) is not type(b):
        out.append(f"{where}: {_short(a)} != {_short(b)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _yaml_files(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.endswith((".yaml", ".yml")):
                yield Path(folder) / name


def flux_kustomization_paths(root: Path) -> list[str]:
    """The distinct `spec.path` of every Flux Kustomization in the YAML files under `root`, as
    paths relative to it (`./a/b/` is `a/b`), sorted: the scan a user's script does with yq. A
    file that is not YAML is skipped, as `yq` errors on it and the script goes on."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found: set[str] = set()
    for file in _yaml_files(root):
        try:
            docs = list(yaml.load_all(file.read_text(errors="replace"), Loader=loader))
        except yaml.YAMLError:
            continue
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "Kustomization":
                continue
            if not str(doc.get("apiVersion", "")).startswith("kustomize.toolkit.fluxcd.io/"):
                continue
            spec = doc.get("spec")
            path = spec.get("path") if isinstance(spec, dict) else None
            if isinstance(path, str) and path.strip():
                normal = posixpath.normpath(path.strip().lstrip("/"))
                found.add("" if normal == "." else normal)
    return sorted(found)


def cache_sizes(folder: Path) -> dict[str, int]:
    """Bytes on disk (as du counts them: allocated blocks, a hard link once) under each entry
    of `folder`; a file directly in it counts under its own name."""
    sizes: dict[str, int] = {}
    if not folder.is_dir():
        return sizes
    seen: set[tuple[int, int]] = set()
    for entry in sorted(folder.iterdir()):
        total = 0
        paths = [entry] if not entry.is_dir() else [entry, *entry.rglob("*")]
        for path in paths:
            st = path.lstat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        sizes[entry.name] = total
    return sizes


# -- running ----------------------------------------------------------------------------------


@dataclass
class Run:
    """One fresh process: wall and CPU seconds (CPU: its own and its waited-for children's,
    user + system), exit code, output."""

    wall: float
    cpu: float
    code: int
    stdout: str
    stderr: str


def run(cmd: list[str], env: Mapping[str, str], ok: tuple[int, ...] = (0,)) -> Run:
    """Run `cmd` once, timed; exit (naming the command) on an exit code not in `ok`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=dict(env), stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = Run(wall, usage.ru_utime + usage.ru_stime, code, out.read().decode(), "")
        done.stderr = err.read().decode(errors="replace")
    if code not in ok:
        raise SystemExit(f"{' '.join(cmd[:4])} ...: exit {code}\n{done.stderr[-3000:]}")
    return done


def median_run(runs: list[Run]) -> Run:
    """The run of median wall time (its CPU and output with it)."""
    ordered = sorted(runs, key=lambda r: r.wall)
    return ordered[(len(ordered) - 1) // 2]


class Bench:
    """The commands and cache folders of one bench run."""

    def __init__(self, repo: Path, tmp: Path, flux_root: str, gate: list[str]) -> None:
        self.repo, self.tmp, self.flux_root, self.gate = repo, tmp, flux_root, gate
        # the repository's charts are OCI releases, not rendered offline: no helm needed
        tools = [binary("prune-gate-kustomize"), binary("kubectl")]
        self.kubectl = tools[1]
        dirs = [str(Path(t).parent) for t in tools]
        base = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
        base["PATH"] = os.pathsep.join([*dirs, base.get("PATH", "")])
        base["GITHUB_ACTIONS"] = ""
        self.env = base
        self.folders: dict[str, Path] = {}
        self._count = 0

    def folder(self, name: str) -> Path:
        """A new, empty cache folder, remembered under `name` for the sizes."""
        self._count += 1
        path = self.tmp / f"{self._count:02d}-{name}"
        path.mkdir()
        self.folders[name] = path
        return path

    def env_for(self, state: str, folder: Path) -> dict[str, str]:
        """The environment of a run in cache state `off`, `cold` or `warm`, in `folder`."""
        env = {**self.env, "PRUNE_GATE_CACHE": str(folder)}
        if state == "off":
            env["PRUNE_GATE_PARSE_CACHE"] = "off"
            env["PRUNE_GATE_BUILD_CACHE"] = "off"
        return env

    def check(self, base: str, head: str) -> list[str]:
        return [
            *self.gate,
            "check",
            *("--repo", str(self.repo), "--base", base, "--head", head),
            *("--flux-root", self.flux_root, "--context", "speculative", "-o", "json"),
        ]

    def history(self, start: str, end: str) -> list[str]:
        return [
            *self.gate,
            "history",
            *("--repo", str(self.repo), "--range", f"{start}..{end}"),
            *("--flux-root", self.flux_root, "-o", "json"),
        ]

    def one_revision(self, rev: str) -> list[str]:
        # gate_command's `gate` is this interpreter's, or `python -m gate` with it
        return [sys.executable, "-c", ONE_REVISION, str(self.repo), rev, self.flux_root]


def binary(name: str) -> str:
    """A pinned binary's path from scripts/build-binaries, built on first use."""
    out = subprocess.run(
        [str(BUILD_BINARIES), "path", name], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


# -- the naive alternative --------------------------------------------------------------------


@dataclass
class Naive:
    """One revision the naive way: seconds for each phase, builds, failures, documents out."""

    export: float
    scan: float
    build: float
    cpu: float
    paths: int
    failed: list[str]
    documents: int

    @property
    def wall(self) -> float:
        return self.export + self.scan + self.build


def naive_revision(repo: Path, sha: str, kubectl: str, into: Path) -> Naive:
    """Export revision `sha` into `into`, find its Flux Kustomizations' paths, build each."""
    cpu0 = _cpu()
    start = time.perf_counter()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait():
        raise SystemExit(f"git archive {sha}: exit {archive.returncode}")
    exported = time.perf_counter()
    paths = flux_kustomization_paths(into)
    scanned = time.perf_counter()
    failed, documents = [], 0
    for path in paths:
        built = subprocess.run(
            [kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(into / path)],
            capture_output=True,
            text=True,
        )
        if built.returncode:
            failed.append(f"{path}: {built.stderr.strip().splitlines()[-1:]}")
        else:
            documents += sum(1 for line in built.stdout.splitlines() if line == "---") + 1
    end = time.perf_counter()
    shutil.rmtree(into)
    return Naive(
        exported - start, scanned - exported, end - scanned, _cpu() - cpu0, len(paths), failed,
        documents,
    )  # fmt: skip


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


# -- the bench --------------------------------------------------------------------------------


def find_repo(given: str | None) -> Path:
    """The clone to read: --repo, else $PRUNE_GATE_BENCH_REPO, else the mirror; else exit 2
    saying how to get one."""
    path = (
        given or os.environ.get("PRUNE_GATE_BENCH_REPO") or (str(MIRROR) if MIRROR.is_dir() else "")
    )
    if not path:
        print(
            "bench_flux needs a clone of onedr0p/home-ops with its commit "
            f"{END[:12]}:\n  git clone {CLONE_URL} /some/where\n"
            "then pass --repo /some/where (or set PRUNE_GATE_BENCH_REPO)",
            file=sys.stderr,
        )
        sys.exit(2)
    if subprocess.run(
        ["git", "-C", path, "rev-parse", "--git-dir"], capture_output=True
    ).returncode:
        print(f"{path} is not a git repository: git clone {CLONE_URL} {path}", file=sys.stderr)
        sys.exit(2)
    found = subprocess.run(
        ["git", "-C", path, "cat-file", "-e", f"{END}^{{commit}}"], capture_output=True
    )
    if found.returncode:
        print(
            f"{path} has no commit {END}: fetch it (git -C {path} fetch {CLONE_URL})",
            file=sys.stderr,
        )
        sys.exit(2)
    return Path(path).resolve()


def range_start(repo: Path, commits: int) -> tuple[str, list[str]]:
    """A and the first-parent commits of A..END, `commits` of them; the pinned ten checked."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--first-parent", f"-{commits + 1}", END],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if len(listed) != commits + 1:
        raise SystemExit(f"{END[:12]} has fewer than {commits} first-parent ancestors")
    replayed = listed[:-1][::-1]
    if commits == len(RANGE) and (tuple(replayed) != RANGE or listed[-1] != START):
        raise SystemExit(
            f"{repo}: the first-parent history before {END[:12]} is not the pinned one"
        )
    return listed[-1], replayed


def gate_command() -> list[str]:
    """The real CLI: the `gate` script beside this interpreter, else `python -m gate`."""
    beside = Path(sys.executable).parent / "gate"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "gate"]


def measure(
    bench: Bench, name: str, cmd: list[str], state: str, runs: int, prime: list[str] | None = None
) -> tuple[Run, Path]:
    """`runs` timed runs of `cmd` in cache state `state`, each in a fresh folder; `warm` runs
    `prime` (or `cmd`) untimed first in that folder. The median run, and the last folder."""
    done: list[Run] = []
    folder = bench.tmp
    for _ in range(runs):
        folder = bench.folder(name)
        if state == "warm":
            run(prime or cmd, bench.env_for("cold", folder), ok=(0, 1))
        done.append(run(cmd, bench.env_for(state, folder), ok=(0, 1)))
    return median_run(done), folder


def compare(label: str, reports: Mapping[str, str]) -> list[str]:
    """Each report against the first (`off`): the differences, labelled."""
    import json

    names = list(reports)
    first = json.loads(reports[names[0]])
    problems = []
    for name in names[1:]:
        for line in report_differences(first, json.loads(reports[name])):
            problems.append(f"{label} {names[0]} vs {name}: {line}")
    return problems


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def share(a: Run, b: Run, per: int = 1) -> str:
    """`a / b` (a divided by `per` first) in wall time, and in CPU time in brackets."""
    return f"{a.wall / per / b.wall:5.2f} ({a.cpu / per / b.cpu:.2f})"


def ratio(name: str, a: Run, b: Run, target: float, per: int = 1) -> str:
    """`a / b` as `share` gives it, with its target, met or MISSED in wall and in CPU time."""
    met = [
        "met" if x / per / y <= target else "MISSED" for x, y in ((a.wall, b.wall), (a.cpu, b.cpu))
    ]
    said = met[0] if met[0] == met[1] else f"{met[0]} in wall time, {met[1]} in CPU"
    return f"    {name:<52} {share(a, b, per)}  (target {target:.2f}: {said})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", help="a clone of onedr0p/home-ops (default: see above)")
    parser.add_argument("--commits", type=int, default=len(RANGE), help="history length")
    parser.add_argument("--runs", type=int, default=1, help="timed runs per figure (median)")
    parser.add_argument(
        "--naive-revisions",
        type=int,
        default=2,
        help="revisions the naive script is timed on (the candidate's pair first)",
    )
    parser.add_argument(
        "--flux-root", default=FLUX_ROOT, help=f"entry point (default {FLUX_ROOT}; or auto)"
    )
    args = parser.parse_args()
    repo = find_repo(args.repo)
    start, replayed = range_start(repo, args.commits)
    gate = gate_command()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="prune-gate-bench-flux-") as tmp:
        bench = Bench(repo, Path(tmp), args.flux_root, gate)
        print(f"repository {repo}, entry point {args.flux_root}", flush=True)
        cand = bench.check(BASE, CANDIDATE)
        prime = bench.check(BASE_PARENT, BASE)
        checks: dict[str, Run] = {}
        checks["off"], _ = measure(bench, "check-off", cand, "off", args.runs)
        checks["cold"], _ = measure(bench, "check-cold", cand, "cold", args.runs)
        checks["base"], _ = measure(bench, "check-base-cold", prime, "cold", args.runs)
        checks["warm"], _ = measure(bench, "check-warm", cand, "warm", args.runs, prime)
        checks["again"], _ = measure(bench, "check-again", cand, "warm", args.runs)
        one, _ = measure(bench, "one-revision-off", bench.one_revision(CANDIDATE), "off", args.runs)
        print("  checks done", flush=True)
        hist = bench.history(start, END)
        history: dict[str, Run] = {}
        history["off"], _ = measure(bench, "history-off", hist, "off", args.runs)
        history["cold"], _ = measure(bench, "history-cold", hist, "cold", args.runs)
        history["warm"], _ = measure(bench, "history-warm", hist, "warm", args.runs)
        print("  history done", flush=True)
        naive_revs = [BASE, CANDIDATE, *[c for c in replayed if c not in (BASE, CANDIDATE)]]
        naive = [
            naive_revision(repo, sha, bench.kubectl, Path(tmp) / f"naive-{i}")
            for i, sha in enumerate(naive_revs[: args.naive_revisions])
        ]
        sizes = {name: cache_sizes(folder) for name, folder in bench.folders.items()}
        problems += compare(
            "check", {k: checks[k].stdout for k in ("off", "cold", "warm", "again")}
        )
        problems += compare("history", {k: history[k].stdout for k in ("off", "cold", "warm")})
    print_figures(args, replayed, checks, one, history, naive, sizes)
    if problems:
        print("verdicts: cached and uncached reports DIFFER:")
        for line in problems:
            print(f"  {line}")
        return 1
    print(
        "verdicts: identical, cached and uncached"
        " (check: off, cold, warm, again; history: off, cold, warm)"
    )
    return 0


def timed(label: str, r: Run, extra: str = "") -> str:
    """`label  wall / cpu  extra`, one line of the table."""
    return f"    {label:<52} {r.wall:7.2f} / {r.cpu:6.2f}{extra}"


def print_figures(
    args: argparse.Namespace,
    replayed: list[str],
    checks: dict[str, Run],
    one: Run,
    history: dict[str, Run],
    naive: list[Naive],
    sizes: dict[str, dict[str, int]],
) -> None:
    """The table: times, ratios against their targets, cache sizes."""
    import json

    n = len(replayed)
    verdict = json.loads(checks["off"].stdout)["verdict"]
    replay = json.loads(history["off"].stdout)
    counts = ", ".join(
        f"{v} {k}" for k, v in replay["summary"].items() if k not in ("commits", *TIMING_KEYS)
    )
    objects = [c["objects"] for c in replay["commits"]]
    print(f"\nonedr0p/home-ops, whole processes, median of {args.runs}: wall s / CPU s")
    print("  (CPU: the process and the helpers it waited for, user + system)")
    print(f"  gate check --base {BASE[:10]} --head {CANDIDATE[:10]} (merge queue): {verdict}")
    for key, label in (
        ("off", "cold, every cache off"),
        ("cold", "cold, caches on in an empty folder"),
        ("base", "the base's check against its parent, empty folder"),
        ("warm", "warm: then the candidate's, same folder"),
        ("again", "the candidate's check again, same folder"),
    ):
        print(timed(label, checks[key]))
    print(
        timed(
            "one revision alone, caches off (read_revision)",
            one,
            f"   {one.stdout.strip()} objects",
        )
    )
    print(f"  gate history --range {replayed[0][:10]}^..{END[:10]} ({n} commits): {counts}")
    print(f"    objects per revision {min(objects)}-{max(objects)}")
    for key, label in (
        ("off", "every cache off"),
        ("cold", "caches on in an empty folder"),
        ("warm", "warm: the same replay again"),
    ):
        own = json.loads(history[key].stdout)["summary"]["secondsPerCommit"]
        per = history[key].wall / n
        print(timed(label, history[key], f"   {per:5.2f} s/commit ({own:.2f} in its report)"))
    wall = statistics.mean(x.wall for x in naive)
    phases = [statistics.mean(getattr(x, f) for x in naive) for f in ("export", "scan", "build")]
    print(
        f"  naive script per revision, mean of {len(naive)}: {wall:.2f} s wall,"
        f" {statistics.mean(x.cpu for x in naive):.2f} s CPU"
    )
    print(
        f"    git archive | tar {phases[0]:.2f} s, scan {phases[1]:.2f} s,"
        f" {naive[0].paths} paths built {phases[2]:.2f} s:"
        f" {naive[0].documents} documents, {len(naive[0].failed)} builds failed"
    )
    for line in naive[0].failed[:3]:
        print(f"      failed: {line}")
    per_rev = (wall, statistics.mean(x.cpu for x in naive))
    print("  ratios: wall (CPU)")
    cold = min(checks["off"], checks["cold"], key=lambda r: r.wall)
    print(
        ratio("check warm / cold (the faster of off and cold)", checks["warm"], cold, WARM_TARGET)
    )
    print(
        f"    warm / off {share(checks['warm'], checks['off'])}, warm / cold"
        f" {share(checks['warm'], checks['cold'])}, again / cold"
        f" {share(checks['again'], checks['cold'])}"
    )
    for key in ("off", "cold", "warm"):
        label = f"history {key}: per commit / one revision alone"
        print(ratio(label, history[key], one, HISTORY_TARGET, n))
    half = Run(checks["off"].wall / 2, checks["off"].cpu / 2, 0, "", "")
    print(
        f"    one revision as half the cold check instead ({half.wall:.2f} s):"
        f" history warm per commit / that {share(history['warm'], half, n)}"
    )
    naive2 = Run(2 * per_rev[0], 2 * per_rev[1], 0, "", "")
    naive1 = Run(*per_rev, 0, "", "")
    print(f"    check off / naive, two revisions          {share(checks['off'], naive2)}")
    print(f"    check warm / naive, two revisions         {share(checks['warm'], naive2)}")
    for key in ("off", "warm"):
        value = share(history[key], naive1, n)
        print(f"    history {key + ',':<5} per commit / naive per revision {value}")
    print("  cache folders after the runs, du")
    for name, entries in sizes.items():
        listed = ", ".join(f"{k} {mib(v)}" for k, v in entries.items()) or "empty"
        print(f"    {name:<20} {listed}")
    if not any("build" in k for entries in sizes.values() for k in entries):
        print("    (no build cache was written: PRUNE_GATE_BUILD_CACHE not there yet?)")


if __name__ == "__main__":
    sys.exit(main())
