"""The incident with Argo CD as the deployer: real Argo CD (its application controller,
repo-server and ApplicationSet controller, built from its Go module) syncs a git repository
into the dev cluster, and the webhook stands between its prunes and the claims.

- An Application prunes a claim its revision no longer declares: the webhook refuses the
  DELETE from Argo CD's controller identity, the sync fails with the refusal's code, the claim
  stays; once the branch declares the claim again, the Application syncs clean.
- An ApplicationSet's git generator stops producing an Application (its directory is removed):
  the ApplicationSet controller deletes the Application, whose resources finalizer deletes what
  it deployed; the webhook refuses the claim, which stays, and the Application waits on its
  finalizer with the refusal in its conditions.
- The merge queue: a candidate removing a retired claim is deferred into an artifact that
  `gate argocd sync` has Argo CD sync under the speculation fence; the raw candidate's prune is
  refused while the fence is held; the merged revision prunes the claim.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.unit.helpers import GitRepo

from . import kube as k
from .argocd import FINALIZER, GROUP, IDENTITY, NAMESPACE, VERSION, ArgoCD, application, run_argocd
from .kube import Cluster
from .test_live import run_gate
from .webhookserver import (
    DEPLOYER,
    Webhook,
    cleanup_claims,
    delete_claim,
    deny,
    refusal_reason,
    serve_webhook,
    wait_refused,
)

CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: db-data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""
CONFIG = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: db-config}\ndata: {a: '1'}\n"


@pytest.fixture(scope="module")
def argo_webhook(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The webhook, with Argo CD's controller among the deployers it guards."""
    tmp = tmp_path_factory.mktemp("argo-webhook")
    policy = {"webhook": {"deployers": [DEPLOYER, IDENTITY]}}
    with serve_webhook(kube, tmp, policy_doc=policy) as hook:
        yield hook


@pytest.fixture(scope="module")
def argo(
    kube: Cluster, argo_webhook: Webhook, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ArgoCD]:
    yield from run_argocd(kube, tmp_path_factory.mktemp("argocd"))


@pytest.fixture
def clean_ns(kube: Cluster, namespace: str, argo_webhook: Webhook) -> Iterator[str]:
    """The test's namespace, emptied of claims (by the admin, whom the webhook lets by) once the
    test has forgotten its Applications, before the namespace fixture deletes it."""
    try:
        yield namespace
    finally:
        cleanup_claims(kube, namespace)


def claim_exists(kube: Cluster, namespace: str) -> bool:
    return not k.gone(
        k.core(kube.client).read_namespaced_persistent_volume_claim, "db-data", namespace
    )


def _forget(argo: ArgoCD, plural: str, name: str) -> None:
    """Delete an Argo CD object for good: its finalizer dropped, so no cascade is attempted."""
    live = argo.read(plural, name)
    if live is None:
        return
    if live["metadata"].get("finalizers"):
        patch = {"metadata": {"finalizers": None}}
        argo.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, name, patch)
    k.delete_if_present(
        argo.custom.delete_namespaced_custom_object, GROUP, VERSION, NAMESPACE, plural, name
    )
    argo.wait(lambda: argo.read(plural, name) is None, 60, f"{plural} {name} gone")


