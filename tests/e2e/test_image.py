"""The webhook's image, without a container engine: its files made by the Dockerfile's recipe
(scripts/image-rootfs), served from them as the image's user on a read-only root, against the real
control plane.

What a container would give is made by hand, as root (or through `sudo -n` when the tests run as
another user, as on CI):

- a mount namespace (`unshare --mount`) in which `/` is read-only, the recipe's output is mounted
  read-only, and a tmpfs holds TMPDIR (the chart's emptyDir on /tmp) and the files the chart
  mounts (the serving certificate, prune-gate.yaml) plus a kubeconfig, readable by the user only;
- `setpriv`: the Dockerfile's USER (uid and gid 65532), no supplementary groups, no capabilities
  and no_new_privs, as the chart's securityContext;
- `env -i`: the environment of the Dockerfile's last stage (its paths moved to where the files
  are), the chart's env, HOME=/ and nothing else; the working directory is /;
- the Dockerfile's ENTRYPOINT and CMD, with the mounted paths and the ports moved to the test's.

The Python is the machine's, one the user can run: the recipe is run with it and it runs the
console script, as the base image's Python does in the image. What the Dockerfile's last stage
adds besides the recipe's output is nothing (tests/unit/test_dockerfile.py checks that).

The recipe's output is kept in the cache (~/.cache/prune-gate/image-rootfs/KEY), keyed on the
recipe, the sources it builds from and the Python; a change to any of them builds it again
(about a minute: pip resolves the dependencies afresh, through its own cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import runpy
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests import dockerfile as df
from tests.ci import ci
from webhook import tls

from . import kube as k
from .kube import Cluster
from .webhookserver import DEPLOYER, free_port

pytestmark = pytest.mark.e2e

REPO = df.REPO
RECIPE: dict[str, Any] = runpy.run_path(str(df.RECIPE))  # its constants; main() does not run
#: The recipe's output, in the cache, is trusted once this file is in it (written last).
DONE = ".image-rootfs-done"
#: Recipe outputs kept in the cache (the newest), so that edits do not fill the disk.
KEEP = 3
#: Hang guards, not speed assertions.
BUILD_TIMEOUT = 900
READY_TIMEOUT = 120
STOP_TIMEOUT = 60

#: Run as root inside a new mount namespace: mounts, copies the files in, makes `/` read-only,
#: and execs the rest of its arguments (setpriv ... env -i ... COMMAND), so the PID it writes is
#: the server's.
SANDBOX = r"""
set -eu
pidfile=$1 run=$2 rootfs=$3 files=$4 owner=$5
shift 5
echo $$ > "$pidfile"
mount -t tmpfs -o mode=0755,size=64m prune-gate-image "$run"
mkdir "$run/rootfs" "$run/files" "$run/tmp"
mount --bind "$rootfs" "$run/rootfs"
mount -o remount,bind,ro "$run/rootfs"
cp -R "$files/." "$run/files/"
chown -R "$owner" "$run/files" "$run/tmp"
chmod -R u=rX,go= "$run/files"
chmod 0700 "$run/tmp"
mount -o remount,bind,ro /
cd /
exec "$@"
"""

#: Run by the image's Python as the image's user: imports every module of gate and webhook and
#: says where each module they brought came from, whether its bytecode was compiled at build time,
#: and where the process can write.
PROBE = r"""
import errno, importlib, importlib.util, json, os, pkgutil, re, sys, sysconfig, tempfile
from importlib import metadata
lib = os.path.realpath(sys.argv[1])
startup = set(sys.modules)  # the interpreter's own (site's .pth files): the base image's
paths = sysconfig.get_paths()
stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
# The interpreter's site-packages may lie inside its stdlib directory: not the stdlib.
site = {os.path.realpath(p) for p in (paths["purelib"], paths["platlib"])}
def under(path, top):
    return path.startswith(top + os.sep)
def in_stdlib(path):
    return any(under(path, t) for t in stdlib) and not any(under(path, s) for s in site)
# Only the image's files and the stdlib are on the path, as in the image, whose base has nothing
# the package imports in its site-packages. This sandbox runs the host's interpreter, and the
# host's packages would otherwise answer an optional import the image cannot (oauthlib tries
# blinker, which Debian's python3-blinker provides and the image does not).
def kept(entry):
    real = os.path.realpath(entry or ".")
    return real == lib or under(real, lib) or real in stdlib or in_stdlib(real)
