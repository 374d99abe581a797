"""Real Argo CD for end-to-end tests: its application controller, repo-server and ApplicationSet
controller as processes against the dev cluster, with Redis from Debian's packages.

Argo CD's one binary is built from its pinned Go module by scripts/build-binaries (component
argocd, tools/argocd) and run under each component's name (`ARGOCD_BINARY_NAME`). The
repo-server renders from a git repository on disk (`file://` URLs: git itself fetches them, no
git server runs); the tests commit to it and ask for a hard refresh (the annotation Argo CD's git
webhooks set), so a new revision is seen at once rather than after the revision cache expires.

The controller reads Applications with the admin kubeconfig and deploys to the dev cluster as a
cluster Secret declares it: with a token of the service account it runs as in a real cluster,
`system:serviceaccount:argocd:argocd-application-controller`, bound to cluster-admin, so the
webhook sees Argo CD's requests exactly as a deployer's. Destinations name that cluster by its
server URL (`server`).

Redis: `redis-server` on PATH, else Debian's packages (`apt-get download`, unpacked into
~/.cache/prune-gate/deb/redis, run with their libraries beside them; `apt-get update` first when
the lists are missing, as root).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .webhookserver import free_port

T = TypeVar("T")

NAMESPACE = "argocd"
CONTROLLER_SA = "argocd-application-controller"
IDENTITY = f"system:serviceaccount:{NAMESPACE}:{CONTROLLER_SA}"
GROUP, VERSION = "argoproj.io", "v1alpha1"
FINALIZER = "resources-finalizer.argocd.argoproj.io"
CACHE = Path(os.environ.get("PRUNE_GATE_CACHE") or Path.home() / ".cache" / "prune-gate")
#: A failed sync is tried once more, a second later, then left Failed: the tests see its end
#: rather than a backoff of minutes (Argo CD retries automated syncs by default).
ONE_QUICK_RETRY = {"limit": 1, "backoff": {"duration": "1s", "factor": 1, "maxDuration": "1s"}}
REDIS_PACKAGES = ("redis-server", "redis-tools", "liblzf1", "libjemalloc2")


def argocd_binary() -> str:
    out = subprocess.run(
        [str(k.BUILD_BINARIES), "path", "argocd"], check=True, stdout=subprocess.PIPE, text=True
    )
    return out.stdout.strip()


def redis_command() -> tuple[list[str], dict[str, str]]:
    """How to run redis-server: its argv and the environment it needs."""
    found = shutil.which("redis-server")
    if found:
        return [found], {}
    root = CACHE / "deb" / "redis"
    server = root / "usr" / "bin" / "redis-server"
    if not server.exists():
        _unpack_debian(REDIS_PACKAGES, root)
    libs = root / "usr" / "lib" / "x86_64-linux-gnu"
    return [str(server)], {"LD_LIBRARY_PATH": str(libs)}


def _unpack_debian(packages: tuple[str, ...], root: Path) -> None:
    """`apt-get download` the packages and unpack them (no install) into `root`."""
    with tempfile.TemporaryDirectory() as tmp:
        fetch = ["apt-get", "download", *packages]
        done = subprocess.run(fetch, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0 and os.geteuid() == 0:
            subprocess.run(["apt-get", "update"], capture_output=True, check=False)
            done = subprocess.run(fetch, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AssertionError(f"apt-get download {' '.join(packages)} failed: {done.stderr}")
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(deb), str(partial)], check=True)
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)


class ArgoCD:
    """A running Argo CD (Redis, repo-server, application controller, ApplicationSet
    controller) and the cluster objects it needs."""

    def __init__(self, kube: Cluster, workdir: Path) -> None:
        self.kube = kube
        self.workdir = workdir
        self.custom: Any = client.CustomObjectsApi(kube.client)
        self.core: Any = client.CoreV1Api(kube.client)
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.server = ""
        #: The CRDs this run installed (absent before): removed again at stop.
        self._made: list[str] = []
        self._binding = f"prune-gate-e2e-argocd-{k.unique('b')}"

    # -- the processes

    def start(self) -> None:
        binary = argocd_binary()
        self._install(Path(binary).parent)
        redis_argv, redis_env = redis_command()
        redis = free_port()
        self._spawn(
            "redis",
            [*redis_argv, "--port", str(redis), "--bind", "127.0.0.1", "--save", ""],
            redis_env,
        )
        repo_port, repo_metrics, metrics, appset_metrics, probe = (free_port() for _ in range(5))
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        path = os.pathsep.join([str(Path(self.kube.binary("helm")).parent), "/usr/bin", "/bin"])
        env = {
            "HOME": str(home),
            "ARGOCD_GPG_ENABLED": "false",
            "PATH": path,
            "KUBECONFIG": self.kube.kubeconfig,  # controller-runtime's flag is not registered
        }
        self._spawn(
            "argocd-repo-server",
            [binary, "--disable-tls", "--address", "127.0.0.1", "--port", str(repo_port),
             "--metrics-port", str(repo_metrics), "--redis", f"127.0.0.1:{redis}",
             "--revision-cache-expiration", "1s"],
            {**env, "ARGOCD_BINARY_NAME": "argocd-repo-server"},
        )  # fmt: skip
        common = ["--kubeconfig", self.kube.kubeconfig, "-n", NAMESPACE]
        self._spawn(
            "argocd-application-controller",
            [binary, *common, "--repo-server", f"127.0.0.1:{repo_port}", "--repo-server-plaintext",
             "--redis", f"127.0.0.1:{redis}", "--metrics-port", str(metrics),
             "--app-resync", "5", "--app-resync-jitter", "0",
             "--self-heal-timeout-seconds", "1"],
            {**env, "ARGOCD_BINARY_NAME": "argocd-application-controller"},
        )  # fmt: skip
        self._spawn(
            "argocd-applicationset-controller",
            [binary, *common, "--argocd-repo-server", f"127.0.0.1:{repo_port}",
             "--repo-server-plaintext", "--metrics-addr", f"127.0.0.1:{appset_metrics}",
             "--probe-addr", f"127.0.0.1:{probe}", "--enable-leader-election=false"],
            {**env, "ARGOCD_BINARY_NAME": "argocd-applicationset-controller"},
        )  # fmt: skip

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str]) -> None:
        with (self.workdir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append((name, proc))

    def check_running(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        rbac = client.RbacAuthorizationV1Api(self.kube.client)
        k.delete_if_present(rbac.delete_cluster_role_binding, self._binding)
        self._uninstall()

    def _uninstall(self) -> None:
        """Remove what `_install` made, so that later modules find the cluster as it was: the
        Argo CD objects left (their finalizers dropped: no controller runs now), the CRDs this
        run installed, the argocd namespace."""
        for plural in ("applications", "applicationsets", "appprojects"):
            if f"{plural}.{GROUP}" not in self._made:
                continue

            def remaining(kind: str = plural) -> list[str]:
                listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, kind)[
                    "items"
                ]
                return [item["metadata"]["name"] for item in listed]

            for name in remaining():
                no_finalizers = {"metadata": {"finalizers": None}}
                self.custom.patch_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, plural, name, no_finalizers
                )
                k.delete_if_present(
                    self.custom.delete_namespaced_custom_object,
                    GROUP, VERSION, NAMESPACE, plural, name,
                )  # fmt: skip
            k.wait_for(lambda r=remaining: not r(), timeout=60, what=f"{plural} gone")  # type: ignore[misc]
        ext: Any = client.ApiextensionsV1Api(self.kube.client)
        crds = [n for n in self._made if n != "namespace"]
        for name in crds:
            k.delete_if_present(ext.delete_custom_resource_definition, name)
        for name in crds:
            k.wait_for(
                lambda n=name: k.gone(ext.read_custom_resource_definition, n),  # type: ignore[misc]
                timeout=120,
                interval=0.5,
                what=f"CRD {name} gone",
            )
        if "namespace" in self._made:
            k.delete_if_present(self.core.delete_namespace, NAMESPACE)

    # -- the cluster objects

    def _install(self, crds: Path) -> None:
        ext: Any = client.ApiextensionsV1Api(self.kube.client)
        for plural in ("applications", "applicationsets", "appprojects"):
            if k.gone(ext.read_custom_resource_definition, f"{plural}.{GROUP}"):
                self._made.append(f"{plural}.{GROUP}")
        for crd in sorted(crds.glob("*-crd.yaml")):
            self.kube.kubectl(
                "apply", "--server-side", "--force-conflicts", "--field-manager=prune-gate-e2e",
                "-f", str(crd),
            )  # fmt: skip
        for plural in ("applications", "applicationsets", "appprojects"):

            def established(name: str = f"{plural}.{GROUP}") -> bool:
                conditions = ext.read_custom_resource_definition(name).status.conditions or []
                return any(c.type == "Established" and c.status == "True" for c in conditions)

            k.wait_for(established, timeout=120, what=f"CRD {plural} established")
        if k.gone(self.core.read_namespace, NAMESPACE):
            self._made.append("namespace")
            self.core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
            )
        part_of = {"app.kubernetes.io/part-of": "argocd"}  # what Argo CD's settings watch
        for name in ("argocd-cm", "argocd-cmd-params-cm", "argocd-rbac-cm"):
            self._ensure(
                self.core.create_namespaced_config_map,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=part_of)),
            )
        secret_key = base64.b64encode(os.urandom(24)).decode()
        self._ensure(
            self.core.create_namespaced_secret,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="argocd-secret", labels=part_of),
                string_data={"server.secretkey": secret_key},
            ),
        )
        project = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"namespace": "*", "server": "*"}],
                "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
            },
        }
        self._ensure_custom("appprojects", project)
        self._cluster_secret()

    def _ensure(self, create: Callable[..., Any], body: Any) -> None:
        try:
            create(NAMESPACE, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def _ensure_custom(self, plural: str, body: dict[str, Any]) -> None:
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def _cluster_secret(self) -> None:
        """The dev cluster as Argo CD's destination, reached with the controller's own token."""
        self._ensure(
            self.core.create_namespaced_service_account,
            client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=CONTROLLER_SA)),
        )
        k.bind_cluster_admin(self.kube.client, self._binding, NAMESPACE, CONTROLLER_SA)
        token = self.kube.kubectl(
            "-n", NAMESPACE, "create", "token", CONTROLLER_SA, "--duration=6h"
        ).stdout.strip()
        config = yaml.safe_load(Path(self.kube.kubeconfig).read_text(encoding="utf-8"))
        cluster = config["clusters"][0]["cluster"]
        self.server = cluster["server"]
        tls = {"caData": cluster["certificate-authority-data"]}
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="dev-cluster",
                labels={"argocd.argoproj.io/secret-type": "cluster"},
            ),
            string_data={
                "name": "dev",
                "server": self.server,
                "config": json.dumps({"bearerToken": token, "tlsClientConfig": tls}),
            },
        )
        k.delete_if_present(self.core.delete_namespaced_secret, "dev-cluster", NAMESPACE)
        self.core.create_namespaced_secret(NAMESPACE, body)

    # -- what the tests drive

    def apply(self, plural: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        k.delete_if_present(
            self.custom.delete_namespaced_custom_object, GROUP, VERSION, NAMESPACE, plural, name
        )
        k.wait_for(
            lambda: self.read(plural, name) is None, timeout=60, what=f"{plural} {name} gone"
        )
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)

    def read(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, plural, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def refresh(self, name: str) -> None:
        """Ask for a hard refresh, as a git webhook would: the new revision is read at once."""
        patch = {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "hard"}}}
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "applications", name, patch
        )

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        def checked() -> T | None:
            self.check_running()
            return predicate()

        try:
            return k.wait_for(checked, timeout=timeout, interval=0.5, what=what)
        except TimeoutError as exc:
            logs = "\n".join(
                f"--- {n}\n{self.log_tail(n, 15)}" for n, _ in self.procs if n != "redis"
            )
            raise AssertionError(f"{exc}\n{logs}") from None


def application(
    name: str,
    repo: Path,
    path: str,
    namespace: str,
    server: str,
    *,
    finalizer: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Application",
        "metadata": meta,
        "spec": {
            "project": "default",
            "source": {"repoURL": f"file://{repo}", "targetRevision": "HEAD", "path": path},
            "destination": {"server": server, "namespace": namespace},
            "syncPolicy": {"automated": {"prune": True}, "retry": ONE_QUICK_RETRY},
        },
    }


def run_argocd(kube: Cluster, workdir: Path) -> Iterator[ArgoCD]:
    argo = ArgoCD(kube, workdir)
    try:
        argo.start()
        yield argo
    finally:
        argo.stop()
