"""`python -m bench` (or `make bench`): run every benchmark, one after the other, and print figures.

Each benchmark is its own module with its own options; this runs them with their defaults in
fresh processes, so one's memory does not colour the next. Benchmarks that need a cluster start
a throwaway one (scripts/dev-cluster) unless KUBECONFIG points at one.
"""

from __future__ import annotations

import subprocess
import sys
import time

BENCHMARKS = (
    (
        "gate start-up: --help, codes, check --help, and what a check imports",
        "bench.bench_startup",
    ),
    ("gate check, rendered, git and kustomize mode, vs yq pipelines", "bench.bench_check"),
    ("git tree reading", "bench.bench_git"),
    (
        "work counted: cache queries, git processes, collections, memory after a burst",
        "bench.bench_internals",
    ),
    ("gate.speed's process-level speed-ups, with and without each", "bench.bench_speedups"),
    ("live snapshot, vs kubectl and the typed client", "bench.bench_snapshot"),
    ("admission webhook latency and cache memory", "bench.bench_webhook"),
    ("gate doctor on stuck claims, vs kubectl | jq", "bench.bench_doctor"),
    (
        "webhook under load (vegeta), through the API server beside Kyverno, cache catch-up",
        "bench.bench_load",
    ),
    ("onedr0p/home-ops with --flux-root: check and history, cold and warm", "bench.bench_flux"),
)


def main() -> int:
    """Run each benchmark; exit non-zero if any failed."""
    failed = []
    for title, module in BENCHMARKS:
        print(f"\n== {title} ({module})", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, "-m", module])
        print(f"-- {module}: exit {code}, {time.perf_counter() - start:.0f} s", flush=True)
        if code:
            failed.append(module)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
