"""`gate check` against the shell pipeline a user writes instead, on the same input in the same run.

The input: 10,000 objects in 2,000 files (a claim, a Deployment mounting it, a Service, a
ConfigMap and a PodDisruptionBudget per file), base and a candidate that drops ten claims from
files that stay. Every command is a fresh process (what CI pays), timed whole (memory: below).
prune-gate runs cold (an empty parse cache) and warm (the cache of an earlier run, as
on a CI runner that keeps ~/.cache), and cold again with its native YAML reader turned off
(`py-cold`: what an install without native/ gets); the alternative is mikefarah's yq v4 (built
from its Go module, tools/yq) extracting claim identities from both sides, then `comm -23`: it
finds the same ten claims and nothing else (no consumers, retirement, moves or prune scopes). For
kustomize input, `kubectl kustomize` + yq against `gate check --render kustomize`, at a tenth of
the files: a kustomize build grows faster than its input (at 2,000 files `kubectl kustomize` alone
takes minutes, and prune-gate's build no less), so the full size measures kustomize, not the gate.
The `paths` row is a Flux-style repository instead: each app file in a kustomization of its own
with a patch, a fortieth of the files, each path built at each revision (`--path` per app);
the pipeline runs `kubectl kustomize` per path.
Each row is run again at a tenth of its size to show how the cost grows. For scale, floors that
any gate written in Python pays before deciding anything are timed on the rendered input too:
the interpreter, `gate check --help` (the check's imports), and a script that reads and parses
both sides with the native reader and does nothing else.

Memory is read from /proc, every few milliseconds, in one further untimed run of each command:
`rss`, the peak RSS (VmHWM) of its largest single process, and `tree`, the largest sum of the PSS
of all its processes at once (shared pages split between them). A pipeline is several processes,
and its two `ids` run side by side with a yq each, so `tree` is the figure that compares like with
like. (wait4's peak RSS is not used: a child spawned by vfork, as subprocess spawns, reports at
least the RSS of the process that spawned it, this benchmark's.) Sampling can miss a short peak.

Run: `python -m bench.bench_check [--files N] [--runs R]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.proctree import process_tree

REPO = Path(__file__).resolve().parents[1]
BUILD_BINARIES = REPO / "scripts" / "build-binaries"
_DOCS = (
    """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-{i}
  namespace: ns-{ns}
  labels: {{app: app-{i}}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
""",
    """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i}
  namespace: ns-{ns}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: app-{i}}}}}
  template:
    metadata: {{labels: {{app: app-{i}}}}}
    spec:
      containers: [{{name: app, image: "nginx:1.27", ports: [{{containerPort: 80}}]}}]
      volumes: [{{name: data, persistentVolumeClaim: {{claimName: data-{i}}}}}]
""",
    """\
apiVersion: v1
kind: Service
metadata: {{name: app-{i}, namespace: ns-{ns}}}
spec: {{selector: {{app: app-{i}}}, ports: [{{port: 80}}]}}
""",
    """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: app-{i}-config, namespace: ns-{ns}}}
data: {{LOG_LEVEL: info, REPLICAS: "1"}}
""",
    """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: app-{i}, namespace: ns-{ns}}}
spec: {{maxUnavailable: 1, selector: {{matchLabels: {{app: app-{i}}}}}}}
""",
)


def app_file(i: int, per_file: int, drop_claim: bool = False) -> str:
    docs = [_DOCS[j % len(_DOCS)].format(i=i, ns=i % 50) for j in range(per_file)]
    if per_file > len(_DOCS):  # extra objects: more config maps with unique names
        docs = docs[: len(_DOCS)] + [
            _DOCS[3].format(i=f"{i}-{k}", ns=i % 50) for k in range(per_file - len(_DOCS))
        ]
    if drop_claim:
        docs = docs[1:]
    return "---\n".join(docs)


def write_tree(root: Path, files: int, per_file: int, removed: set[int]) -> None:
    for i in range(files):
        path = root / f"apps/team-{i % 20}/app-{i}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(app_file(i, per_file, drop_claim=i in removed))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


#: A strategic merge patch of each app's Deployment, as Flux repositories patch their releases:
#: kustomize then reads its OpenAPI schema, as most builds of a real repository do.
APP_PATCH = """\
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: _}
      spec:
        template:
          spec:
            containers:
              - {name: app, image: "nginx:1.28"}
    target: {kind: Deployment}