def test_a_refused_prune_fails_the_sync_and_keeps_the_claim(
    kube: Cluster, argo: ArgoCD, clean_ns: str, tmp_path: Path
) -> None:
    namespace = clean_ns
    repo = GitRepo(tmp_path / "repo")
    first = repo.commit({"apps/db/claim.yaml": CLAIM, "apps/db/config.yaml": CONFIG}, "base")
    name = k.unique("db")
    argo.apply("applications", application(name, repo.root, "apps/db", namespace, argo.server))
    try:

        def synced_to(revision: str) -> dict[str, Any] | None:
            app = argo.read("applications", name) or {}
            status = app.get("status") or {}
            sync = status.get("sync") or {}
            done = sync.get("status") == "Synced" and sync.get("revision") == revision
            return status if done else None

        argo.wait(lambda: synced_to(first), 180, f"Application {name} synced")
        assert claim_exists(kube, namespace)

        repo.commit({"apps/db/claim.yaml": None}, "the candidate drops the claim")
        argo.refresh(name)

        def refused() -> dict[str, Any] | None:
            app = argo.read("applications", name) or {}
            state = (app.get("status") or {}).get("operationState") or {}
            said = json.dumps(state)
            return (
                state
                if state.get("phase") in ("Failed", "Error") and "NOT_RETIRED" in said
                else None
            )

        state = argo.wait(refused, 180, "Argo CD's prune refused by the webhook")
        assert "prune-gate" in json.dumps(state), state
        assert claim_exists(kube, namespace), "the refused prune deleted nothing"

        # main no longer asks: the claim is declared again, and the next sync is clean
        restored = repo.commit({"apps/db/claim.yaml": CLAIM}, "the claim stays")
        argo.refresh(name)

        def clean() -> dict[str, Any] | None:
            # nothing is left to do: the live objects are the revision's, so it is Synced at it
            # without a new operation, and its health is its objects' (a Pending claim:
            # Progressing), no longer a failed sync's
            status = synced_to(restored)
            health = ((status or {}).get("health") or {}).get("status")
            return status if status is not None and health in ("Healthy", "Progressing") else None

        argo.wait(clean, 180, f"Application {name} synced clean again")
        assert claim_exists(kube, namespace)
    finally:
        _forget(argo, "applications", name)


APPSET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {{name: {name}, namespace: argocd}}
spec:
  goTemplate: true
  generators:
  - git:
      repoURL: file://{repo}
      revision: HEAD
      requeueAfterSeconds: 2
      directories: [{{path: 'workloads/*'}}]
  template:
    metadata: {{name: '{name}-{{{{ .path.basename }}}}'}}
    spec:
      project: default
      source: {{repoURL: 'file://{repo}', targetRevision: HEAD, path: '{{{{ .path.path }}}}'}}
      destination: {{server: '{server}', namespace: {namespace}}}
      syncPolicy:
        automated: {{prune: true}}
        retry: {{limit: 1, backoff: {{duration: 1s, factor: 1, maxDuration: 1s}}}}
"""


def test_an_application_set_that_drops_an_app_leaves_its_claim(
    kube: Cluster, argo: ArgoCD, clean_ns: str, tmp_path: Path
) -> None:
    namespace = clean_ns
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"workloads/db/claim.yaml": CLAIM, "workloads/web/config.yaml": CONFIG}, "base")
    name = k.unique("wl")
    body = yaml.safe_load(
        APPSET.format(name=name, repo=repo.root, server=argo.server, namespace=namespace)
    )
    argo.apply("applicationsets", body)
    app = f"{name}-db"
    try:

        def synced() -> bool:
            live = argo.read("applications", app) or {}
            sync = (live.get("status") or {}).get("sync") or {}
            return sync.get("status") == "Synced" and claim_exists(kube, namespace)

        argo.wait(synced, 180, f"Application {app}, generated, synced")
        generated = argo.read("applications", app) or {}
        assert FINALIZER in generated["metadata"].get("finalizers", []), generated["metadata"]

        repo.commit({"workloads/db/claim.yaml": None}, "the candidate drops the db directory")

        def refused() -> dict[str, Any] | None:
            live = argo.read("applications", app)
            if live is None or not live["metadata"].get("deletionTimestamp"):
                return None
            said = json.dumps((live.get("status") or {}).get("conditions") or [])
            return live if "NOT_RETIRED" in said else None

        live = argo.wait(refused, 240, "the generated Application's cascade refused")
        assert FINALIZER in live["metadata"]["finalizers"], "it waits on its finalizer"
        assert claim_exists(kube, namespace), "the refused cascade deleted nothing"
    finally:
        _forget(argo, "applicationsets", name)
        _forget(argo, "applications", app)
        _forget(argo, "applications", f"{name}-web")


def test_the_controller_deploys_as_its_own_identity(kube: Cluster, argo: ArgoCD) -> None:
    """The identity the webhook guards is the one Argo CD's requests carry: the cluster Secret's
    token is the controller's service account's."""
    review = client.AuthenticationV1Api(kube.client)
    secret = k.core(kube.client).read_namespaced_secret("dev-cluster", NAMESPACE)
    token = json.loads(base64.b64decode(secret.data["config"]))["bearerToken"]
    answer: Any = review.create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
    )
    assert answer.status.authenticated and answer.status.user.username == IDENTITY


# --- the merge queue, with Argo CD as the deployer ----------------------------------------------

RETIRED_CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: db-data
  annotations: {prune-gate.io/retire: "moved to the new database"}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"""


