"""Real Flux for end-to-end tests: kustomize-controller as a process against the dev cluster.

The deployer in these tests is Flux's own kustomize-controller, built from its pinned Go module by
scripts/build-binaries (component flux, tools/flux) and run here with ``KUBECONFIG`` (it has no
``--kubeconfig`` flag), leader election off and its metrics and health endpoints on free loopback
ports. It watches every namespace; each test makes its own namespace, GitRepository and
Kustomization.

No source-controller runs. A test builds a tarball from a dict of manifests, serves it from an
HTTP server on 127.0.0.1, and writes the GitRepository's status (the status subresource) as
source-controller would: an artifact whose url, revision and ``sha256:`` digest match the
tarball, and Ready=True. kustomize-controller reads only ``status.artifact`` (it never looks at
the source's Ready condition), downloads the url, refuses a digest that does not match, and
reconciles again whenever the artifact's revision changes. Serving a new revision is one status
patch, with no git server and no second controller whose timing the tests would also wait on.

The controller authenticates with the admin kubeconfig but impersonates (kubeconfig ``as``) the
service account it runs as in a real cluster, ``system:serviceaccount:flux-system:kustomize-
controller``, so the webhook sees Flux's requests exactly as a deployer's. That account is bound
to cluster-admin for as long as the controller runs.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import io
import json
import signal
import subprocess
import tarfile
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client

from . import kube as k
from .kube import Cluster
from .webhookserver import DEPLOYER, free_port

T = TypeVar("T")

SOURCE_GROUP, SOURCE_VERSION, GIT_REPOSITORIES = "source.toolkit.fluxcd.io", "v1", "gitrepositories"
KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, KUSTOMIZATIONS = (
    "kustomize.toolkit.fluxcd.io",
    "v1",
    "kustomizations",
)
#: A label kustomize-controller puts on what it applies (it prunes only what carries it).
OWNER_NAME = "kustomize.toolkit.fluxcd.io/name"
#: The Kustomization a Flux test applies its app with (the ``app`` fixture deletes it).
FLUX_APP = "app"


def _run_build_binaries(*args: str) -> str:
    out = subprocess.run(
        [str(k.BUILD_BINARIES), *args], check=True, stdout=subprocess.PIPE, text=True
    )
    return out.stdout


def controller_binary() -> str:
    """Path of the pinned kustomize-controller, built if missing."""
    return _run_build_binaries("path", "kustomize-controller").strip()


#: The CRDs kustomize-controller cannot start without: its own, and the source kinds it watches
#: (ExternalArtifact only behind a feature gate left off). HelmChart, HelmRepository: not needed.
NEEDED_CRDS = (
    "kustomize.toolkit.fluxcd.io_kustomizations.yaml",
    "source.toolkit.fluxcd.io_gitrepositories.yaml",
    "source.toolkit.fluxcd.io_ocirepositories.yaml",
    "source.toolkit.fluxcd.io_buckets.yaml",
)


def crd_files() -> list[Path]:
    """The CRDs it needs, from the same pinned modules as the binary (build-binaries crds)."""
    built = {Path(line).name: Path(line) for line in _run_build_binaries("crds").split()}
    missing = [name for name in NEEDED_CRDS if name not in built]
    assert not missing, f"scripts/build-binaries crds lists no {', '.join(missing)}"
    return [built[name] for name in NEEDED_CRDS]


# --------------------------------------------------------------------------------- artifacts


@dataclass(frozen=True)
class Artifact:
    """A tarball of manifests as the GitRepository's status names it."""

    file: str
    revision: str
    digest: str
    size: int


def pack(files: Mapping[str, str]) -> bytes:
    """A gzipped tarball of ``files`` (relative path -> text), byte-for-byte reproducible: the same
    manifests give the same digest and revision, as the same commit would."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            data = files[name].encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not worth a line each in the test output."""