"""


def commit_sides(repo: Path, sides: tuple[Path, Path], layout: str = "files") -> None:
    """A repository whose HEAD~1 holds the first side's apps/ and HEAD the second's, packed as
    a clone is (loose objects cost git several times the CPU per blob read, gate and
    `git archive` alike). `layout`: the files as they are, one kustomization of them all
    (`kustomization`), or each file in a kustomization of its own with a patch (`paths`)."""
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    for side in sides:
        shutil.rmtree(repo / "apps", ignore_errors=True)
        shutil.copytree(side / "apps", repo / "apps")
        if layout == "paths":
            for file in sorted((repo / "apps").rglob("*.yaml")):
                app = repo / "apps" / file.stem
                app.mkdir()
                file.rename(app / "app.yaml")
                (app / "kustomization.yaml").write_text("resources: [app.yaml]\n" + APP_PATCH)
            for team in (repo / "apps").glob("team-*"):
                team.rmdir()
        if layout == "kustomization":
            files = sorted(p.relative_to(repo / "apps") for p in (repo / "apps").rglob("*.yaml"))
            resources = "".join(f"  - {f}\n" for f in files)
            (repo / "apps/kustomization.yaml").write_text(
                f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                f"resources:\n{resources}"
            )
        git(repo, "add", "-A")
        author = ("-c", "user.name=b", "-c", "user.email=b@example.invalid")
        git(repo, *author, "commit", "-qm", side.name)
    git(repo, "repack", "-adq")


def make_inputs(root: Path, files: int, per_file: int) -> tuple[Path, Path, Path, Path]:
    """Rendered base and head directories, a repository with the same two trees, and one whose
    apps/ is a kustomization of them."""
    removed = set(range(0, files, max(1, files // 10)))  # 10 claims leave files that stay
    base, head = root / "base", root / "head"
    write_tree(base, files, per_file, set())
    write_tree(head, files, per_file, removed)
    commit_sides(root / "repo", (base, head))
    commit_sides(root / "krepo", (base, head), "kustomization")
    return base, head, root / "repo", root / "krepo"


# The pipeline a user writes instead: claim identities from both sides, those only base has.
YQ_IDS = (
    'select(.kind == "PersistentVolumeClaim") | '
    '(.metadata.namespace // "default") + "/" + .metadata.name'
)
PIPELINE_FUNCTIONS = """
set -euo pipefail
ids() { find "$1" -name '*.yaml' -print0 | xargs -0 yq e -N "$YQ_IDS" | sort; }
kids() { kubectl kustomize "$1" | yq e -N "$YQ_IDS" - | sort; }
pids() { for d in "$1"/apps/*/; do kubectl kustomize "$d"; echo ---; done |
    yq e -N "$YQ_IDS" - | sort; }
checkout() { mkdir "$2"; git archive "$1" apps | tar -x -C "$2"; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"""
PIPELINES = {
    "rendered": 'comm -23 <(ids "$BASE") <(ids "$HEAD")',
    "git": (
        'checkout HEAD~1 "$tmp/b"; checkout HEAD "$tmp/h"; comm -23 <(ids "$tmp/b") <(ids "$tmp/h")'
    ),
    "kustomize": (
        'checkout HEAD~1 "$tmp/b"; checkout HEAD "$tmp/h"; '
        'comm -23 <(kids "$tmp/b/apps") <(kids "$tmp/h/apps")'
    ),
    "paths": (
        'checkout HEAD~1 "$tmp/b"; checkout HEAD "$tmp/h"; '
        'comm -23 <(pids "$tmp/b") <(pids "$tmp/h")'
    ),
}


#: The least any Python gate pays before it decides anything: the interpreter, and reading both
#: sides' files and parsing them with the native reader, plain scalars left as strings, nothing
#: kept (a floor: gate does all this and more).
FLOOR_READ_AND_PARSE = """
import os, sys
import prune_gate_yaml
for root in sys.argv[1:]:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                prune_gate_yaml.load_documents(f.read().decode(), 100, str, None, "", False)
"""


@dataclass
class Run:
    """One command's median wall time, the peak RSS of its largest process and the peak PSS of
    all its processes together (both in MiB, sampled), and its last output."""

    seconds: float
    rss_mib: float
    tree_mib: float
    stdout: str


def run_once(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, str, str]:
    """Wall seconds, exit code, stdout and stderr of one fresh process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, _ = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (
            seconds,
            proc.returncode,
            out.read().decode(),
            err.read().decode(),
        )


def _field(path: str, name: bytes) -> int:
    """A `Name:   N kB` field of a /proc file, in bytes (0 when the process is gone)."""
    try:
        data = Path(path).read_bytes()
        return int(data.split(b"\n" + name + b":", 1)[1].split()[0]) * 1024
    except (OSError, IndexError, ValueError):  # ended, or a zombie: nothing mapped
        return 0


def tree_memory(root: int) -> tuple[int, int]:
    """Process `root` and every process under it now: the sum of their PSS, and the largest
    peak RSS (VmHWM) among them, in bytes."""
    pss = hwm = 0
    for pid in process_tree(root):
        pss += _field(f"/proc/{pid}/smaps_rollup", b"Pss")
        hwm = max(hwm, _field(f"/proc/{pid}/status", b"VmHWM"))
    return pss, hwm


def peak_memory(cmd: list[str], cwd: Path, env: dict[str, str], expect: int) -> tuple[float, float]:
    """One more run of `cmd`, its processes read every few milliseconds: the peak RSS of the
    largest and the largest sum of their PSS, in MiB. Not timed (sampling takes CPU)."""
    largest = together = 0
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=out)
        while proc.poll() is None:
            pss, hwm = tree_memory(proc.pid)
            largest, together = max(largest, hwm), max(together, pss)
            time.sleep(0.002)
        if proc.returncode != expect:
            out.seek(0)
            raise SystemExit(f"{' '.join(cmd[:3])}: exit {proc.returncode}\n{out.read().decode()}")
    return largest / 2**20, together / 2**20


def measure(
    cmd: list[str],
    cwd: Path,
    env: dict[str, str],
    runs: int,
    expect: int,
    fresh_cache: bool = False,
) -> Run:
    """Median of `runs`; with fresh_cache each run starts from an empty parse cache."""
    times, rss, tree, stdout = [], 0.0, 0.0, ""
    for run in range(runs + 1):  # the last run samples memory, untimed
        run_env = dict(env)
        if fresh_cache:
            run_env["PRUNE_GATE_PARSE_CACHE"] = tempfile.mkdtemp(prefix="prune-gate-cold-")
        if run == runs:
            rss, tree = peak_memory(cmd, cwd, run_env, expect)
        else:
            seconds, code, stdout, stderr = run_once(cmd, cwd, run_env)
            if code != expect:
                raise SystemExit(f"{' '.join(cmd[:3])}: exit {code}, expected {expect}\n{stderr}")
            times.append(seconds)
        if fresh_cache:
            shutil.rmtree(run_env["PRUNE_GATE_PARSE_CACHE"])
    return Run(statistics.median(times), rss, tree, stdout)


def binary(name: str) -> str:
    """A pinned binary's path from scripts/build-binaries, built on first use."""
    out = subprocess.run(
        [str(BUILD_BINARIES), "path", name], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def blocked_claims(report: str) -> list[str]:
    """The claims a JSON report blocks, as namespace/name, sorted."""
    found = json.loads(report)["findings"]
    return sorted(
        {
            f"{f['object']['namespace']}/{f['object']['name']}"
            for f in found
            if f["object"]["kind"] == "PersistentVolumeClaim" and f["severity"] == "block"
        }
    )


def bench(files: int, per_file: int, runs: int, modes: tuple[str, ...]) -> dict[str, Run]:
    """Each mode's commands on one input; checks each finds the same claims."""
    gate = shutil.which("gate") or sys.exit("gate is not on PATH: run `pip install -e .` first")
    tools = [binary(n) for n in ("yq", "kubectl", "prune-gate-kustomize")]
    path = os.pathsep.join([*(str(Path(t).parent) for t in tools), os.environ["PATH"]])
    with tempfile.TemporaryDirectory(prefix="prune-gate-bench-") as tmp:
        base, head, repo, krepo = make_inputs(Path(tmp), files, per_file)
        prepo = Path(tmp) / "prepo"
        if "paths" in modes:
            commit_sides(prepo, (base, head), "paths")
        cache = Path(tmp) / "cache"
        env = {
            **os.environ,
            "PATH": path,
            "PRUNE_GATE_PARSE_CACHE": str(cache),
            "BASE": str(base),
            "HEAD": str(head),
            "YQ_IDS": YQ_IDS,
            "GITHUB_ACTIONS": "",
        }
        check = [gate, "check", "--context", "speculative", "-o", "json"]
        gate_cmds = {
            "rendered": (
                [*check, "--base-manifests", str(base), "--head-manifests", str(head)],
                repo,
            ),
            "git": ([*check, "--base", "HEAD~1", "--head", "HEAD"], repo),
            "kustomize": (
                [
                    *check,
                    "--base",
                    "HEAD~1",
                    "--head",
                    "HEAD",
                    "--path",
                    "apps",
                    "--render",
                    "kustomize",
                ],
                krepo,
            ),
            "paths": (
                [
                    *check,
                    *("--base", "HEAD~1", "--head", "HEAD", "--render", "kustomize"),
                    *(arg for i in range(files) for arg in ("--path", f"apps/app-{i}")),
                ],
                prepo,
            ),
        }
        results: dict[str, Run] = {}
        for mode in modes:
            cmd, cwd = gate_cmds[mode]
            results[f"{mode} cold"] = measure(cmd, cwd, env, runs, expect=1, fresh_cache=True)
            measure(cmd, cwd, env, 1, expect=1)  # fill the cache
            results[f"{mode} warm"] = measure(cmd, cwd, env, runs, expect=1)
            python_env = {**env, "PRUNE_GATE_NATIVE_YAML": "off"}
            results[f"{mode} py-cold"] = measure(
                cmd, cwd, python_env, runs, expect=1, fresh_cache=True
            )
            script = PIPELINE_FUNCTIONS + PIPELINES[mode]
            results[f"{mode} yq"] = measure(["bash", "-c", script], cwd, env, runs, expect=0)
            if mode == "rendered" and native_reader().startswith("native"):
                python = str(Path(gate).resolve().parent / "python")
                floors = {
                    "floor start": [python, "-c", "pass"],
                    "floor imports": [gate, "check", "--help"],
                    "floor read": [python, "-c", FLOOR_READ_AND_PARSE, str(base), str(head)],
                }
                for name, floor in floors.items():
                    results[name] = measure(floor, cwd, env, runs, expect=0)
            want = results[f"{mode} yq"].stdout.split()
            for variant in VARIANTS:
                got = blocked_claims(results[f"{mode} {variant}"].stdout)
                if got != want or len(want) != len(range(0, files, max(1, files // 10))):
                    raise SystemExit(f"{mode}: gate blocked {got}, the pipeline found {want}")
    return results


VARIANTS = ("cold", "warm", "py-cold")


def native_reader() -> str:
    """Which YAML reader the gate on PATH uses (README: how to build the native one)."""
    gate = shutil.which("gate") or "gate"
    python = Path(gate).resolve().parent / "python"
    code = "from gate.sources.yamlevents import READER_ID; print(READER_ID)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    plain, kustomize = ("rendered", "git"), ("kustomize", "paths")
    sizes = {
        "rendered": args.files,
        "git": args.files,
        "kustomize": args.files // 10,
        "paths": max(20, args.files // 40),
    }
    big = bench(args.files, args.per_file, args.runs, plain)
    big |= bench(sizes["kustomize"], args.per_file, args.runs, ("kustomize",))
    big |= bench(sizes["paths"], args.per_file, args.runs, ("paths",))
    small = bench(args.files // 10, args.per_file, args.runs, plain)
    small |= bench(sizes["kustomize"] // 10, args.per_file, args.runs, ("kustomize",))
    small |= bench(sizes["paths"] // 10, args.per_file, args.runs, ("paths",))
    print(f"gate check, whole process, median of {args.runs} runs")
    print(f"  YAML reader: {native_reader()} (py-cold: the Python one, PRUNE_GATE_NATIVE_YAML=off)")
    print(
        "  memory in MiB, sampled: rss, the peak RSS of the largest single process (the"
        " pipeline's: a yq or kubectl); tree, the peak PSS of all its processes together"
    )
    group = f"   {'time':>6} {'rss':>6} {'tree':>6}"
    print(f"  {'':<26}   {'prune-gate':<20}   {'pipeline':<20}   {'pipeline / gate':<20}")
    print(f"  {'mode':<10} {'objects':>7} {'variant':>7}{group * 3}   10x input")
    for mode in (*plain, *kustomize):
        yq = big[f"{mode} yq"]
        objects = sizes[mode] * args.per_file
        for variant in VARIANTS:
            g = big[f"{mode} {variant}"]
            grow = g.seconds / small[f"{mode} {variant}"].seconds
            print(
                f"  {mode:<10} {objects:>7,} {variant:>7}"
                f"   {g.seconds:5.2f}s {g.rss_mib:6.0f} {g.tree_mib:6.0f}"
                f"   {yq.seconds:5.2f}s {yq.rss_mib:6.0f} {yq.tree_mib:6.0f}"
                f"   {yq.seconds / g.seconds:5.2f}x {yq.rss_mib / g.rss_mib:5.2f}x"
                f" {yq.tree_mib / g.tree_mib:5.2f}x"
                f"   x{grow:.1f} (pipeline x{yq.seconds / small[f'{mode} yq'].seconds:.1f})"
            )
    print("  (pipeline / gate above 1: prune-gate is faster, or holds less)")
    floors = (
        ("python -c pass", "floor start"),
        ("`gate check --help` (the check's imports)", "floor imports"),
        ("read and parse both sides natively, nothing more", "floor read"),
    )
    print("  floors, rendered input (what a Python gate pays before it decides anything):")
    for label, name in floors:
        if name not in big:
            print(f"    {label:<50} (the native reader is not installed)")
            continue
        f = big[name]
        print(f"    {label:<50} {f.seconds:5.2f} s {f.rss_mib:5.0f} MiB rss {f.tree_mib:5.0f} tree")
    print(f"    a fifth of the pipeline's time, for scale: {big['rendered yq'].seconds / 5:.2f} s")


if __name__ == "__main__":
    main()