def _sync(argo: ArgoCD, name: str, revision: str, what: str) -> dict[str, Any]:
    """Sync `revision` with prune, as `argocd app sync --revision REV --prune` asks it (the
    operation argocd-server writes), and wait for it to end: its operationState."""
    nonce = k.unique("op")
    operation = {
        "initiatedBy": {"username": "e2e"},
        "info": [{"name": "e2e", "value": nonce}],
        "sync": {"revision": revision, "prune": True},
    }
    argo.custom.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "applications", name, {"operation": operation}
    )

    def ended() -> dict[str, Any] | None:
        state = ((argo.read("applications", name) or {}).get("status") or {}).get(
            "operationState"
        ) or {}
        ours = {"name": "e2e", "value": nonce} in (state.get("operation") or {}).get("info", [])
        return state if ours and state.get("phase") in ("Succeeded", "Failed", "Error") else None

    return argo.wait(ended, 180, what)


def test_the_merge_queue_defers_the_claim_into_what_argo_cd_syncs_under_the_fence(
    kube: Cluster, argo: ArgoCD, argo_webhook: Webhook, clean_ns: str, tmp_path: Path
) -> None:
    """Stage 2 of a retirement through the merge queue, Argo CD deploying: the speculative check
    defers the claim's deletion into an artifact, `gate argocd sync` has Argo CD sync it (the
    candidate's change, the claim kept) while CI holds the fence; the raw candidate synced
    under the fence prunes nothing (SPECULATION_FENCE); once merged, the fence released, the
    same sync prunes the claim, and only then."""
    namespace = clean_ns
    repo = GitRepo(tmp_path / "repo")
    name = k.unique("queue")
    app = application(name, repo.root, "apps/db", namespace, argo.server, finalizer=False)
    del app["spec"]["syncPolicy"]["automated"]  # CI syncs it: Argo CD syncs local manifests then
    extra = CONFIG.replace("db-config", "db-extra")
    files = {"deploy/app.yaml": yaml.safe_dump(app), "apps/db/config.yaml": CONFIG}
    stage1 = repo.commit(
        {**files, "apps/db/claim.yaml": RETIRED_CLAIM, "apps/db/extra.yaml": extra}, "stage 1"
    )
    candidate = repo.commit(
        {
            "apps/db/claim.yaml": None,
            "apps/db/extra.yaml": None,
            "apps/db/config.yaml": CONFIG.replace("'1'", "'2'"),
        },
        "stage 2: the retired claim goes, and a ConfigMap",
    )
    argo.apply("applications", app)
    core = k.core(kube.client)
    lease = f"{argo_webhook.fence_namespace}/{argo_webhook.fence_name}"

    def gate(*args: str) -> subprocess.CompletedProcess[str]:
        return run_gate(tmp_path, *args)

    def check(context: str, *extra: str) -> dict[str, Any]:
        done = gate(
            "check",
            f"--repo={repo.root}",
            f"--base={stage1}",
            f"--head={candidate}",
            "--argocd-root=deploy/app.yaml",
            f"--argocd-repo=file://{repo.root}",
            f"--context={context}",
            "--format=json",
            *extra,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    def config_value() -> str:
        return str(core.read_namespaced_config_map("db-config", namespace).data["a"])

    try:
        state = _sync(argo, name, stage1, "stage 1 synced")
        assert state["phase"] == "Succeeded", state
        uid = core.read_namespaced_persistent_volume_claim("db-data", namespace).metadata.uid

        out = tmp_path / "speculative"
        report = check("speculative", f"--defer-to={out}")
        assert report["verdict"] == "defer", report
        found = {(f["code"], f["object"]["name"]) for f in report["findings"]}
        assert ("SPECULATIVE_PRUNE", "db-data") in found, report["findings"]
        part = out / "argocd" / NAMESPACE / f"{name}.yaml"
        objects = {o["kind"]: o for o in yaml.safe_load_all(part.read_text(encoding="utf-8"))}
        assert objects["ConfigMap"]["data"] == {"a": "2"}  # the candidate's change
        assert objects["PersistentVolumeClaim"]["metadata"]["name"] == "db-data"  # kept

        held = gate("fence", "hold", "--holder", candidate, "--lease", lease, kubeconfig(kube))
        assert held.returncode == 0, held.stderr
        controller = kube.impersonating(IDENTITY)
        try:
            refused = wait_refused(
                delete_claim(controller, namespace, "db-data", dry_run=True),
                "the webhook to obey the fence",
            )
            assert refusal_reason(refused)[0] == "SPECULATION_FENCE", refusal_reason(refused)
            # a hang guard above the command's own --timeout (300 s), not a speed target
            synced = run_gate(tmp_path, "argocd", "sync", str(out), kubeconfig(kube), timeout=600)
            assert synced.returncode == 0, synced.stdout + synced.stderr
            assert f"Application {NAMESPACE}/{name}: Succeeded" in synced.stdout, synced.stdout
            assert "1 synced, 0 failed, 0 skipped" in synced.stdout, synced.stdout
            assert config_value() == "2"
            assert (
                core.read_namespaced_persistent_volume_claim("db-data", namespace).metadata.uid
                == uid
            )
            live = argo.read("applications", name) or {}
            operation = live["status"]["operationState"]["operation"]
            assert operation["initiatedBy"]["username"] == "prune-gate"
            # a sync without prune, its artifact taken out of the record once it ended (the
            # next operation's state is merged over it)
            assert operation["sync"].get("prune") is not True, operation
            assert "manifests" not in operation["sync"], operation
            # without pruning: what the candidate drops and nothing defers stays until the merge
            assert not k.gone(core.read_namespaced_config_map, "db-extra", namespace)

            # marked as the Application's, as a local sync's manifests are: still its to prune
            claim = core.read_namespaced_persistent_volume_claim("db-data", namespace)
            tracking = claim.metadata.annotations["argocd.argoproj.io/tracking-id"]
            assert tracking == f"{name}:/PersistentVolumeClaim:{namespace}/db-data", tracking
            # What the fence is for: the raw candidate, synced while it is held, prunes nothing.
            state = _sync(argo, name, candidate, "the raw candidate's sync refused")
            assert state["phase"] in ("Failed", "Error"), state
            assert "SPECULATION_FENCE" in json.dumps(state), state
            assert (
                core.read_namespaced_persistent_volume_claim("db-data", namespace).metadata.uid
                == uid
            )
        finally:
            released = gate(
                "fence", "release", "--holder", candidate, "--lease", lease, kubeconfig(kube)
            )
        assert released.returncode == 0, released.stderr

        # Merged: checked again, allowed; the fence released, Argo CD prunes the claim now.
        assert check("merged")["verdict"] == "allow"
        argo.wait(
            lambda: deny(delete_claim(controller, namespace, "db-data", dry_run=True)) is None,
            60,
            "the webhook to see the fence released",
        )
        state = _sync(argo, name, candidate, "the merged revision synced")
        assert state["phase"] == "Succeeded", state
        argo.wait(lambda: not claim_exists(kube, namespace), 120, "the claim pruned")
    finally:
        _forget(argo, "applications", name)


def kubeconfig(kube: Cluster) -> str:
    return f"--kubeconfig={kube.kubeconfig}"