sys.path[:] = [entry for entry in sys.path if kept(entry)]
import gate, webhook
for package in (gate, webhook):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
# And what they import only when they run: every requirement of the package and its webhook
# extra but GitPython (gate check's; it looks for a git executable, which the image has not).
def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
wanted = {
    norm(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0])
    for r in metadata.requires("prune-gate") or []
    if "extra ==" not in r or 'extra == "webhook"' in r
} - {"gitpython"}
tops = {m for m, ds in metadata.packages_distributions().items() if wanted & {norm(d) for d in ds}}
missing = wanted - {norm(d) for m in tops for d in metadata.packages_distributions()[m]}
for top in sorted(tops):
    if not top.startswith("_"):
        importlib.import_module(top)
count, foreign, uncompiled, checked = 0, [], [], []
for name, module in sorted(sys.modules.items()):
    origin = getattr(module, "__file__", None)
    if not origin or name in startup:
        continue
    path = os.path.realpath(origin)
    if under(path, lib):
        count += 1
        if path.endswith(".py"):
            try:
                with open(importlib.util.cache_from_source(path), "rb") as pyc:
                    flags = int.from_bytes(pyc.read(8)[4:8], "little")
            except OSError:
                uncompiled.append(name)
                continue
            if flags != 1:  # PEP 552: 1 is hash-based and unchecked
                checked.append(name)
    elif not in_stdlib(path):
        foreign.append(f"{name}: {path}")
def write(directory):
    try:
        fd, path = tempfile.mkstemp(dir=directory)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    os.close(fd)
    os.unlink(path)
    return "written"
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "gate": os.path.realpath(gate.__file__), "from_lib": count, "foreign": foreign,
    "requirements": sorted(wanted), "not_installed": sorted(missing),
    "uncompiled": uncompiled, "checked": checked, "tempdir": tempfile.gettempdir(),
    "writes": {"lib": write(lib), "root": write("/"), "tempdir": write(tempfile.gettempdir())},
}))
"""


def fail_or_skip(message: str) -> None:
    """What cannot be had: a failure in CI, a skip elsewhere (as the cluster fixture does)."""
    if ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        fail_or_skip(f"{name} is not installed (util-linux): the test makes the container with it")
    assert path is not None
    return path


@dataclass(frozen=True)
class Image:
    """The recipe's output and what the Dockerfile says about running it."""

    rootfs: Path  # DEST of scripts/image-rootfs
    python: str  # the Python that made it and runs it (its console script's #!)
    final: df.Stage  # the Dockerfile's last stage
    uid: int
    gid: int
    privileged: tuple[str, ...]  # () as root, else ("sudo", "-n")

    @property
    def entrypoint(self) -> list[str]:
        ins = self.final.last("ENTRYPOINT")
        assert ins is not None, "the Dockerfile has no ENTRYPOINT"
        return df.exec_form(ins)

    @property
    def cmd(self) -> list[str]:
        ins = self.final.last("CMD")
        assert ins is not None, "the Dockerfile has no CMD"
        return df.exec_form(ins)


