"""Time `gate doctor -A` on 5,000 pods and 2,000 claims of which 200 are stuck Terminating, against
what an operator would type instead, on the same cluster in the same run.

Why: doctor is run at 3 a.m. on a big cluster, and the webhook's detector runs the same pass
every few minutes in each pod: it must cost seconds. It lists pods, claims, volumes, nodes,
namespaces and the other guarded kinds (paginated, raw JSON, small projections) and diagnoses
every deletion. The alternative is the one-liner that finds the pods pinning Terminating claims:
`kubectl get pods,pvc -A -o json | jq ...` (it says which pod pins which claim, nothing about
nodes, volumes, finalizers, namespaces or git). Both are whole processes; the figures are the
median of `--runs` runs and the largest peak RSS (for the pipeline, its largest process).
Both answers are checked to name the same 200 (claim, pod) pairs.

Run: `python -m bench.bench_doctor [--pods 5000] [--claims 2000] [--stuck 200] [--runs 5]`.
Needs jq on PATH (Debian: apt-get install jq). With KUBECONFIG (or --kubeconfig) it uses that
cluster, else it starts its own `scripts/dev-cluster`; the objects live in one namespace (plus
two Node objects) that it deletes again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.bench_check import Run, binary, measure
from bench.bench_snapshot import Raw, cleanup, cluster, populate

REPO = Path(__file__).resolve().parents[1]

#: The operator's one-liner: every (claim, pod) where a scheduled pod mounts a Terminating claim.
JQ_PINNED = r"""
  (.items | map(select(.kind == "PersistentVolumeClaim" and .metadata.deletionTimestamp)
            | {("\(.metadata.namespace)/\(.metadata.name)"): true}) | add // {}) as $stuck
  | .items[] | select(.kind == "Pod" and .spec.nodeName) | . as $pod
  | (.spec.volumes // [])[] | select(.persistentVolumeClaim)
  | "\($pod.metadata.namespace)/\(.persistentVolumeClaim.claimName)" as $claim
  | select($stuck[$claim]) | "\($claim) \($pod.metadata.name)"
"""


def gate_pairs(report: str) -> list[str]:
    """The (claim, pod) pairs of a doctor JSON report: each claim waiting on pods, each pod."""
    out = []
    for d in json.loads(report)["stuck"]:
        ref = d["object"]
        if ref["kind"] == "PersistentVolumeClaim" and d["state"] == "WaitingOnPods":
            out += [f"{ref['namespace']}/{ref['name']} {p['name']}" for p in d["pods"]]
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--stuck", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    args = parser.parse_args(argv)
    if not args.stuck <= args.claims <= args.pods:
        parser.error("need --stuck <= --claims <= --pods (each claim is mounted by one pod)")
    jq = shutil.which("jq")
    if jq is None:
        parser.error(
            "jq is not on PATH: the alternative is a kubectl | jq pipeline (apt-get install jq)"
        )
    gate = shutil.which("gate") or ""
    if not gate:
        parser.error("gate is not on PATH: run it from the project's virtualenv (make bench)")

    namespace = f"bench-doctor-{uuid.uuid4().hex[:6]}"
    nodes = [f"bench-node-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    with cluster(args.kubeconfig) as kubeconfig, tempfile.TemporaryDirectory() as cwd:
        raw = Raw(kubeconfig, pool=16)
        try:
            print(f"creating {args.pods} pods and {args.claims} claims in {namespace} ...")
            took = populate(raw, namespace, nodes, args.pods, args.claims)
            base = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
            with ThreadPoolExecutor(max_workers=16) as pool:  # pvc-protection keeps them
                list(
                    pool.map(lambda i: raw.request("DELETE", f"{base}/data-{i}"), range(args.stuck))
                )
            print(f"created in {took:.1f}s; {args.stuck} claims deleted (Terminating)\n")
            env = {**os.environ, "KUBECONFIG": kubeconfig, "PATH": os.environ.get("PATH", "")}
            doctor = measure(
                [gate, "doctor", "-A", "--older-than=0s", "-o", "json"],
                Path(cwd),
                env,
                args.runs,
                1,
            )
            kubectl = binary("kubectl")
            script = f"{kubectl} get pods,pvc -A -o json | {jq} -r '{JQ_PINNED}' | sort"
            pipeline = measure(["bash", "-c", script], Path(cwd), env, args.runs, 0)
        finally:
            cleanup(raw, namespace, nodes)
            raw.close()
    want = sorted(pipeline.stdout.split("\n")) if pipeline.stdout.strip() else []
    want = [w for w in want if w]
    got = gate_pairs(doctor.stdout)
    if got != want or len(got) != args.stuck:
        print(f"the answers differ: gate {len(got)} pairs, the pipeline {len(want)}")
        return 1
    report(args, doctor, pipeline)
    return 0


def report(args: argparse.Namespace, doctor: Run, pipeline: Run) -> None:
    print(
        f"{args.pods} pods, {args.claims} claims, {args.stuck} stuck; median of {args.runs} runs; "
        f"machine: {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}"
    )
    print(f"  {'method':<44} {'wall':>8} {'peak RSS':>10}")
    print(
        f"  {'gate doctor -A (whole process)':<44} {doctor.seconds:7.2f}s {doctor.rss_mib:7.0f} MiB"
    )
    print(
        f"  {'kubectl get pods,pvc -A -o json | jq':<44} {pipeline.seconds:7.2f}s "
        f"{pipeline.rss_mib:7.0f} MiB"
    )
    print(
        f"  pipeline / gate: {pipeline.seconds / doctor.seconds:.2f}x time, "
        f"{pipeline.rss_mib / doctor.rss_mib:.2f}x memory (above 1: prune-gate is faster or "
        f"smaller); both named the same {args.stuck} (claim, pod) pairs"
    )


if __name__ == "__main__":
    sys.exit(main())
