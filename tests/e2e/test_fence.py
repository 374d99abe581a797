"""`gate fence hold|release|status` against the real API server: who may hold the fence, when."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from . import kube as k
from .kube import Cluster
from .test_live import run_gate

pytestmark = pytest.mark.e2e


def test_hold_renew_wait_release_and_expiry(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    lease = f"{namespace}/speculation-fence"

    def fence(*args: str) -> subprocess.CompletedProcess[str]:
        return run_gate(
            tmp_path, "fence", *args, "--lease", lease, f"--kubeconfig={kube.kubeconfig}"
        )

    assert fence("status").stdout.startswith("free: no fence Lease")
    held = fence("hold", "--holder", "aaa111")
    assert held.returncode == 0, held.stderr
    assert f"Lease {lease} held by aaa111" in held.stdout
    spec = json.loads(
        kube.kubectl("get", "lease", "-n", namespace, "speculation-fence", "-o", "json").stdout
    )["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("aaa111", 1800)

    other = fence("hold", "--holder", "bbb222")
    assert other.returncode == 1
    assert other.stderr.startswith(f"waiting: Lease {lease} held by aaa111")
    assert fence("hold", "--holder", "aaa111").returncode == 0  # a renewal

    assert "held by aaa111" in fence("release", "--holder", "bbb222").stdout  # not theirs
    assert fence("status").stdout.startswith("held:")
    assert fence("release", "--holder", "aaa111").stdout.endswith("is not held\n")

    short = fence("hold", "--holder", "ccc333", "--duration", "1s")
    assert short.returncode == 0, short.stderr
    expired = k.wait_for(
        lambda: fence("status").stdout.startswith("expired:"), what="the 1s fence to expire"
    )
    assert expired
    taken = fence("hold", "--holder", "ddd444")  # an expired fence is not obeyed
    assert taken.returncode == 0, taken.stderr
    assert "held by ddd444" in taken.stdout


def test_fence_errors(kube: Cluster, tmp_path: Path) -> None:
    unconfigured = run_gate(tmp_path, "fence", "status", f"--kubeconfig={kube.kubeconfig}")
    assert unconfigured.returncode == 2
    assert "no fence: pass --lease NAMESPACE/NAME" in unconfigured.stderr
    bad = run_gate(tmp_path, "fence", "hold", "--holder", "x", "--duration", "30", "--lease", "a/b")
    assert bad.returncode == 2
    assert "not a duration with units" in bad.stderr


def test_the_action_holds_the_fence_after_a_passing_check_and_releases_it(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The Action's steps as a runner runs them (tests/unit/actionrunner.py), with the kubeconfig
    given as a secret's content: a merge-group check that passes holds the fence for the
    candidate; a check that blocks holds nothing; the `always()` step releases it."""
    from tests.unit.actionrunner import ActionRun, run_action
    from tests.unit.helpers import GitRepo, claim

    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"deploy/app.yaml": claim()})
    head = repo.commit({"deploy/app.yaml": claim("20Gi")})
    dropped = repo.commit(
        {"deploy/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"}
    )
    lease = f"{namespace}/speculation-fence"
    secret = Path(kube.kubeconfig).read_text("utf-8")

    def act(step: str, candidate: str, **inputs: str) -> ActionRun:
        temp = tmp_path / f"runner-{step}"
        temp.mkdir()
        payload = {"merge_group": {"base_sha": base, "head_sha": candidate}}
        common = {"kubeconfig": secret, "fence-lease": lease, "render": "none"}
        return run_action(
            repo.root, temp, event="merge_group", payload=payload, sha=candidate,
            inputs={**common, **inputs},
        )  # fmt: skip

    def holder() -> str | None:
        got = kube.kubectl(
            "get", "lease", "-n", namespace, "speculation-fence", "-o", "json", check=False
        )
        return json.loads(got.stdout)["spec"].get("holderIdentity") if got.returncode == 0 else None

    blocked = act("blocked", dropped, fence="hold")
    assert blocked.code == 1, blocked.stdout + blocked.stderr
    assert holder() is None  # a candidate that is not deployed holds nothing

    held = act("hold", head, fence="hold", live="true")
    assert held.code == 0, held.stdout + held.stderr
    assert held.outputs["verdict"] == "allow"
    assert holder() == head

    released = act("release", head, fence="release")
    assert released.code == 0, released.stdout + released.stderr
    assert released.outputs["verdict"] == ""
    assert holder() in (None, "")


def test_the_action_holds_the_fence_base_names_not_the_candidates(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Issue 32, item 1: a merge-group candidate that renames `webhook.fence` in its own
    prune-gate.yaml is blocked by the check and holds nothing; one whose change base already
    exempts (a person moving the fence) passes, and the Action holds base's Lease, the one the
    webhook still watches during the candidate's speculative window, never the candidate's."""
    from tests.unit.actionrunner import ActionRun, run_action
    from tests.unit.helpers import GitRepo, claim

    policy = f"webhook:\n  fence: {{namespace: {namespace}, name: speculation-fence}}\n"
    moved = policy.replace("speculation-fence", "elsewhere")
    exempt = (
        "exemptions:\n  - {kind: Policy.prune-gate.io, name: webhook.fence, codes: "
        "[GUARD_TAMPERED], reason: moving the fence, expires: '2099-01-01'}\n"
    )
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"deploy/app.yaml": claim(), "prune-gate.yaml": policy})
    redirect = repo.commit({"deploy/app.yaml": claim("20Gi"), "prune-gate.yaml": moved})
    exempted = repo.commit({"prune-gate.yaml": policy + exempt}, "a person exempts the move")
    move = repo.commit({"prune-gate.yaml": moved + exempt}, "and moves the fence")
    secret = Path(kube.kubeconfig).read_text("utf-8")

    def act(step: str, base_sha: str, candidate: str, fence: str) -> ActionRun:
        temp = tmp_path / f"runner-{step}"
        temp.mkdir()
        payload = {"merge_group": {"base_sha": base_sha, "head_sha": candidate}}
        inputs = {"kubeconfig": secret, "render": "none", "paths": "deploy", "fence": fence}
        return run_action(
            repo.root, temp, event="merge_group", payload=payload, sha=candidate, inputs=inputs
        )

    def holder(name: str) -> str | None:
        got = kube.kubectl("get", "lease", "-n", namespace, name, "-o", "json", check=False)
        return json.loads(got.stdout)["spec"].get("holderIdentity") if got.returncode == 0 else None

    repo.git("checkout", "-q", redirect)  # the job's checkout is the candidate
    blocked = act("redirect", base, redirect, "hold")
    assert blocked.code == 1, blocked.stdout + blocked.stderr
    assert "GUARD_TAMPERED" in blocked.stdout and "webhook.fence" in blocked.stdout
    assert holder("speculation-fence") is None and holder("elsewhere") is None

    repo.git("checkout", "-q", move)
    held = act("move", exempted, move, "hold")
    assert held.code == 0, held.stdout + held.stderr
    assert holder("speculation-fence") == move
    assert holder("elsewhere") is None
    released = act("release", exempted, move, "release")
    assert released.code == 0, released.stdout + released.stderr
    assert holder("speculation-fence") in (None, "")