class ArtifactServer:
    """Serves the tarballs of one directory over plain HTTP on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        handler = functools.partial(_QuietHandler, directory=str(root))
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def publish(self, label: str, files: Mapping[str, str]) -> Artifact:
        """Write ``files`` as a tarball and return what its GitRepository status must say.

        The revision has source-controller's form for a branch, ``<label>@sha1:<hex>``; the hex
        is the tarball's sha1, standing in for a commit id.
        """
        data = pack(files)
        sha1 = hashlib.sha1(data, usedforsecurity=False).hexdigest()
        name = f"{sha1}.tar.gz"
        (self.root / name).write_bytes(data)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return Artifact(name, f"{label}@sha1:{sha1}", digest, len(data))

    def url(self, artifact: Artifact) -> str:
        return f"http://127.0.0.1:{self.port}/{artifact.file}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


# -------------------------------------------------------------------------------- controller


def _impersonating_kubeconfig(admin: str, dest: Path) -> None:
    """The admin kubeconfig, acting as kustomize-controller's service account (``as``)."""
    doc = yaml.safe_load(Path(admin).read_text(encoding="utf-8"))
    for user in doc["users"]:
        user["user"]["as"] = DEPLOYER
    dest.write_text(yaml.safe_dump(doc), encoding="utf-8")
    dest.chmod(0o600)


def _unstick(ext: Any, live: Any) -> None:
    """Nudge a CRD stuck in deletion: kube-apiserver's CRD finalizer does not come back to a CRD
    whose instances it failed to list ("storage is (re)initializing", seen with a CRD deleted soon
    after it was made) until the CRD changes again. Any other state is left alone."""
    for condition in live.status.conditions or []:
        if condition.type == "Terminating" and condition.reason == "InstanceDeletionFailed":
            stamp = k.now().isoformat()
            ext.patch_custom_resource_definition(
                live.metadata.name,
                {"metadata": {"annotations": {"prune-gate.io/e2e-retry": stamp}}},
            )


def install_crds(kube: Cluster) -> list[str]:
    """Apply the pinned Flux CRDs (server-side) and wait until each is Established; return the
    names of those that did not exist before, which ``uninstall_crds`` removes again.

    Another module (test_cascades_live) serves a schemaless stand-in under the Kustomization's
    name and deletes it when done: a CRD still being deleted is waited out, one still there is
    overwritten (the real schema is what these tests are about).
    """
    ext: Any = client.ApiextensionsV1Api(kube.client)
    made = []
    for path in crd_files():
        name = yaml.safe_load(path.read_text(encoding="utf-8"))["metadata"]["name"]

        def absent_or_live(crd: str = name) -> str | None:
            try:
                live = ext.read_custom_resource_definition(crd)
            except client.ApiException as exc:
                if exc.status == 404:
                    return "absent"
                raise
            if live.metadata.deletion_timestamp is None:
                return "live"
            _unstick(ext, live)
            return None

        state = k.wait_for(absent_or_live, timeout=180, what=f"CRD {name} not being deleted")
        kube.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=prune-gate-e2e",
            "-f",
            str(path),
        )
        if state == "absent":
            made.append(name)

        def established(crd: str = name) -> bool:
            conditions = ext.read_custom_resource_definition(crd).status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        k.wait_for(established, timeout=180, what=f"CRD {name} established")
    return made


def uninstall_crds(kube: Cluster, names: list[str]) -> None:
    """Delete the CRDs ``install_crds`` made and wait until they are gone, so that a later module
    finds the cluster as it was."""
    ext: Any = client.ApiextensionsV1Api(kube.client)
    for name in names:
        k.delete_if_present(ext.delete_custom_resource_definition, name)

    def gone(crd: str) -> bool:
        try:
            live = ext.read_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        _unstick(ext, live)
        return False

    for name in names:
        k.wait_for(functools.partial(gone, name), timeout=180, interval=1, what=f"CRD {name} gone")


