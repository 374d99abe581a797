"""Heal's marks against the real control plane: whose word unattended heal takes (issue 32, 3).

The attack: `heal.disposableClaims` reads labels, and labels come from the deployer's manifests.
A candidate adds `tier: cache` to a stuck database claim, the deployer (Flux's real
kustomize-controller here) applies it, and one `gate heal --watch` pass deletes the pod that pins
the claim: the claim and its Delete-policy volume are gone. Now unattended heal takes a mark only
where managedFields show a person's hand wrote it (`gate.engine.marks`), and the webhook refuses a
deployer that writes a mark or makes managedFields name a person as its writer.

The attacks on that fix: server-side apply under a person's manager name (an Apply is a
manifest), client-side apply (its manager is no person's), a person's `kubectl label --overwrite`
of a value the deployer wrote (it takes nothing over), managedFields stripped (no writer can be
told), a manifest that carries forged managedFields, and a deployer that runs `kubectl label`
itself (its manager name is a person's, its identity is not: only the webhook can tell).

No kubelet runs: pods are scheduled on a test node and reported Running by the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import kube as k
from .flux import FLUX_APP, Flux, ready_condition
from .kube import Cluster
from .test_doctor_heal import start_heal_watch
from .test_live import REPO, run_gate
from .webhookserver import DEPLOYER, Webhook, serve_webhook

pytestmark = pytest.mark.e2e

SOURCE, APP = "repo", FLUX_APP
DISPOSABLE = "prune-gate.io/data"
#: The policy of every test here: claims of the test's namespace labelled tier=cache are
#: disposable, and so is the one named `named`; heal --watch may release them.
REASON = "e2e: a cache, rebuilt on start"


def policy(namespace: str) -> dict[str, Any]:
    return {
        "heal": {
            "watch": {"releaseDisposableClaims": True},
            "disposableClaims": [
                {"namespace": namespace, "labels": {"tier": "cache"}, "reason": REASON},
                {"namespace": namespace, "name": "named", "reason": "e2e: named"},
            ],
        }
    }


def claim_yaml(name: str, namespace: str = "", labels: str = "", annotations: str = "") -> str:
    """A claim's manifest; `labels` and `annotations` are YAML flow mappings."""
    meta = [f"  name: {name}"]
    meta += [f"  namespace: {namespace}"] if namespace else []
    meta += [f"  labels: {labels}"] if labels else []
    meta += [f"  annotations: {annotations}"] if annotations else []
    return "\n".join(
        [
            "apiVersion: v1",
            "kind: PersistentVolumeClaim",
            "metadata:",
            *meta,
            "spec:",
            "  accessModes: [ReadWriteOnce]",
            '  storageClassName: ""',
            "  resources:",
            "    requests:",
            "      storage: 1Gi",
            "",
        ]
    )


def pinned(kube: Cluster, namespace: str, node: str, claim: str) -> str:
    """A Running pod on `node` that mounts `claim`; its name."""
    return str(k.make_pod(kube.client, namespace, node, [claim]).metadata.name)


def stuck(kube: Cluster, namespace: str, claim: str) -> None:
    """Delete the claim: it sits Terminating behind pvc-protection, as in the incident."""
    core = k.core(kube.client)
    core.delete_namespaced_persistent_volume_claim(claim, namespace)
    k.wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim(
                claim, namespace
            ).metadata.deletion_timestamp
        ),
        what=f"claim {claim} to be Terminating",
    )


def deleting(kube: Cluster, namespace: str, pod: str) -> bool:
    return bool(k.core(kube.client).read_namespaced_pod(pod, namespace).metadata.deletion_timestamp)


def apply(kube: Cluster, tmp: Path, manifest: str, *flags: str) -> None:
    path = tmp / f"{k.unique('m')}.yaml"
    path.write_text(manifest)
    kube.kubectl("apply", *flags, "-f", str(path))


