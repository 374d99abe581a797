"""The deferred artifact deployed as the docs say (docs/merge-queue.md), against the real API
server and the real kustomize-controller (issue 32, items 4 and 5).

Item 5: the docs' deploy command, word for word, applies `DIR` (a record in it with no
apiVersion and kind once stopped `kubectl apply -R -f DIR`).

Item 4: with `--flux-root`, `DIR` holds Flux Kustomizations too. The deploy command applies them,
and kustomize-controller then builds each one from its source, which the cluster follows at base
until the merge (a GitRepository on main). A Kustomization written as the candidate has it builds
base's files with the candidate's spec: re-pointed (`spec.path`), patched, chained through a
parent's patches, new, or fed the candidate's ConfigMap of postBuild variables, it prunes or
force-replaces the claim the artifact keeps. Each case
here is a repository in git (what `gate check` reads) whose base tree is also what the
GitRepository serves: Flux applies base, `gate check --defer-to` writes the artifact of the
candidate, the docs' command applies it, every Kustomization reconciles (asked to, in chain
order, and waited for), and the claim must be the one base made: same uid, not being deleted.

kustomize-controller runs as a process (``flux`` fixture, see ``flux.py``); no webhook runs, so
nothing but the artifact stands between Flux and the claim.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.unit.helpers import GitRepo
from tests.unit.test_defer_to import REPOINT_APPS
from tests.unit.test_flux_roots import DROP as DROP_CLAIM

from . import kube as k
from .flux import KUSTOMIZATIONS, KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, OWNER_NAME, Flux
from .kube import Cluster
from .test_flux_prune import claim_yaml
from .test_live import run_gate
from .webhookserver import RETIRE

pytestmark = pytest.mark.e2e

PAGE = Path(__file__).resolve().parents[2] / "docs" / "merge-queue.md"
SOURCE, CLAIM, SETTINGS = "repo", "data", "settings"
REASON = "moved to data-v2"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


def docs_deploy_command(directory: Path) -> list[str]:
    """The deploy command of the docs' `--defer-to` section, word for word, on `directory`
    (the docs name it `out/speculative`)."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Deferring through the merge queue: `--defer-to`")
    section = text[start : text.index("\n## ", start)]
    (line,) = [ln for ln in section.splitlines() if ln.startswith("kubectl apply")]
    words = shlex.split(line)
    assert words[-1] == "out/speculative", line
    return [*words[:-1], str(directory)]


def deploy(kube: Cluster, directory: Path) -> subprocess.CompletedProcess[str]:
    """Run the docs' deploy command with the pinned kubectl, as the cluster's admin."""
    argv = docs_deploy_command(directory)
    assert argv[0] == "kubectl"
    env = {**os.environ, "KUBECONFIG": kube.kubeconfig}
    return subprocess.run(
        [kube.binary("kubectl"), *argv[1:]], env=env, capture_output=True, text=True, check=False
    )


def settings_yaml(value: str, namespace: str = "") -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {SETTINGS}{ns}\n"
        f"data:\n  value: {value}\n"
    )


def read_claim(kube: Cluster, ns: str) -> Any:
    return k.core(kube.client).read_namespaced_persistent_volume_claim(CLAIM, ns)


def claim_state(kube: Cluster, ns: str) -> tuple[str, object]:
    """(uid, deletionTimestamp) of the claim, or ("gone", None)."""
    try:
        claim = read_claim(kube, ns)
    except ApiException as exc:
        if exc.status == 404:
            return "gone", None
        raise
    return str(claim.metadata.uid), claim.metadata.deletion_timestamp


