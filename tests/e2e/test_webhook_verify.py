"""`gate webhook verify`, the chart's `helm test`, against the real control plane: it passes only
when the configuration is armed and the API server refuses a mounted claim's deletion through the
webhook, under the identity the chart's test hook gives it, and it leaves nothing behind.

Nothing runs pods here (no kubelet), so `helm test` itself cannot run its pod: the hook's objects
are rendered by the real Helm and made in the cluster, and the pod's command runs here with a
token of the hook's ServiceAccount, as the pod would."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gate.kube.client import ForbiddenError, KubeClient, load_configuration
from webhook.verify import LABELS, Outcome, verify

from . import kube as k
from .kube import Cluster
from .webhookserver import Webhook

pytestmark = pytest.mark.e2e

CHART = Path(__file__).resolve().parents[2] / "charts" / "prune-gate"


def leftovers(kube: Cluster, prefix: str) -> list[str]:
    """Namespaces verify made with `prefix` that still exist (not already being deleted)."""
    selector = ",".join(f"{key}={value}" for key, value in LABELS.items())
    found = k.core(kube.client).list_namespace(label_selector=selector).items
    return [
        ns.metadata.name
        for ns in found
        if ns.metadata.name.startswith(prefix) and not ns.metadata.deletion_timestamp
    ]


def run_cli(kube: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate", "webhook", "verify", "--kubeconfig", kube.kubeconfig, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def token_kubeconfig(kube: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that is the ServiceAccount: the cluster's, with a token of the account."""
    token = (
        k.core(kube.client)
        .create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        .status.token
    )
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    doc["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(doc))
    return path


def run_verify(kubeconfig: Path, configuration: str, **options: Any) -> Outcome:
    with KubeClient(load_configuration(str(kubeconfig), None), timeout=30.0) as api:
        return verify(api, configuration, **options)


@pytest.fixture
def hook_identity(
    kube: Cluster, webhook: Webhook, namespace: str, tmp_path: Path
) -> Iterator[Path]:
    """The chart's test hook's ServiceAccount, ClusterRole and binding, rendered by Helm for the
    registered webhook and made in the cluster; a kubeconfig with a token of that account."""
    rendered = subprocess.run(
        [kube.binary("helm"), "template", "verify", str(CHART), "--namespace", namespace,
         "--show-only", "templates/tests/verify.yaml", "--set",
         f"webhook.name={webhook.registration}"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    docs = [o for o in yaml.safe_load_all(rendered) if o]
    (pod,) = (o for o in docs if o["kind"] == "Pod")
    objs = [o for o in docs if o["kind"] != "Pod"]
    suffix = uuid.uuid4().hex[:6]
    for obj in objs:  # cluster-scoped names made unique: other modules share the cluster
        if obj["kind"].startswith("ClusterRole"):
            obj["metadata"]["name"] += f"-{suffix}"
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] += f"-{suffix}"
    made = subprocess.run(
        [kube.binary("kubectl"), "--kubeconfig", kube.kubeconfig, "create", "-f", "-"],
        input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    # The pod itself is valid and admitted once its ServiceAccount exists (no kubelet runs it).
    admitted = subprocess.run(
        [kube.binary("kubectl"), "--kubeconfig", kube.kubeconfig, "create", "--dry-run=server",
         "-f", "-"],
        input=yaml.safe_dump(pod), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert admitted.returncode == 0, admitted.stderr
    assert admitted.stdout.strip().endswith("created (server dry run)"), admitted.stdout
    (account,) = (o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount")
    rbac = client.RbacAuthorizationV1Api(kube.client)
    try:
        yield token_kubeconfig(kube, namespace, account, tmp_path / "hook-kubeconfig")
    finally:
        for obj in objs:
            if obj["kind"] == "ClusterRoleBinding":
                k.delete_if_present(rbac.delete_cluster_role_binding, obj["metadata"]["name"])
            if obj["kind"] == "ClusterRole":
                k.delete_if_present(rbac.delete_cluster_role, obj["metadata"]["name"])


def unarmed_configuration(kube: Cluster, policy: str) -> Iterator[str]:
    """A configuration with `policy` that no request reaches (an objectSelector nothing has)."""
    admission = client.AdmissionregistrationV1Api(kube.client)
    name = k.unique("verify-unarmed")
    hook = client.V1ValidatingWebhook(
        name="never.prune-gate.io",
        admission_review_versions=["v1"],
        side_effects="None",
        failure_policy=policy,
        client_config=client.AdmissionregistrationV1WebhookClientConfig(
            url="https://127.0.0.1:9/validate"
        ),
        object_selector=client.V1LabelSelector(match_labels={"prune-gate.io/never": "true"}),
        rules=[
            client.V1RuleWithOperations(
                api_groups=[""], api_versions=["v1"], operations=["DELETE"],
                resources=["persistentvolumeclaims"],
            )
        ],
    )  # fmt: skip
    admission.create_validating_webhook_configuration(
        client.V1ValidatingWebhookConfiguration(
            metadata=client.V1ObjectMeta(name=name), webhooks=[hook]
        )
    )
    try:
        yield name
    finally:
        k.delete_if_present(admission.delete_validating_webhook_configuration, name)


@pytest.fixture
def ignoring(kube: Cluster) -> Iterator[str]:
    yield from unarmed_configuration(kube, "Ignore")


@pytest.fixture
def armed_but_deaf(kube: Cluster) -> Iterator[str]:
    yield from unarmed_configuration(kube, "Fail")


def test_the_hooks_identity_sees_it_armed_and_refusing_and_leaves_nothing(
    kube: Cluster, webhook: Webhook, hook_identity: Path
) -> None:
    prefix = k.unique("verify-ok")
    outcome = run_verify(hook_identity, webhook.registration, timeout=90, namespace_prefix=prefix)
    assert outcome.ok, outcome.lines
    assert outcome.lines[0] == (
        f"armed: ValidatingWebhookConfiguration {webhook.registration}, failurePolicy Fail on "
        "every webhook"
    )
    assert outcome.lines[1].startswith(f"refusing: the dry-run deletion of mounted claim {prefix}-")
    assert outcome.lines[1].endswith("/verify-data was refused with CLAIM_MOUNTED")
    assert len(outcome.lines) == 2  # nothing left behind
    assert leftovers(kube, prefix) == []


def test_the_command_exits_0_when_armed_and_refusing(kube: Cluster, webhook: Webhook) -> None:
    prefix = k.unique("verify-cli")
    done = run_cli(kube, "--configuration", webhook.registration, "--timeout", "90s",
                   "--namespace-prefix", prefix)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused with CLAIM_MOUNTED" in done.stdout
    assert leftovers(kube, prefix) == []


def test_a_configuration_left_at_ignore_is_not_armed_exit_1(kube: Cluster, ignoring: str) -> None:
    done = run_cli(kube, "--configuration", ignoring, "--timeout", "2s")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(
        f"not armed: failurePolicy of never.prune-gate.io is not Fail in "
        f"ValidatingWebhookConfiguration {ignoring}"
    )
    assert "fix: kubectl -n NAMESPACE rollout status" in done.stdout


def test_armed_but_never_called_is_not_refusing_exit_1_and_cleans_up(
    kube: Cluster, webhook: Webhook, armed_but_deaf: str
) -> None:
    """The module's webhook refuses the same deletion: a refusal by another configuration's
    webhook is not this one's."""
    prefix = k.unique("verify-deaf")
    done = run_cli(kube, "--configuration", armed_but_deaf, "--timeout", "3s",
                   "--namespace-prefix", prefix)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("armed: ")
    assert lines[1].startswith(f"not refusing: the dry-run deletion of claim {prefix}-")
    assert "(dry run): forbidden (403) (admission webhook" in lines[1]
    assert "CLAIM_MOUNTED" in lines[1]
    assert lines[2].startswith("why: the API server did not call never.prune-gate.io for it")
    assert leftovers(kube, prefix) == []


def test_no_configuration_is_not_installed_exit_1(kube: Cluster) -> None:
    done = run_cli(kube, "--configuration", "prune-gate-nowhere", "--timeout", "1s")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("not installed: no ValidatingWebhookConfiguration")


def test_without_the_rights_it_could_not_decide(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    k.core(kube.client).create_namespaced_service_account(
        namespace, {"metadata": {"name": "nobody"}}
    )
    kubeconfig = token_kubeconfig(kube, namespace, "nobody", tmp_path / "nobody")
    with pytest.raises(ForbiddenError, match="read ValidatingWebhookConfiguration anything"):
        run_verify(kubeconfig, "anything", timeout=1)
    done = subprocess.run(
        [sys.executable, "-m", "gate", "webhook", "verify", "--kubeconfig", str(kubeconfig),
         "--configuration", "anything", "--timeout", "1s"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: read ValidatingWebhookConfiguration anything: forbidden")
    assert "Traceback" not in done.stderr