class Flux:
    """A running kustomize-controller, the artifact server it fetches from, and the objects the
    tests drive it with."""

    def __init__(self, kube: Cluster, workdir: Path) -> None:
        self.kube = kube
        self.workdir = workdir
        self.log = workdir / "kustomize-controller.log"
        self.server = ArtifactServer(workdir / "artifacts")
        #: typed as Any, like kube.core: the client's models make every field Optional
        self.custom: Any = client.CustomObjectsApi(kube.client)
        self._proc: subprocess.Popen[bytes] | None = None
        self._binding = f"prune-gate-e2e-flux-{uuid.uuid4().hex[:6]}"

    # -- the process

    def start(self) -> None:
        """Bind the deployer's account, start the controller, wait until its workers run."""
        namespace, name = DEPLOYER.split(":")[2:]
        k.bind_cluster_admin(self.kube.client, self._binding, namespace, name)
        kubeconfig = self.workdir / "kustomize-controller.kubeconfig"
        _impersonating_kubeconfig(self.kube.kubeconfig, kubeconfig)
        tmp = self.workdir / "tmp"  # its build dirs, and the stale ones it purges at start
        tmp.mkdir(exist_ok=True)
        health, metrics = free_port(), free_port()
        while metrics == health:
            metrics = free_port()
        argv = [
            controller_binary(),
            "--enable-leader-election=false",
            "--watch-all-namespaces=true",
            f"--metrics-addr=127.0.0.1:{metrics}",
            f"--health-addr=127.0.0.1:{health}",
            "--events-addr=",
            "--log-level=info",
            "--concurrent=2",
            "--requeue-dependency=2s",
        ]
        # No --kubeconfig flag (controller-runtime no longer registers one): KUBECONFIG it is.
        env = {
            "KUBECONFIG": str(kubeconfig),
            "PATH": "/usr/bin:/bin",
            "TMPDIR": str(tmp),
            "RUNTIME_NAMESPACE": namespace,
        }
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

        def started() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise AssertionError(
                    f"kustomize-controller exited {self._proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                    ready = r.status == 200
            except (OSError, urllib.error.URLError):
                return False
            return ready and '"Starting workers"' in self.log.read_text(errors="replace")

        self.wait(started, timeout=120, what="kustomize-controller to start its workers")

    def stop(self) -> None:
        """SIGTERM the controller (it must exit 0, and not before), drop the binding, stop
        serving."""
        try:
            if self._proc is not None:
                if self._proc.poll() is None:
                    self._proc.send_signal(signal.SIGTERM)
                    try:
                        self._proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        self._proc.kill()
                        self._proc.wait()
                        tail = self.log_tail()
                        raise AssertionError(
                            f"kustomize-controller ignored SIGTERM:\n{tail}"
                        ) from None
                if self._proc.returncode != 0:
                    raise AssertionError(
                        f"kustomize-controller exited {self._proc.returncode}:\n{self.log_tail()}"
                    )
        finally:
            rbac = client.RbacAuthorizationV1Api(self.kube.client)
            k.delete_if_present(rbac.delete_cluster_role_binding, self._binding)
            self.server.close()

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        """``kube.wait_for``, with the controller's log in the failure message."""
        try:
            return k.wait_for(predicate, timeout=timeout, what=what)
        except TimeoutError as exc:
            raise AssertionError(
                f"{exc}\n--- kustomize-controller log ({self.log}), last lines ---\n"
                f"{self.log_tail()}"
            ) from exc

    # -- sources

    def git_repository(self, namespace: str, name: str) -> None:
        """A GitRepository that no source-controller will ever fetch; ``serve`` sets its status."""
        body = {
            "apiVersion": f"{SOURCE_GROUP}/{SOURCE_VERSION}",
            "kind": "GitRepository",
            "metadata": {"name": name},
            "spec": {
                "interval": "1h",
                "url": f"http://127.0.0.1:{self.server.port}/{name}.git",
                "ref": {"branch": "main"},
            },
        }
        self.custom.create_namespaced_custom_object(
            SOURCE_GROUP, SOURCE_VERSION, namespace, GIT_REPOSITORIES, body
        )

    def serve(self, namespace: str, name: str, label: str, files: Mapping[str, str]) -> str:
        """Publish ``files`` as the GitRepository's artifact, as source-controller would after a
        fetch; return the revision kustomize-controller will apply."""
        artifact = self.server.publish(label, files)
        repo = self.custom.get_namespaced_custom_object(
            SOURCE_GROUP, SOURCE_VERSION, namespace, GIT_REPOSITORIES, name
        )
        stamp = k.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "observedGeneration": repo["metadata"]["generation"],
            "artifact": {
                "path": f"gitrepository/{namespace}/{name}/{artifact.file}",
                "url": self.server.url(artifact),
                "revision": artifact.revision,
                "digest": artifact.digest,
                "size": artifact.size,
                "lastUpdateTime": stamp,
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": f"stored artifact for revision '{artifact.revision}'",
                    "observedGeneration": repo["metadata"]["generation"],
                    "lastTransitionTime": stamp,
                }
            ],
        }
        # A merge patch (the client's default for a dict): artifact and conditions are replaced.
        self.custom.patch_namespaced_custom_object_status(
            SOURCE_GROUP, SOURCE_VERSION, namespace, GIT_REPOSITORIES, name, {"status": status}
        )
        return artifact.revision

    # -- kustomizations

    def kustomization(self, namespace: str, name: str, source: str, **spec: Any) -> None:
        """A Kustomization of ``source``'s root, pruning, applied into ``namespace``.

        ``deletionPolicy: Orphan`` so that deleting it after a test deletes nothing (the test's
        namespace teardown removes what it applied); pruning while it reconciles is unchanged.
        """
        body = {
            "apiVersion": f"{KUSTOMIZE_GROUP}/{KUSTOMIZE_VERSION}",
            "kind": "Kustomization",
            "metadata": {"name": name},
            "spec": {
                "interval": "10m",
                "retryInterval": "5s",
                "timeout": "1m",
                "path": "./",
                "prune": True,
                "wait": False,
                "deletionPolicy": "Orphan",
                "targetNamespace": namespace,
                "sourceRef": {"kind": "GitRepository", "name": source},
                **spec,
            },
        }
        self.custom.create_namespaced_custom_object(
            KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, namespace, KUSTOMIZATIONS, body
        )

    def read_kustomization(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, namespace, KUSTOMIZATIONS, name
        )
        return found

    def ready(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Kustomization's Ready condition, if it has one."""
        return ready_condition(self.read_kustomization(namespace, name))

    def wait_reconciled(
        self, namespace: str, name: str, revision: str, ready: bool, timeout: float = 180
    ) -> dict[str, Any]:
        """Wait until the Kustomization has finished an attempt at ``revision`` with Ready
        ``ready``; return its Ready condition. An attempt in progress (Ready Unknown) or at
        another revision does not count."""

        def settled() -> dict[str, Any] | None:
            obj = self.read_kustomization(namespace, name)
            status = obj.get("status") or {}
            condition = ready_condition(obj)
            if condition is None or status.get("lastAttemptedRevision") != revision:
                return None
            if not ready and status.get("lastAppliedRevision") == revision:
                # Applied: nothing changes now before the next interval (10m). Say so at once.
                raise AssertionError(
                    f"Kustomization {namespace}/{name} applied {revision}, expected a failure; "
                    f"its status: {json.dumps(status, indent=1)}\n"
                    f"--- kustomize-controller log ({self.log}), last lines ---\n"
                    f"{self.log_tail()}"
                )
            if condition.get("status") != ("True" if ready else "False"):
                return None
            if ready and status.get("lastAppliedRevision") != revision:
                return None
            return condition

        def describe() -> str:
            with contextlib.suppress(client.ApiException):
                return json.dumps(self.read_kustomization(namespace, name).get("status"), indent=1)
            return "(unreadable)"

        try:
            return k.wait_for(
                settled,
                timeout=timeout,
                what=f"Kustomization {namespace}/{name} Ready={ready} at {revision}",
            )
        except TimeoutError as exc:
            raise AssertionError(
                f"{exc}\nits status: {describe()}\n"
                f"--- kustomize-controller log ({self.log}), last lines ---\n{self.log_tail()}"
            ) from exc

    def inventory(self, namespace: str, name: str) -> list[str]:
        """The ids of ``status.inventory`` (``<namespace>_<name>_<group>_<Kind>``)."""
        status = self.read_kustomization(namespace, name).get("status") or {}
        entries = (status.get("inventory") or {}).get("entries") or []
        return [str(e["id"]) for e in entries]

    def delete_kustomization(self, namespace: str, name: str) -> None:
        """Delete it and wait until the controller has released its finalizer (Orphan: nothing
        it applied is deleted)."""
        k.delete_if_present(
            self.custom.delete_namespaced_custom_object,
            KUSTOMIZE_GROUP,
            KUSTOMIZE_VERSION,
            namespace,
            KUSTOMIZATIONS,
            name,
        )
        self.wait(
            lambda: k.gone(self.read_kustomization, namespace, name),
            timeout=180,
            what=f"Kustomization {namespace}/{name} gone",
        )


def ready_condition(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Ready condition of a Flux object, if it has one."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            found: dict[str, Any] = condition
            return found
    return None


@contextlib.contextmanager
def run_flux(kube: Cluster, workdir: Path) -> Iterator[Flux]:
    """Install the CRDs, run kustomize-controller for the duration, stop it cleanly and remove
    the CRDs it installed."""
    made = install_crds(kube)
    try:
        flux = Flux(kube, workdir)
        try:
            flux.start()
            yield flux
        finally:
            flux.stop()
    finally:
        uninstall_crds(kube, made)