def cache_dir() -> Path:
    """$PRUNE_GATE_CACHE, else $XDG_CACHE_HOME/prune-gate, else ~/.cache/prune-gate (as
    scripts/build-binaries and scripts/lowest-versions)."""
    if os.environ.get("PRUNE_GATE_CACHE"):
        return Path(os.environ["PRUNE_GATE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "prune-gate"


def privileged() -> tuple[str, ...]:
    """How to run as root: directly when the tests are root, else through passwordless sudo."""
    if os.geteuid() == 0:
        return ()
    if (
        shutil.which("sudo") is None
        or subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False).returncode
    ):
        fail_or_skip("not root and no passwordless sudo: cannot switch to the image's user")
    return ("sudo", "-n")


def as_user(image_uid: int, image_gid: int) -> list[str]:
    """setpriv to the image's user as the chart's securityContext has it: no groups, no
    capabilities (the bounding set too), no_new_privs."""
    return [
        tool("setpriv"),
        f"--reuid={image_uid}",
        f"--regid={image_gid}",
        "--clear-groups",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--no-new-privs",
    ]


def choose_python(priv: tuple[str, ...], uid: int, gid: int) -> str:
    """The first Python new enough for pyproject.toml, with pip, that the image's user can run
    as it is (the same version and prefix as for us: a Python whose own files it cannot read
    may start with another's): the one under this virtualenv, else the system's."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floor = re.fullmatch(r">=(\d+)\.(\d+)", project["requires-python"])
    assert floor, project["requires-python"]
    which = "import sys; print(sys.version, sys.prefix, sys.version_info >= ({}, {}))"
    which = which.format(floor[1], floor[2])
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    tried = []
    for python in dict.fromkeys([base, "/usr/bin/python3", "/usr/local/bin/python3"]):
        if not Path(python).is_file():
            continue
        ours, theirs = (
            subprocess.run(
                [*prefix, python, "-c", f"import pip; {which}"],
                capture_output=True,
                text=True,
                cwd="/",
                timeout=60,
                check=False,
            )
            for prefix in ([], [*priv, *as_user(uid, gid)])
        )
        if ours.returncode == 0 and ours.stdout == theirs.stdout and "True" in ours.stdout:
            return python
        tried.append(f"{python}: {ours.stdout.strip()} / as {uid}: {theirs.stdout.strip()}")
    fail_or_skip(f"no Python {floor[1]}.{floor[2]}+ with pip that uid {uid} can run: {tried}")
    raise AssertionError("unreachable")


def recipe_inputs() -> list[Path]:
    """The recipe and every file it builds from (as it copies them: bytecode and build metadata
    left out)."""
    files = [df.RECIPE]
    for name in RECIPE["SOURCES"]:
        path = REPO / name
        found = sorted(path.rglob("*")) if path.is_dir() else [path]
        files += [
            f
            for f in found
            if f.is_file()
            and not any(fnmatch(part, pattern) for part in f.parts for pattern in RECIPE["IGNORED"])
        ]
    return files


def recipe_key(python: str) -> str:
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    digest = hashlib.sha256(f"{python}\0{version}\0".encode())
    for path in recipe_inputs():
        digest.update(f"{path.relative_to(REPO)}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build_rootfs(python: str) -> Path:
    """The recipe's output for this checkout: from the cache, else made now with `python`."""
    cache = cache_dir() / "image-rootfs"
    rootfs = cache / recipe_key(python)
    if (rootfs / DONE).is_file():
        return rootfs
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
    try:
        built = subprocess.run(
            [python, str(df.RECIPE), str(scratch / "rootfs")],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
        assert built.returncode == 0, f"scripts/image-rootfs failed:\n{built.stderr}"
        (scratch / "rootfs" / DONE).write_text(built.stderr)
        with contextlib.suppress(OSError):  # a concurrent run made it first: theirs is the same
            (scratch / "rootfs").rename(rootfs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert (rootfs / DONE).is_file()
    others = sorted(
        (p for p in cache.iterdir() if p != rootfs and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[KEEP - 1 :]:
        shutil.rmtree(old, ignore_errors=True)
    return rootfs


@pytest.fixture(scope="module")
def image() -> Image:
    final = df.load().stages[-1]
    user = final.last("USER")
    assert user is not None and re.fullmatch(r"\d+:\d+", user.args), "USER is not numeric uid:gid"
    uid, gid = (int(x) for x in user.args.split(":"))
    priv = privileged()
    namespace = subprocess.run(
        [*priv, tool("unshare"), "--mount", "true"], capture_output=True, text=True, check=False
    )
    if namespace.returncode != 0:
        fail_or_skip(f"cannot make a mount namespace (unshare --mount): {namespace.stderr.strip()}")
    python = choose_python(priv, uid, gid)
    return Image(build_rootfs(python), python, final, uid, gid, priv)


class Sandbox:
    """One run of a command as the image would run it (see the module docstring); the
    `sandbox` fixture makes one per test."""

    def __init__(self, image: Image, tmp: Path) -> None:
        self.image = image
        self.pidfile = tmp / "pid"
        #: staged here, copied into the tmpfs: image path -> contents
        self.files = tmp / "files"
        self.files.mkdir()
        # Where the tmpfs is mounted: a path the image's user can reach (pytest's tmp is 0700).
        self.run = Path(tempfile.mkdtemp(prefix="prune-gate-image-", dir="/tmp"))
        self.run.chmod(0o755)
        self.mounts: dict[PurePosixPath, Path] = {
            PurePosixPath("/", top.name): self.run / "rootfs" / top.name
            for top in image.rootfs.iterdir()
            if top.is_dir()
        }
        env = df.environment(image.final, {"PATH": df.DEFAULT_PATH})
        self.mounts[PurePosixPath(env.get("TMPDIR", "/tmp"))] = self.run / "tmp"

    def close(self) -> None:
        with contextlib.suppress(OSError):  # still mounted if a process of it lives on
            self.run.rmdir()

    def path(self, image_path: str) -> str:
        """Where a path of the image is in the sandbox; a path of the base image is the
        machine's."""
        path = PurePosixPath(image_path)
        for top, there in self.mounts.items():
            if path == top or top in path.parents:
                return str(there / path.relative_to(top))
        return image_path

    def mount_file(self, image_path: str, data: bytes) -> str:
        """A file the chart would mount at `image_path` (read-only, the user's); its path in
        the sandbox."""
        path = PurePosixPath(image_path)
        staged = self.files / path.relative_to("/")
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(data)
        self.mounts.setdefault(path.parent, self.run / "files" / path.parent.relative_to("/"))
        return self.path(image_path)

    def environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The last stage's environment over the base image's PATH, its paths moved into the
        sandbox; then `extra` (what the chart sets)."""
        env = df.environment(self.image.final, {"PATH": df.DEFAULT_PATH})
        moved = {
            key: ":".join(self.path(p) for p in value.split(":"))
            if value.startswith("/")
            else value
            for key, value in env.items()
        }
        return {**moved, "HOME": "/", **extra}

    def argv(self, env: Mapping[str, str], command: Sequence[str]) -> list[str]:
        image = self.image
        return [
            *image.privileged,
            tool("unshare"),
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            SANDBOX,
            "sandbox",
            str(self.pidfile),
            str(self.run),
            str(image.rootfs),
            str(self.files),
            f"{image.uid}:{image.gid}",
            *as_user(image.uid, image.gid),
            tool("env"),
            "-i",
            *(f"{key}={value}" for key, value in env.items()),
            *command,
        ]

    def pid(self) -> int:
        return int(self.pidfile.read_text())

    def signal(self, pid: int, sig: signal.Signals) -> None:
        if self.image.privileged:
            subprocess.run([*self.image.privileged, "kill", f"-{sig.name}", str(pid)], check=False)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def read_proc(self, pid: int, name: str) -> str:
        """/proc/PID/NAME of the user's process (maps needs root to read)."""
        done = subprocess.run(
            [*self.image.privileged, "cat", f"/proc/{pid}/{name}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout


@pytest.fixture
def sandbox(image: Image, tmp_path: Path) -> Iterator[Sandbox]:
    made = Sandbox(image, tmp_path)
    try:
        yield made
    finally:
        made.close()


def console_script(image: Image, sandbox: Sandbox, env: Mapping[str, str]) -> str:
    """The ENTRYPOINT as PATH finds it in the sandbox (its path there); it must be the recipe's
    console script, and its #! the Python that made it."""
    mounted = sandbox.run / "rootfs"
    for entry in env["PATH"].split(":"):
        there = Path(entry, image.entrypoint[0])
        # What the sandbox has there: the recipe's output under its mount, else the machine's.
        here = image.rootfs / there.relative_to(mounted) if there.is_relative_to(mounted) else there
        if here.is_file() and os.access(here, os.X_OK):
            break
    else:
        raise AssertionError(f"{image.entrypoint[0]} is not on the image's PATH {env['PATH']}")
    assert there.is_relative_to(mounted), f"{there}: not the recipe's"
    first = here.read_text(encoding="utf-8").splitlines()[0]
    assert first == f"#!{image.python}", f"{here}: {first}, not {image.python}"
    return str(there)


def status(text: str) -> dict[str, str]:
    return {
        key: value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())
    }


# --------------------------------------------------------------------------------------- tests


def test_the_image_imports_only_its_own_files_compiled_at_build_time(
    image: Image, sandbox: Sandbox
) -> None:
    env = sandbox.environment({})
    lib = env["PYTHONPATH"]
    done = subprocess.run(
        sandbox.argv(env, [image.python, "-c", PROBE, lib]),
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert (found["uid"], found["gid"], found["groups"]) == (image.uid, image.gid, [])
    assert found["gate"] == f"{lib}/gate/__init__.py", found["gate"]
    assert found["not_installed"] == [], "requirements of the package not in the image"
    assert {"kubernetes", "h2", "cryptography", "h11"} <= set(found["requirements"]), found
    assert found["from_lib"] > 100, found
    assert found["foreign"] == [], "imported from outside the image's files and the stdlib"
    assert found["uncompiled"] == [], "no bytecode from the build: compiled at every start"
    assert found["checked"] == [], "bytecode that depends on the files' timestamps"
    assert found["tempdir"] == env["TMPDIR"]
    writes = found["writes"]
    assert writes["lib"] in ("EROFS", "EACCES"), writes
    assert writes["root"] in ("EROFS", "EACCES"), writes
    assert writes["tempdir"] == "written", writes


def _review(kube: Cluster, namespace: str, claim: str) -> bytes:
    """An AdmissionReview of a person's DELETE of the claim, as the API server sends it."""
    obj = k.core(kube.client).read_namespaced_persistent_volume_claim(claim, namespace)
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": claim,
            "namespace": namespace,
            "operation": "DELETE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "oldObject": kube.client.sanitize_for_serialization(obj),
            "dryRun": False,
        },
    }
    return json.dumps(doc).encode()


def test_the_image_serves_the_webhook_as_its_user_on_a_read_only_root(
    kube: Cluster, namespace: str, node: str, image: Image, sandbox: Sandbox, tmp_path: Path
) -> None:
    mounted = k.make_claim(kube.client, namespace).metadata.name
    pod = k.make_pod(kube.client, namespace, node, [mounted]).metadata.name
    free = k.make_claim(kube.client, namespace).metadata.name

    ca = tls.make_ca("image test CA")
    serving = tls.make_serving_cert(ca, ["127.0.0.1"])
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    port, health = free_port(), free_port()
    while health == port:
        health = free_port()
    # The CMD, its files and ports moved to the test's (the chart mounts the same paths).
    content = {
        "--cert-file": serving.cert_pem,
        "--key-file": serving.key_pem,
        "--config": yaml.safe_dump({"webhook": {"deployers": [DEPLOYER]}}).encode(),
    }
    cmd = []
    for word in image.cmd:
        option, _, value = word.partition("=")
        if option in content:
            word = f"{option}={sandbox.mount_file(value, content.pop(option))}"
        elif option == "--listen":
            word = f"--listen=127.0.0.1:{port}"
        elif option == "--health-port":
            word = f"--health-port={health}"
        cmd.append(word)
    assert not content, f"the CMD no longer names {sorted(content)}: update this test"
    kubeconfig = sandbox.mount_file("/kube/config", Path(kube.kubeconfig).read_bytes())
    extra = [f"--kubeconfig={kubeconfig}"]
    presented = kube.webhook_client
    if presented is not None:  # as the chart's webhook.clientCA
        ca_file = sandbox.mount_file("/client-ca/ca.crt", presented.ca.read_bytes())
        extra.append(f"--client-ca={ca_file}")
    env = sandbox.environment(
        {"POD_NAMESPACE": namespace, "POD_NAME": "prune-gate-image", "HOSTNAME": "prune-gate-image"}
    )
    command = [console_script(image, sandbox, env), *cmd, *extra]

    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    if presented is not None:
        context.load_cert_chain(str(presented.cert), str(presented.key))

    def post(body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/validate",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return doc

    def get(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}{path}", timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    log = tmp_path / "webhook.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            sandbox.argv(env, command), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the webhook exited {proc.returncode}:\n{log.read_text()}")
            try:
                return get("/readyz") == 200
            except OSError:
                return False

        k.wait_for(ready, timeout=READY_TIMEOUT, what="the image's webhook to be ready")
        assert get("/healthz") == 200

        refused = post(_review(kube, namespace, mounted))["response"]
        assert refused["allowed"] is False, refused
        assert refused["status"]["code"] == 403
        assert refused["status"]["reason"] == "CLAIM_MOUNTED", refused
        assert f"pod {pod} on node {node}" in refused["status"]["message"]
        allowed = post(_review(kube, namespace, free))["response"]
        assert allowed["allowed"] is True, allowed

        pid = sandbox.pid()
        proc_status = status(sandbox.read_proc(pid, "status"))
        ids = f"{image.uid}\t{image.uid}\t{image.uid}\t{image.uid}"
        assert proc_status["Uid"] == ids, proc_status["Uid"]
        assert proc_status["Gid"] == ids.replace(str(image.uid), str(image.gid))
        assert proc_status["Groups"] == ""
        assert int(proc_status["CapEff"], 16) == int(proc_status["CapBnd"], 16) == 0
        assert proc_status["NoNewPrivs"] == "1"
        # Its compiled modules (cryptography's, PyYAML's, ...) are the image's.
        libraries = {
            line.split()[-1]
            for line in sandbox.read_proc(pid, "maps").splitlines()
            if ".so" in line.split()[-1]
        }
        ours = {p for p in libraries if p.startswith(env["PYTHONPATH"] + "/")}
        assert any("cryptography" in p for p in ours), sorted(libraries)
        strays = {p for p in libraries - ours if "-packages/" in p or p.startswith(str(REPO))}
        assert not strays, f"compiled modules from outside the image: {sorted(strays)}"

        sandbox.signal(pid, signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                sandbox.signal(sandbox.pid(), signal.SIGKILL)
            with contextlib.suppress(OSError):  # before it wrote its PID; sudo's is not ours
                proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
    text = log.read_text()
    assert "Traceback" not in text, text
    assert "Read-only file system" not in text, text
