"""Time the live snapshot of `gate check --live` on 5,000 pods and 2,000 claims, against the real
alternatives on the same data in the same run.

Why: the gate runs on every merge-queue candidate, so reading the cluster must cost seconds, not
minutes, on a busy cluster. The snapshot lists every kind it needs (12 lists, paginated) and parses
raw JSON into small projections. Compared with:

* `kubectl get pods,pvc -A -o json` (what a hand-written gate script would run; two kinds only),
* the kubernetes client's typed `list_pod_for_all_namespaces` + `list_persistent_volume_claim_...`
  (model classes, one unpaginated list each; two kinds only),
* the snapshot restricted to the same two kinds, for a like-for-like figure.

Times are medians of `--runs` runs; peak memory is measured in a separate run of each: of the
in-process methods with tracemalloc (Python heap), of kubectl (a child process) as its peak RSS
read from /proc.

Run: `python -m bench.bench_snapshot [--pods 5000] [--claims 2000] [--runs 5]`. With KUBECONFIG
(or --kubeconfig) it uses that cluster; otherwise it starts its own `scripts/dev-cluster` in a
temporary directory and stops it at the end. The objects it creates live in one namespace (plus
two Node objects) that it deletes again, pods force-deleted first (no kubelet finishes them).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_check import peak_memory
from gate.engine.policy import Policy
from gate.kube.client import load_configuration
from gate.kube.resources import RESOURCES
from gate.kube.snapshot import ApiLister, take_snapshot

REPO = Path(__file__).resolve().parents[1]
DEV_CLUSTER = REPO / "scripts" / "dev-cluster"
BUILD_BINARIES = REPO / "scripts" / "build-binaries"


@contextmanager
def cluster(kubeconfig: str | None) -> Iterator[str]:
    """The kubeconfig of a cluster to use: the given one, or a fresh dev-cluster stopped after."""
    if kubeconfig:
        yield kubeconfig
        return
    with tempfile.TemporaryDirectory(prefix="prune-gate-bench-cluster-") as tmp:
        env = {**os.environ, "PRUNE_GATE_CLUSTER_DIR": tmp}
        subprocess.run([str(DEV_CLUSTER), "up"], env=env, check=True)
        try:
            yield str(Path(tmp) / "kubeconfig")
        finally:
            subprocess.run([str(DEV_CLUSTER), "down"], env=env, check=False)


class Raw:
    """Raw JSON requests over the kubernetes client's configured pool: fast object creation."""

    def __init__(self, kubeconfig: str, pool: int) -> None:
        from kubernetes import client

        cfg = load_configuration(kubeconfig, None)
        cfg.connection_pool_maxsize = pool
        self.api: Any = client.ApiClient(configuration=cfg)

    def request(self, method: str, path: str, body: Any = None, query: Any = None) -> Any:
        m, url, headers, data, _ = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(m, url, header_params=headers, body=data, _request_timeout=120)
        raw = resp.read()
        if resp.status >= 400 and resp.status != 409:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
        return json.loads(raw) if raw else None

    def close(self) -> None:
        self.api.close()


def pod_body(i: int, node: str, claim: str | None) -> dict[str, Any]:
    """A pod of realistic size (~2 KB of JSON): labels, env, probes, resources, a claim."""
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    if claim:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": "data", "mountPath": "/data"})
    app = f"app-{i % 250}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{i}",
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "bench"},
            "annotations": {"bench.prune-gate.io/index": str(i)},
        },
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "env": [{"name": f"SETTING_{k}", "value": f"value-{k}"} for k in range(8)],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"memory": "64Mi"},
                    },
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }


def claim_body(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"data-{i}", "labels": {"app.kubernetes.io/part-of": "bench"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def populate(raw: Raw, namespace: str, nodes: list[str], pods: int, claims: int) -> float:
    """Create the namespace, nodes, claims and pods (the first `claims` pods mount one each)."""
    started = time.perf_counter()
    raw.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    for node in nodes:
        raw.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    deadline = time.monotonic() + 60
    while not raw.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts")["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default service account in {namespace} after 60s")
        time.sleep(0.2)
    base = f"/api/v1/namespaces/{namespace}"
    bodies = [(f"{base}/persistentvolumeclaims", claim_body(i)) for i in range(claims)]
    bodies += [
        (f"{base}/pods", pod_body(i, nodes[i % len(nodes)], f"data-{i}" if i < claims else None))
        for i in range(pods)
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in pool.map(lambda pb: raw.request("POST", pb[0], pb[1]), bodies):
            pass
    return time.perf_counter() - started


def cleanup(raw: Raw, namespace: str, nodes: list[str]) -> None:
    """Force-delete the pods (grace 0), then the namespace and the nodes."""
    base = f"/api/v1/namespaces/{namespace}"
    raw.request("DELETE", f"{base}/pods", query=[("gracePeriodSeconds", "0")])
    raw.request("DELETE", base)
    for node in nodes:
        raw.request("DELETE", f"/api/v1/nodes/{node}")


def measure(fn: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """Median wall and CPU seconds over `runs`, then peak heap MiB in one more run."""
    walls, cpus = [], []
    for _ in range(runs):
        gc.collect()
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return statistics.median(walls), statistics.median(cpus), peak


def kubectl_path() -> str:
    out = subprocess.run(
        [str(BUILD_BINARIES), "path", "kubectl"], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def measure_kubectl(kubeconfig: str, runs: int) -> tuple[float, float]:
    """Median wall seconds of `kubectl get pods,pvc -A -o json`, and its peak RSS in MiB, read
    from /proc in a further run (the children's ru_maxrss would be at least this process's RSS,
    since a vforked child inherits it)."""
    kubectl = kubectl_path()
    cmd = [kubectl, f"--kubeconfig={kubeconfig}", "get", "pods,pvc", "-A", "-o", "json"]
    walls = []
    for _ in range(runs):
        w = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - w)
    rss, _ = peak_memory(cmd, Path.cwd(), dict(os.environ), expect=0)
    return statistics.median(walls), rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    args = parser.parse_args(argv)
    if args.claims > args.pods:
        parser.error("--claims must not exceed --pods (each claim is mounted by one pod)")

    policy = Policy()
    namespace = f"bench-snapshot-{uuid.uuid4().hex[:6]}"
    nodes = [f"bench-node-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    with cluster(args.kubeconfig) as kubeconfig:
        raw = Raw(kubeconfig, pool=16)
        try:
            print(f"creating {args.pods} pods and {args.claims} claims in {namespace} ...")
            took = populate(raw, namespace, nodes, args.pods, args.claims)
            print(f"created in {took:.1f}s\n")
            results = run_all(kubeconfig, policy, args.runs, args.pods, args.claims)
        finally:
            cleanup(raw, namespace, nodes)
            raw.close()
    print_results(results, args)
    return 0


def run_all(
    kubeconfig: str, policy: Policy, runs: int, pods: int, claims: int
) -> dict[str, tuple[float, float, float]]:
    from kubernetes import client

    two = [r for r in RESOURCES if r.kind in ("Pod", "PersistentVolumeClaim")]
    results: dict[str, tuple[float, float, float]] = {}
    with ApiLister.from_kubeconfig(kubeconfig, None, policy.live_timeout_seconds) as lister:

        def full() -> object:
            snap = take_snapshot(lister, policy.guarded_kinds, policy.live_page_size)
            if len(snap.state.pods) < pods:
                raise RuntimeError(f"snapshot saw {len(snap.state.pods)} pods, expected {pods}")
            return snap

        results["snapshot, all 12 kinds"] = measure(full, runs)
        results["snapshot, pods+claims"] = measure(
            lambda: take_snapshot(lister, policy.guarded_kinds, policy.live_page_size, two), runs
        )
    api: Any = client.ApiClient(configuration=load_configuration(kubeconfig, None))
    try:
        core: Any = client.CoreV1Api(api)

        def typed() -> object:
            p = core.list_pod_for_all_namespaces(_request_timeout=120)
            c = core.list_persistent_volume_claim_for_all_namespaces(_request_timeout=120)
            if len(p.items) < pods or len(c.items) < claims:
                raise RuntimeError("typed client saw fewer objects than were created")
            return p, c

        results["typed client, pods+claims"] = measure(typed, runs)
    finally:
        api.close()
    wall, rss = measure_kubectl(kubeconfig, runs)
    results["kubectl get pods,pvc -A -o json"] = (wall, float("nan"), rss)
    return results


def print_results(results: dict[str, tuple[float, float, float]], args: argparse.Namespace) -> None:
    print(
        f"{args.pods} pods, {args.claims} claims; median of {args.runs} runs; machine: "
        f"{os.cpu_count()} CPU(s), Python {sys.version.split()[0]}"
    )
    ref = results["snapshot, all 12 kinds"][0]
    print(f"{'method':<34} {'wall':>8} {'client CPU':>11} {'peak MiB':>9} {'vs snapshot':>12}")
    for name, (wall, cpu, peak) in results.items():
        cpu_s = "-" if cpu != cpu else f"{cpu:.2f}s"
        note = " (kubectl RSS)" if name.startswith("kubectl") else ""
        print(f"{name:<34} {wall:>7.2f}s {cpu_s:>11} {peak:>9.1f} {wall / ref:>11.2f}x{note}")


if __name__ == "__main__":
    sys.exit(main())