def test_the_docs_deploy_command_applies_the_artifact(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Rendered mode: a candidate that removes a retired claim is deferred into DIR, and the
    docs' command applies DIR as it is: the candidate's change lands, the claim stays."""
    ns = namespace
    claim = claim_yaml(REASON).replace(f"name: {CLAIM}\n", f"name: {CLAIM}\n  namespace: {ns}\n")
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    (base / "app.yaml").write_text(settings_yaml("v1", ns) + "---\n" + claim, encoding="utf-8")
    (head / "app.yaml").write_text(settings_yaml("v2", ns), encoding="utf-8")
    out = tmp_path / "out" / "speculative"
    done = run_gate(
        tmp_path, "check", f"--base-manifests={base}", f"--head-manifests={head}",
        "--context=speculative", f"--defer-to={out}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    applied = deploy(kube, out)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    core = k.core(kube.client)
    assert core.read_namespaced_config_map(SETTINGS, ns).data == {"value": "v2"}
    assert read_claim(kube, ns).metadata.annotations[RETIRE] == REASON
    record = json.loads(Path(f"{out}.deferred.json").read_text(encoding="utf-8"))
    assert [e["object"]["name"] for e in record["kept"]] == [CLAIM]


# --- Flux ---------------------------------------------------------------------------------------


def kustomization(name: str, ns: str, path: str, extra: str = "") -> str:
    """A Kustomization of this repository (GitRepository `repo`) that prunes, and orphans what it
    applied when deleted (so the test's clean-up deletes nothing)."""
    return f"""\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {name}
  namespace: {ns}
spec:
  interval: 10m
  retryInterval: 5s
  timeout: 1m
  path: {path}
  prune: true
  wait: false
  deletionPolicy: Orphan
  sourceRef:
    kind: GitRepository
    name: {SOURCE}
{extra}"""


def target(ns: str) -> str:
    return f"  targetNamespace: {ns}\n"


#: A patch that changes an immutable field of the claim, with force: Flux deletes and recreates.
REPLACE_CLAIM = """\
  force: true
  patches:
    - target: {kind: PersistentVolumeClaim}
      patch: |
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata: {name: any}
        spec: {accessModes: [ReadWriteMany]}
"""


#: The shapes of main: apps under root; apps under infra under root (a chain of three); apps
#: under root, naming the claim from a ConfigMap's variable (postBuild.substituteFrom).
FLAT, NESTED, VARS = "flat", "nested", "vars"
SUBSTITUTE_FROM = "  postBuild:\n    substituteFrom:\n      - {kind: ConfigMap, name: vars}\n"


def vars_yaml(ns: str, claim: str) -> str:
    return settings_yaml("x", ns).replace(SETTINGS, "vars").replace("value: x", f"CLAIM: {claim}")


def base_tree(ns: str, shape: str) -> dict[str, str | None]:
    """main: the entry point's own Kustomization (root), apps (through infra in NESTED) with a
    retired claim, and a staging directory next to it."""
    apps = kustomization("apps", ns, "./apps/prod", target(ns))
    tree: dict[str, str | None] = {
        "clusters/prod/root.yaml": kustomization("root", ns, "./clusters/prod"),
        "apps/prod/claim.yaml": claim_yaml(REASON),
        "apps/prod/settings.yaml": settings_yaml("prod"),
        "apps/staging/settings.yaml": settings_yaml("staging"),
    }
    if shape == NESTED:
        tree["clusters/prod/infra.yaml"] = kustomization("infra", ns, "./infra")
        tree["infra/apps.yaml"] = apps
    elif shape == VARS:
        tree["clusters/prod/apps.yaml"] = apps + SUBSTITUTE_FROM
        tree["clusters/prod/vars.yaml"] = vars_yaml(ns, CLAIM)
        tree["apps/prod/claim.yaml"] = claim_yaml(REASON).replace(
            f"name: {CLAIM}", "name: ${CLAIM}"
        )
    else:
        tree["clusters/prod/apps.yaml"] = apps
    return tree


#: Each attack: (the shape of main, the candidate's change, the verdict gate gives it).
ATTACKS: dict[str, tuple[str, Callable[[str], dict[str, str | None]], str]] = {
    "apps re-pointed (spec.path)": (
        FLAT,
        lambda ns: {
            "clusters/prod/apps.yaml": kustomization("apps", ns, "./apps/staging", target(ns))
        },
        "defer",
    ),
    "apps' patches only ($patch: delete)": (
        FLAT,
        lambda ns: {
            "clusters/prod/apps.yaml": kustomization(
                "apps", ns, "./apps/prod", target(ns) + DROP_CLAIM
            )
        },
        "defer",
    ),
    "a chain of three: infra's patches re-point apps": (
        NESTED,
        lambda ns: {
            "clusters/prod/infra.yaml": kustomization("infra", ns, "./infra", REPOINT_APPS)
        },
        "defer",
    ),
    "apps' path moves with its files (nothing deferred)": (
        FLAT,
        lambda ns: {
            "clusters/prod/apps.yaml": kustomization("apps", ns, "./apps/staging", target(ns)),
            "apps/prod/claim.yaml": None,
            "apps/staging/claim.yaml": claim_yaml(REASON),
        },
        "allow",
    ),
    "the claim's file removed, a new Kustomization takes its directory with force": (
        FLAT,
        lambda ns: {
            "apps/prod/claim.yaml": None,
            "clusters/prod/db.yaml": kustomization(
                "db", ns, "./apps/prod", target(ns) + REPLACE_CLAIM
            ),
        },
        "defer",
    ),
    "the postBuild variables apps reads renamed (the ConfigMap only)": (
        VARS,
        lambda ns: {"clusters/prod/vars.yaml": vars_yaml(ns, f"{CLAIM}-v2")},
        "defer",
    ),
}


def tree_files(repo: GitRepo) -> dict[str, str]:
    """Every file of the repository's work tree (what the GitRepository serves)."""
    out = {}
    for path in sorted(repo.root.rglob("*")):
        rel = path.relative_to(repo.root).as_posix()
        if path.is_file() and not rel.startswith(".git/"):
            out[rel] = path.read_text(encoding="utf-8")
    return out


def request_reconcile(flux: Flux, ns: str, name: str) -> bool:
    """Ask the Kustomization to reconcile now and wait until it has (its Ready condition for its
    current generation, after the request); False when it does not exist."""
    token = k.unique("now")
    try:
        flux.custom.patch_namespaced_custom_object(
            KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, ns, KUSTOMIZATIONS, name,
            {"metadata": {"annotations": {REQUESTED_AT: token}}},
        )  # fmt: skip
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise

    def handled() -> bool:
        obj = flux.read_kustomization(ns, name)
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
        return (
            status.get("lastHandledReconcileAt") == token
            and ready is not None
            and ready["status"] in ("True", "False")
            and status.get("observedGeneration") == obj["metadata"]["generation"]
        )

    flux.wait(handled, timeout=180, what=f"Kustomization {ns}/{name} to reconcile")
    return True


def exists(flux: Flux, ns: str, name: str) -> bool:
    return not k.gone(flux.read_kustomization, ns, name)


@pytest.fixture
def flux_ns(flux: Flux, namespace: str) -> Iterator[str]:
    """The test's namespace; its Kustomizations (all Orphan) are deleted before it is."""
    try:
        yield namespace
    finally:
        for name in ("root", "infra", "db", "apps"):
            flux.delete_kustomization(namespace, name)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_applying_the_artifact_keeps_the_claim_flux_would_prune(
    kube: Cluster, flux: Flux, flux_ns: str, tmp_path: Path, attack: str
) -> None:
    ns = flux_ns
    shape, change, verdict = ATTACKS[attack]
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(base_tree(ns, shape), "main")
    main = tree_files(repo)
    head = repo.commit(change(ns), "candidate")

    # main, applied by Flux: the root Kustomization applies itself and the chain below it.
    flux.git_repository(ns, SOURCE)
    revision = flux.serve(ns, SOURCE, "main", main)
    root = yaml.safe_load(main["clusters/prod/root.yaml"])
    flux.custom.create_namespaced_custom_object(
        KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, ns, KUSTOMIZATIONS, root
    )
    for name in ("root", "infra", "apps") if shape == NESTED else ("root", "apps"):
        flux.wait(
            functools.partial(exists, flux, ns, name),
            timeout=120,
            what=f"Kustomization {ns}/{name} applied by its parent",
        )
        flux.wait_reconciled(ns, name, revision, ready=True)
    claim = read_claim(kube, ns)
    assert claim.metadata.labels[OWNER_NAME] == "apps"  # Flux applied it
    uid = claim.metadata.uid

    # The speculative check writes the artifact; the docs' command applies it.
    out = tmp_path / "out" / "speculative"
    done = run_gate(
        repo.root, "check", f"--base={base}", f"--head={head}", "--flux-root=clusters/prod",
        "--context=speculative", "--format=json", f"--defer-to={out}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["verdict"] == verdict, done.stdout
    applied = deploy(kube, out)
    assert applied.returncode == 0, applied.stdout + applied.stderr

    # Every Kustomization the artifact holds reconciles what it now says, parents first. Not
    # root: its reconcile re-applies main's Kustomizations over whatever the artifact wrote, and
    # would only hide what the artifact did (it runs at its interval, not at once).
    for name in ("infra", "apps", "db"):
        request_reconcile(flux, ns, name)
    found = claim_state(kube, ns)
    assert found == (uid, None), (
        f"claim {ns}/{CLAIM}: uid {found[0]} (main made {uid}), deletionTimestamp {found[1]}\n"
        f"--- kustomize-controller log ({flux.log}), last lines ---\n{flux.log_tail()}"
    )
    assert read_claim(kube, ns).metadata.annotations[RETIRE] == REASON
    assert flux.read_kustomization(ns, "apps")["spec"]["path"] == "./apps/prod"