def managers(kube: Cluster, namespace: str, claim: str, key: str) -> list[tuple[str, str]]:
    """(manager, operation) of each managedFields entry that owns label `key`: what the test
    set up, read back from the API server."""
    obj = json.loads(
        kube.kubectl(
            "get", "-n", namespace, f"pvc/{claim}", "-o", "json", "--show-managed-fields"
        ).stdout
    )
    return sorted(
        (e["manager"], e["operation"])
        for e in obj["metadata"].get("managedFields") or []
        if f"f:{key}" in ((e.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels", {})
    )


def heal_once(kube: Cluster, namespace: str, cwd: Path) -> dict[str, Any]:
    """One unattended pass: `gate heal --apply --yes` over the namespace (no person confirms)."""
    done = run_gate(
        cwd,
        "heal",
        "-n",
        namespace,
        "--older-than=0s",
        "--apply",
        "--yes",
        f"--kubeconfig={kube.kubeconfig}",
        "-o",
        "json",
    )
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


# ------------------------------------------------------------------ the attack, with real Flux


def test_a_label_flux_applies_does_not_make_heal_watch_release_a_stuck_claim(
    kube: Cluster, flux: Flux, app: str, node: str, tmp_path: Path
) -> None:
    """A candidate labels the database claim `tier: cache`, kustomize-controller applies it, and
    the claim gets stuck: `gate heal --watch` leaves its pod alone, and says whose word the
    label is. A person's
    `kubectl label` and a name in the policy still release their claims in the same passes."""
    ns = app
    core = k.core(kube.client)
    flux.git_repository(ns, SOURCE)
    main = flux.serve(ns, SOURCE, "main", {"db.yaml": claim_yaml("db")})
    flux.kustomization(ns, APP, SOURCE)
    flux.wait_reconciled(ns, APP, main, ready=True)
    # The attack: a candidate marks the database claim, and the deployer applies it.
    candidate = flux.serve(
        ns,
        SOURCE,
        "gh-readonly-queue/main/pr-9",
        {"db.yaml": claim_yaml("db", labels="{tier: cache}")},
    )
    flux.wait_reconciled(ns, APP, candidate, ready=True)
    assert core.read_namespaced_persistent_volume_claim("db", ns).metadata.labels["tier"] == "cache"
    assert managers(kube, ns, "db", "tier") == [("kustomize-controller", "Apply")]
    # Then the claims get stuck (kustomize-controller does not apply to a Terminating claim).
    for name in ("person", "named"):
        k.make_claim(kube.client, ns, name)
    pods = {name: pinned(kube, ns, node, name) for name in ("db", "person", "named")}
    for name in pods:
        stuck(kube, ns, name)
    # A person marks theirs by hand.
    kube.kubectl("label", "-n", ns, "pvc/person", "tier=cache")

    (tmp_path / "prune-gate.yaml").write_text(json.dumps(policy(ns)))
    log = tmp_path / "heal-watch.log"
    with log.open("w") as out:
        watcher = _start_watch(kube, ns, tmp_path, out)
    try:
        for name in ("person", "named"):
            k.wait_for(
                lambda name=name: deleting(kube, ns, pods[name]),  # type: ignore[misc]
                timeout=60,
                what=f"heal --watch to release claim {name}",
            )
        k.wait_for(
            lambda: [e for e in _log_lines(log) if _about(e, ns, "db")],
            timeout=60,
            what="heal --watch to decide on claim db",
        )
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=60)
    assert watcher.returncode == 0, log.read_text()
    assert not deleting(kube, ns, pods["db"]), "heal --watch took the deployer's label"
    [left] = [e for e in _log_lines(log) if _about(e, ns, "db")]
    assert left["msg"] == "left alone", left
    assert "kustomize-controller (Apply" in left["why"] and "not a person's hand" in left["why"]
    released = {e["heals"] for e in _log_lines(log) if e.get("msg") == "heal action"}
    assert released == {f"PersistentVolumeClaim {ns}/{c}" for c in ("person", "named")}
    # gate doctor names who wrote each mark.
    doctor = run_gate(
        tmp_path,
        "doctor",
        "-n",
        ns,
        "--older-than=0s",
        f"--kubeconfig={kube.kubeconfig}",
        "-o",
        "json",
    )
    assert doctor.returncode == 1, doctor.stderr
    marks = {d["object"]["name"]: d["marks"] for d in json.loads(doctor.stdout)["stuck"]}
    [db_mark] = marks["db"]
    assert (db_mark["field"], db_mark["key"], db_mark["value"]) == ("label", "tier", "cache")
    assert [(w["manager"], w["operation"]) for w in db_mark["writers"]] == [
        ("kustomize-controller", "Apply")
    ]
    assert "does not take it" in db_mark["heal"]
    [person_mark] = marks["person"]
    assert [(w["manager"], w["operation"]) for w in person_mark["writers"]] == [
        ("kubectl-label", "Update")
    ]
    assert person_mark["writers"][0]["time"] and "takes it" in person_mark["heal"]
    text = run_gate(
        tmp_path, "doctor", "-n", ns, "--older-than=0s", f"--kubeconfig={kube.kubeconfig}"
    )
    assert 'label tier="cache": written by kustomize-controller (Apply, ' in text.stdout


def _about(line: dict[str, Any], namespace: str, claim: str) -> bool:
    """A heal --watch log line that acts on the claim (releases it) or leaves it alone."""
    ref = f"PersistentVolumeClaim {namespace}/{claim}"
    return line.get("heals") == ref or (line.get("msg") == "left alone" and line["object"] == ref)


def _log_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def _start_watch(kube: Cluster, namespace: str, cwd: Path, log: Any) -> subprocess.Popen[str]:
    """`gate heal --watch --apply` on the namespace, without the job's GitHub or kubeconfig
    environment, logging to `log`."""
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith(("GITHUB_", "KUBECONFIG"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return start_heal_watch(namespace, kube, cwd, env, log)


# ------------------------------------------------------------ attacks on the fix, one pass each


def test_unattended_heal_takes_only_a_mark_a_persons_hand_alone_wrote(
    kube: Cluster, namespace: str, node: str, tmp_path: Path
) -> None:
    """Each way a deployer's mark could pass for a person's, on a stuck claim, then one
    unattended pass: only the marks a person wrote by hand release their claims."""
    ns = namespace
    cache = "{tier: cache}"
    # Server-side apply under a person's manager name: an Apply is a manifest.
    apply(
        kube,
        tmp_path,
        claim_yaml("ssa-as-person", ns, cache),
        "--server-side",
        "--field-manager=kubectl-label",
    )
    # Client-side apply, as Argo CD and `kubectl apply` in CI do.
    apply(kube, tmp_path, claim_yaml("csa", ns, cache))
    # The deployer's server-side apply, then a person's `kubectl label --overwrite` of the same
    # value: nothing changes, so nothing is taken over.
    apply(
        kube,
        tmp_path,
        claim_yaml("overwritten", ns, cache),
        "--server-side",
        "--field-manager=kustomize-controller",
    )
    kube.kubectl("label", "-n", ns, "pvc/overwritten", "tier=cache", "--overwrite")
    # A person's label, then managedFields stripped: no writer can be told.
    apply(kube, tmp_path, claim_yaml("stripped", ns))
    kube.kubectl("label", "-n", ns, "pvc/stripped", "tier=cache")
    kube.kubectl(
        "patch",
        "-n",
        ns,
        "pvc/stripped",
        "--type=merge",
        "-p",
        '{"metadata":{"managedFields":[{}]}}',
    )
    # The deployer's disposable annotation (server-side apply).
    apply(
        kube,
        tmp_path,
        claim_yaml("annotated-by-deployer", ns, annotations=f"{{{DISPOSABLE}: disposable}}"),
        "--server-side",
        "--field-manager=kustomize-controller",
    )
    # What counts: a person who takes the deployer's label over deliberately (removes it, sets
    # it again), and a person's annotation.
    apply(
        kube,
        tmp_path,
        claim_yaml("taken-over", ns, cache),
        "--server-side",
        "--field-manager=kustomize-controller",
    )
    kube.kubectl("label", "-n", ns, "pvc/taken-over", "tier-")
    kube.kubectl("label", "-n", ns, "pvc/taken-over", "tier=cache")
    apply(kube, tmp_path, claim_yaml("annotated", ns))
    kube.kubectl("annotate", "-n", ns, "pvc/annotated", f"{DISPOSABLE}=disposable")

    assert managers(kube, ns, "ssa-as-person", "tier") == [("kubectl-label", "Apply")]
    assert managers(kube, ns, "csa", "tier") == [("kubectl-client-side-apply", "Update")]
    assert managers(kube, ns, "overwritten", "tier") == [("kustomize-controller", "Apply")]
    assert managers(kube, ns, "stripped", "tier") == []
    assert managers(kube, ns, "taken-over", "tier") == [("kubectl-label", "Update")]

    refused = ("ssa-as-person", "csa", "overwritten", "stripped", "annotated-by-deployer")
    released = ("taken-over", "annotated")
    pods = {name: pinned(kube, ns, node, name) for name in (*refused, *released)}
    for name in pods:
        stuck(kube, ns, name)
    (tmp_path / "prune-gate.yaml").write_text(json.dumps(policy(ns)))

    report = heal_once(kube, ns, tmp_path)
    acted = {a["heals"]["name"] for a in report["actions"] if a["result"] == "done"}
    assert acted == set(released), report
    why = {s["object"]["name"]: s["why"] for s in report["skipped"]}
    assert set(refused) <= set(why), report
    assert "kubectl-label (Apply" in why["ssa-as-person"]
    assert "kubectl-client-side-apply (Update" in why["csa"]
    assert "kustomize-controller (Apply" in why["overwritten"]
    assert "cannot be told" in why["stripped"]
    assert DISPOSABLE in why["annotated-by-deployer"]
    for name in refused:
        assert not deleting(kube, ns, pods[name]), f"unattended heal took the mark on {name}"
    for name in released:
        assert deleting(kube, ns, pods[name]), f"a person's mark on {name} was not taken"


# ------------------------------------------------------------------- the webhook, as a deployer


@pytest.fixture
def marks_hook(kube: Cluster, namespace: str, tmp_path: Path) -> Iterator[Webhook]:
    """The webhook with this module's policy, for one test only: the tests above must not find
    it registered (it would refuse their deployer's writes), whatever order they run in. It
    is unregistered before the namespace is deleted."""
    with serve_webhook(kube, tmp_path, policy(namespace)) as hook:
        yield hook


def _refused(result: subprocess.CompletedProcess[str]) -> str:
    """The webhook's refusal text from a kubectl that failed; fails the test if it did not."""
    assert result.returncode != 0, f"allowed:\n{result.stdout}"
    assert "GUARD_TAMPERED" in result.stderr, result.stderr
    return result.stderr


def test_the_webhook_refuses_a_deployer_that_writes_a_mark_or_forges_its_writer(
    kube: Cluster, namespace: str, tmp_path: Path, marks_hook: Webhook
) -> None:
    ns = namespace
    as_deployer = f"--as={DEPLOYER}"
    apply(kube, tmp_path, claim_yaml("db", ns))
    # The deployer's own `kubectl label` writes under a person's manager name: its identity
    # is what the webhook reads.
    stderr = _refused(
        kube.kubectl(as_deployer, "label", "-n", ns, "pvc/db", "tier=cache", check=False)
    )
    assert "label tier" in stderr
    _refused(
        kube.kubectl(
            as_deployer, "annotate", "-n", ns, "pvc/db", f"{DISPOSABLE}=disposable", check=False
        )
    )
    path = tmp_path / "db.yaml"
    path.write_text(claim_yaml("db", ns, "{tier: cache}"))
    _refused(
        kube.kubectl(
            as_deployer,
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "-f",
            str(path),
            check=False,
        )
    )
    _refused(kube.kubectl(as_deployer, "apply", "-f", str(path), check=False))
    # Created already carrying it.
    path.write_text(claim_yaml("fresh", ns, "{tier: cache}"))
    _refused(kube.kubectl(as_deployer, "apply", "-f", str(path), check=False))
    live = k.core(kube.client).read_namespaced_persistent_volume_claim("db", ns)
    assert "tier" not in (live.metadata.labels or {}) and DISPOSABLE not in (
        live.metadata.annotations or {}
    )

    # A value no entry reads, and a person's hand, go through.
    assert (
        kube.kubectl(as_deployer, "label", "-n", ns, "pvc/db", "tier=db", check=False).returncode
        == 0
    )
    assert (
        kube.kubectl(
            "label", "-n", ns, "pvc/db", "tier=cache", "--overwrite", check=False
        ).returncode
        == 0
    )

    # The label a deployer wrote before the webhook (server-side apply), then a client-side
    # apply whose manifest carries managedFields naming kubectl-label its writer.
    apply(
        kube,
        tmp_path,
        claim_yaml("forged", ns, "{tier: cache}"),
        "--server-side",
        "--field-manager=kustomize-controller",
    )
    assert managers(kube, ns, "forged", "tier") == [("kustomize-controller", "Apply")]
    forged = claim_yaml("forged", ns, "{tier: cache}").replace(
        "  labels: {tier: cache}\n",
        "  labels: {tier: cache}\n"
        "  managedFields:\n"
        "    - apiVersion: v1\n"
        "      fieldsType: FieldsV1\n"
        '      fieldsV1: {"f:metadata": {"f:labels": {"f:tier": {}}}}\n'
        "      manager: kubectl-label\n"
        "      operation: Update\n"
        '      time: "2026-01-01T00:00:00Z"\n',
    )
    path.write_text(forged)
    stderr = _refused(kube.kubectl(as_deployer, "apply", "-f", str(path), check=False))
    assert "kubectl-label" in stderr and "managedFields" in stderr
    assert managers(kube, ns, "forged", "tier") == [("kustomize-controller", "Apply")]


def test_flux_applying_a_candidate_that_marks_a_claim_disposable_is_refused(
    kube: Cluster, flux: Flux, app: str, tmp_path: Path
) -> None:
    """The real deployer: a candidate that adds `tier: cache` to a claim fails to apply (the
    Kustomization says GUARD_TAMPERED), and the live claim stays unmarked."""
    ns = app
    with serve_webhook(kube, tmp_path, policy(ns)):
        flux.git_repository(ns, SOURCE)
        main = flux.serve(ns, SOURCE, "main", {"db.yaml": claim_yaml("db")})
        flux.kustomization(ns, APP, SOURCE)
        flux.wait_reconciled(ns, APP, main, ready=True)
        candidate = flux.serve(
            ns,
            SOURCE,
            "gh-readonly-queue/main/pr-9",
            {"db.yaml": claim_yaml("db", labels="{tier: cache}")},
        )
        condition = flux.wait_reconciled(ns, APP, candidate, ready=False)
        assert "GUARD_TAMPERED" in condition["message"], condition
        live = k.core(kube.client).read_namespaced_persistent_volume_claim("db", ns)
        assert "tier" not in (live.metadata.labels or {})
        assert ready_condition(flux.read_kustomization(ns, APP)) is not None


def _status_mark(kube: Cluster, namespace: str, claim: str, *as_user: str) -> Any:
    """Mark a claim disposable (annotation and `tier: cache`) through its status subresource,
    under `kubectl annotate`'s manager name; `as_user` is `--as=...` or nothing (the admin)."""
    patch = {"metadata": {"annotations": {DISPOSABLE: "disposable"}, "labels": {"tier": "cache"}}}
    return kube.kubectl(
        *as_user,
        "patch",
        "-n",
        namespace,
        f"pvc/{claim}",
        "--subresource=status",
        "--type=merge",
        "--field-manager=kubectl-annotate",
        "-p",
        json.dumps(patch),
        check=False,
    )


def _mark_entries(kube: Cluster, namespace: str, claim: str) -> list[dict[str, Any]]:
    """The claim's managedFields entries that own its `tier` label or disposable annotation."""
    obj = json.loads(
        kube.kubectl(
            "get", "-n", namespace, f"pvc/{claim}", "-o", "json", "--show-managed-fields"
        ).stdout
    )
    out: list[dict[str, Any]] = []
    for e in obj["metadata"].get("managedFields") or []:
        meta = (e.get("fieldsV1") or {}).get("f:metadata") or {}
        if "f:tier" in meta.get("f:labels", {}) or f"f:{DISPOSABLE}" in meta.get(
            "f:annotations", {}
        ):
            out.append(e)
    return out


def test_the_webhook_refuses_a_mark_through_status_and_a_rewrite_of_its_subresource(
    kube: Cluster, namespace: str, node: str, tmp_path: Path, marks_hook: Webhook
) -> None:
    """Two steps, each of which the webhook did not see: a deployer marks a claim through its
    status subresource (a /status write may change metadata.labels and .annotations; the
    webhook's rules named `persistentvolumeclaims` only), under a person's manager name; then a
    main-resource UPDATE rewrites managedFields, dropping only `subresource: status` from that
    entry (matchConditions projected `manager/operation`, which did not change). The entry now
    reads as a person's `kubectl annotate` and unattended heal would release the stuck claim."""
    ns = namespace
    as_deployer = f"--as={DEPLOYER}"
    for name in ("db", "fresh"):
        apply(kube, tmp_path, claim_yaml(name, ns))
    # Step 1, by the deployer, on a fresh claim: the status subresource.
    step1 = _status_mark(kube, ns, "fresh", as_deployer)
    # Step 2: the status-written mark is there (written by someone the webhook lets through,
    # or by the deployer before the webhook ran); the deployer drops `subresource` from it.
    assert _status_mark(kube, ns, "db").returncode == 0
    [entry] = _mark_entries(kube, ns, "db")
    assert (entry["manager"], entry["operation"], entry.get("subresource")) == (
        "kubectl-annotate",
        "Update",
        "status",
    )
    obj = json.loads(
        kube.kubectl("get", "-n", ns, "pvc/db", "-o", "json", "--show-managed-fields").stdout
    )
    rewritten = [
        {k_: v for k_, v in e.items() if k_ != "subresource"} if e == entry else e
        for e in obj["metadata"]["managedFields"]
    ]
    step2 = kube.kubectl(
        as_deployer,
        "patch",
        "-n",
        ns,
        "pvc/db",
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"managedFields": rewritten}}),
        check=False,
    )
    # Unattended heal on the stuck claim reads whatever step 2 left (the webhook refuses a
    # mounted claim's DELETE: a person's override lets it through to get stuck).
    pod = pinned(kube, ns, node, "db")
    kube.kubectl("annotate", "-n", ns, "pvc/db", "prune-gate.io/allow-delete=e2e: get it stuck")
    stuck(kube, ns, "db")
    (tmp_path / "prune-gate.yaml").write_text(json.dumps(policy(ns)))
    report = heal_once(kube, ns, tmp_path)

    assert "label tier" in _refused(step1)
    fresh = k.core(kube.client).read_namespaced_persistent_volume_claim("fresh", ns)
    assert "tier" not in (fresh.metadata.labels or {})
    assert DISPOSABLE not in (fresh.metadata.annotations or {})
    stderr = _refused(step2)
    assert "kubectl-annotate" in stderr and "managedFields" in stderr
    assert [e.get("subresource") for e in _mark_entries(kube, ns, "db")] == ["status"]
    assert not deleting(kube, ns, pod), "unattended heal took a mark written through /status"
    [skipped] = [s for s in report["skipped"] if s["object"]["name"] == "db"]
    assert "kubectl-annotate (Update of status" in skipped["why"], skipped
