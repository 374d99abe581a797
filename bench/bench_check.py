"""Time `gate check` end to end on 10,000 objects in 2,000 files, rendered and git mode.

Each run is the real console script in a fresh process (what CI pays). Compared in the same run,
on the same input, with what a hand-written bash gate does: `git diff --diff-filter=D` piped to
`grep -l 'kind: PersistentVolumeClaim'` (which sees only whole deleted files and knows nothing of
consumers, retirement, or objects removed from files that remain). A smaller input checks that
the cost grows linearly. Run: `python -m bench.bench_check [--files N] [--per-file M]`.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def make_inputs(root: Path, files: int, per_file: int) -> tuple[Path, Path, Path]:
    """Rendered base and head directories, and a git repository with the same two trees."""
    removed = set(range(0, files, max(1, files // 10)))  # 10 claims leave their files
    base, head, repo = root / "base", root / "head", root / "repo"
    write_tree(base, files, per_file, set())
    write_tree(head, files, per_file, removed)
    git(root, "init", "-q", "-b", "main", str(repo))
    for side in (base, head):
        for old in repo.glob("apps"):
            shutil.rmtree(old)
        shutil.copytree(side / "apps", repo / "apps")
        git(repo, "add", "-A")
        git(
            repo,
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.invalid",
            "commit",
            "-qm",
            side.name,
        )
    return base, head, repo


def timed(cmd: list[str], cwd: Path, runs: int) -> tuple[float, int]:
    """Median wall time over `runs`, and the exit code of the last run."""
    times, code = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        code = proc.returncode
        if code == 2:
            raise SystemExit(f"{cmd[:3]} failed: {proc.stderr}")
    return statistics.median(times), code


def measure(files: int, per_file: int, runs: int) -> dict[str, float]:
    gate = shutil.which("gate") or sys.exit("gate is not on PATH: run `pip install -e .` first")
    with tempfile.TemporaryDirectory(prefix="prune-gate-bench-") as tmp:
        base, head, repo = make_inputs(Path(tmp), files, per_file)
        rendered, code_r = timed(
            [
                gate,
                "check",
                "--base-manifests",
                str(base),
                "--head-manifests",
                str(head),
                "-o",
                "json",
            ],
            repo,
            runs,
        )
        gitmode, code_g = timed(
            [gate, "check", "--base", "HEAD~1", "--head", "HEAD", "-o", "json"], repo, runs
        )
        bash_gate = (
            "git diff --diff-filter=D --name-only HEAD~1 HEAD | "
            "xargs -r grep -l 'kind: PersistentVolumeClaim'; "
            "git diff -U0 HEAD~1 HEAD | grep -c '^-kind: PersistentVolumeClaim' || true"
        )
        bash, _ = timed(["bash", "-c", bash_gate], repo, runs)
        assert code_r == code_g == 1, "the removed claims must be blocked"
    return {"rendered": rendered, "git": gitmode, "bash": bash}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    objects = args.files * args.per_file
    big = measure(args.files, args.per_file, args.runs)
    small = measure(args.files // 10, args.per_file, args.runs)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"gate check on {objects:,} objects in {args.files:,} files (median of {args.runs} runs)")
    print(f"  rendered mode           {big['rendered']:6.2f} s")
    print(f"  git mode                {big['git']:6.2f} s")
    print(
        f"  bash gate (git diff|grep) {big['bash']:4.2f} s   gate/bash: rendered "
        f"{big['rendered'] / big['bash']:.1f}x, git {big['git'] / big['bash']:.1f}x "
        "(the bash gate sees deleted files only)"
    )
    print(
        f"  scaling 10x input: rendered x{big['rendered'] / small['rendered']:.1f}, "
        f"git x{big['git'] / small['git']:.1f} (10 = linear; process start-up is fixed)"
    )
    print(f"  peak RSS of a child process: {rss:,.0f} MiB")


if __name__ == "__main__":
    main()
