"""Time `gate.sources.gitsource.read_tree` on a generated repository: 2,000 files, 10,000 objects.

The issue asks that loading does no quadratic work; this builds a throwaway repository in a
temporary directory (one commit, written with `git fast-import` so building it is quick too) and
times reading its tree. Run from the repository root: `python -m bench.bench_git [--files N]`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from gate.sources import gitsource, parsecache
from gate.sources.gitsource import read_tree

_DOC = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm-{i}-{j}
  namespace: ns-{ns}
  labels:
    app: bench
data:
  key: value-{i}-{j}
  other: "{j}"
"""


def make_repo(root: Path, files: int, per_file: int) -> None:
    """A repository with `files` manifests of `per_file` objects each, in 20 directories."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    stream: list[bytes] = [b"commit refs/heads/main\n"]
    stream.append(b"committer Bench <bench@example.invalid> 1700000000 +0000\n")
    stream.append(b"data 5\nbench\n")
    for i in range(files):
        text = "---\n".join(_DOC.format(i=i, j=j, ns=i % 20) for j in range(per_file))
        data = text.encode()
        stream.append(f"M 100644 inline apps/app-{i % 20}/m-{i}.yaml\n".encode())
        stream.append(f"data {len(data)}\n".encode() + data + b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], input=b"".join(stream), cwd=root, check=True)


def main() -> None:
    """Build the repository, read it a few times, print the best time."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["PRUNE_GATE_PARSE_CACHE"] = "off"  # what is measured is reading, not the cache
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root, args.files, args.per_file)
        best = float("inf")
        count = 0
        for _ in range(args.runs):
            start = time.perf_counter()
            # a fresh process with no parse cache lists the tree and parses every blob
            parsecache.reset()  # and no parse kept in this one
            gitsource._TREES.clear()
            gitsource._COMMITS.clear()
            count = len(read_tree(root, "main"))
            best = min(best, time.perf_counter() - start)
        print(f"read_tree: {args.files} files, {count} objects: {best:.3f}s (best of {args.runs})")


if __name__ == "__main__":
    main()
