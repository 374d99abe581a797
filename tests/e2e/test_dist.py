"""`make dist` on a clean clone of HEAD: everything a release publishes, checked as a user of the
release would meet it.

The clone is built once for the module, with every native target (x86_64 and aarch64: the
aarch64 wheel is cross-linked by zig, about a minute cold) and the helper binary for this
machine's platform only (DIST_HELPER_PLATFORMS): each cold cross build of the helper costs
minutes on 2 cores, and the release workflow builds all four and checks them against
action/helper.sha256; a change of the helper's sources or toolchain changes this platform's
binary too, so its pin is stale here first. The native wheels and the helper binaries are cached
in ~/.cache/prune-gate/dist, so a warm run costs seconds. Then: SHA256SUMS says what the files
hold, the chart's Chart.yaml inside the .tgz and the wheel's METADATA say the version, the helper
binary is the one action/helper.sha256 pins, and the pure wheel and the native wheel install into
a fresh virtualenv with no index (the dependencies from the wheels of the Action's hashed lock,
tests/wheelhouse.py), where `gate --version` says the native reader is active and the bundled
example is blocked as `make example` shows. Set PRUNE_GATE_TEST_DIST_ALL=1 to build every helper
platform, as a release does.

Needs Go, cargo (make dist adds the aarch64-unknown-linux-gnu target with rustup when it is
missing), and the network once (PyPI: the build tools, the lock's wheels; rustup's target).
Outside CI a machine without them skips, saying how to get them; in CI it fails (tests/ci.py).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from gate import __version__
from tests.ci import ci
from tests.wheelhouse import offline_pip_env, wheelhouse

pytestmark = [pytest.mark.e2e, pytest.mark.binaries]

ROOT = Path(__file__).resolve().parents[2]
V = __version__
GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
HOST = f"{platform.system().lower()}/{GOARCH.get(platform.machine(), platform.machine())}"
ALL_PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
#: The helper platforms built here: this machine's, or all (PRUNE_GATE_TEST_DIST_ALL=1).
PLATFORMS = ALL_PLATFORMS if os.environ.get("PRUNE_GATE_TEST_DIST_ALL") == "1" else (HOST,)
HELPERS = [f"prune-gate-kustomize-{p.replace('/', '-')}" for p in PLATFORMS]
#: make dist, cold: the native wheels about a minute each, the helper's cross builds longer.
BUILD_TIMEOUT = 2400


def missing_tools() -> str:
    """What this machine lacks to build a release, and how to get it ("" when nothing)."""
    if shutil.which("go") is None:
        return "go is not installed (https://go.dev/dl/)"
    if shutil.which("cargo") is None:
        return "cargo is not installed (https://rustup.rs)"
    return ""


def clone(tmp_path: Path) -> Path:
    """A clean clone of HEAD: only what is committed is built."""
    repo = tmp_path / "prune-gate"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True, timeout=300)
    return repo


def run_dist(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(repo / "scripts" / "dist"), *args],
        cwd=repo,
        env={**os.environ, "DIST_HELPER_PLATFORMS": " ".join(PLATFORMS), **env},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ of `make dist` on a clean clone of HEAD, every target included."""
    missing = missing_tools()
    if missing and not ci():
        pytest.skip(f"make dist cannot build a release here: {missing}")
    if HOST not in ALL_PLATFORMS:
        pytest.skip(f"a release publishes no helper for {HOST}")
    repo = clone(tmp_path_factory.mktemp("dist"))
    done = subprocess.run(
        ["make", "dist"],
        cwd=repo,
        env={
            **{k: v for k, v in os.environ.items() if k != "DIST_NATIVE_TARGETS"},
            "DIST_HELPER_PLATFORMS": " ".join(PLATFORMS),
        },
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"dist: prune-gate {V} in dist/" in done.stdout
    return repo / "dist"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dist_holds_the_release_and_sha256sums_says_what_each_file_holds(dist: Path) -> None:
    sums = {}
    for line in (dist / "SHA256SUMS").read_text("utf-8").splitlines():
        digest, name = line.split("  ")
        sums[name] = digest
    files = {p.name for p in dist.iterdir()} - {"SHA256SUMS"}
    assert set(sums) == files
    assert {name: sha256(dist / name) for name in files} == sums
    native = sorted(n for n in files if n.startswith("prune_gate_yaml-") and n.endswith(".whl"))
    assert native == [
        f"prune_gate_yaml-{V}-cp311-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        f"prune_gate_yaml-{V}-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    ]
    assert files == {
        f"prune_gate-{V}.tar.gz",
        f"prune_gate_yaml-{V}.tar.gz",
        f"prune_gate-{V}-py3-none-any.whl",
        f"prune-gate-{V}.tgz",
        *native,
        *HELPERS,
        f"kubectl-prune_gate-{V}.zip",  # the kubectl plugin's krew archive and manifest
        f"kubectl-prune_gate-{V}.yaml",
    }


def test_the_chart_and_the_packages_say_the_version(dist: Path) -> None:
    with tarfile.open(dist / f"prune-gate-{V}.tgz") as tgz:
        member = tgz.extractfile("prune-gate/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert (chart["version"], chart["appVersion"]) == (V, V)
    with zipfile.ZipFile(dist / f"prune_gate-{V}-py3-none-any.whl") as wheel:
        metadata = wheel.read(f"prune_gate-{V}.dist-info/METADATA").decode()
        tags = wheel.read(f"prune_gate-{V}.dist-info/WHEEL").decode()
        # The pure wheel is pure: the native reader is a wheel of its own.
        assert not [n for n in wheel.namelist() if n.endswith((".so", ".pyd"))]
    assert f"\nVersion: {V}\n" in metadata
    assert "Tag: py3-none-any" in tags
    with tarfile.open(dist / f"prune_gate-{V}.tar.gz") as sdist:
        member = sdist.extractfile(f"prune_gate-{V}/PKG-INFO")
        assert member is not None
        assert f"\nVersion: {V}\n" in member.read().decode()


def test_the_native_wheels_are_abi3_for_each_linux_arch(dist: Path) -> None:
    machines = {"x86_64": "x86-64", "aarch64": "AArch64"}
    for arch, machine in machines.items():
        path = next(dist.glob(f"prune_gate_yaml-{V}-cp311-abi3-*_{arch}.whl"))
        with zipfile.ZipFile(path) as wheel:
            tags = wheel.read(f"prune_gate_yaml-{V}.dist-info/WHEEL").decode()
            (library,) = [n for n in wheel.namelist() if n.endswith(".so")]
            elf = wheel.read(library)
        assert f"Tag: cp311-abi3-manylinux_2_17_{arch}" in tags
        assert elf[:4] == b"\x7fELF"
        # e_machine, little-endian: 0x3e x86-64, 0xb7 AArch64.
        assert int.from_bytes(elf[18:20], "little") == {"x86-64": 0x3E, "AArch64": 0xB7}[machine]


def test_the_krew_manifest_names_the_krew_archive(dist: Path) -> None:
    manifest = yaml.safe_load((dist / f"kubectl-prune_gate-{V}.yaml").read_text("utf-8"))
    assert manifest["spec"]["version"] == f"v{V}"
    digest = sha256(dist / f"kubectl-prune_gate-{V}.zip")
    assert {p["sha256"] for p in manifest["spec"]["platforms"]} == {digest}
    assert (dist / f"kubectl-prune_gate-{V}.yaml").read_bytes() == (
        ROOT / "plugins" / "krew" / "prune-gate.yaml"
    ).read_bytes()


def test_the_helper_binaries_are_the_pinned_ones(dist: Path) -> None:
    pins = (ROOT / "action" / "helper.sha256").read_text("utf-8").splitlines()
    assert len(pins) == len(ALL_PLATFORMS)
    built = [f"{sha256(dist / name)}  {name}" for name in HELPERS]
    assert set(built) <= set(pins)


def test_the_wheels_install_with_no_index_and_run_the_example(dist: Path, tmp_path: Path) -> None:
    """A fresh virtualenv, the dependencies from the lock's wheels only: `gate --version` says
    the native reader from dist/ is active, and the bundled incident is blocked (exit 1)."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(
            f"dist/ has native wheels for Linux x86_64 and aarch64, not {platform.machine()}"
        )
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    where = ["--no-index", "--find-links", str(dist), "--find-links", str(wheelhouse())]
    wanted = [f"prune-gate=={V}", f"prune-gate-yaml=={V}"]
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    install = subprocess.run(
        [*pip, "install", "--quiet", *where, *wanted],
        env=offline_pip_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRUNE_GATE_NATIVE")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"

    def gate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "gate"), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    version = gate("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"gate {V} ")
    site = venv / "lib"
    assert f"native YAML reader: active: prune-gate-yaml {V}" in version.stdout, version.stdout
    assert str(site) in version.stdout.split("native YAML reader:")[1].splitlines()[0]
    imported = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import prune_gate_yaml; print(prune_gate_yaml.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert imported.returncode == 0 and imported.stdout.startswith(str(site)), imported.stderr
    example = ROOT / "examples" / "incident"
    check = gate(
        "check",
        "--base-manifests",
        str(example / "base"),
        "--head-manifests",
        str(example / "candidate"),
        "--context",
        "speculative",
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert "\nblock PersistentVolumeClaim headlamp/headlamp (" in check.stdout
    assert "\n  NOT_RETIRED: " in check.stdout and "\n  CONSUMER_REMAINS: " in check.stdout


def test_a_target_this_machine_cannot_build_fails_saying_how_to_get_it_or_narrow(
    tmp_path: Path,
) -> None:
    """Without cargo, make dist stops (a release needs both native wheels) and says how to get
    them or narrow DIST_NATIVE_TARGETS; narrowed to none, the rest builds."""
    repo = clone(tmp_path)
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "cargo").exists()
    )
    done = run_dist(repo, PATH=path)
    assert done.returncode == 1
    assert "cargo is not installed: install Rust (https://rustup.rs)" in done.stderr
    assert "DIST_NATIVE_TARGETS" in done.stderr
    narrowed = run_dist(repo, PATH=path, DIST_NATIVE_TARGETS="none")
    assert narrowed.returncode == 0, narrowed.stderr
    assert not list((repo / "dist").glob("prune_gate_yaml-*"))


def test_a_helper_build_other_than_the_pins_fails_saying_to_run_make_helper_pins(
    tmp_path: Path,
) -> None:
    repo = clone(tmp_path)
    """A pin that is not this build's (here: the host's pin damaged) stops make dist."""
    pins = repo / "action" / "helper.sha256"
    name = f"prune-gate-kustomize-{HOST.replace('/', '-')}"
    lines = pins.read_text("utf-8").splitlines()
    damaged = [("0" * 64 + "  " + name) if line.endswith("  " + name) else line for line in lines]
    assert damaged != lines
    pins.write_text("\n".join(damaged) + "\n")
    done = run_dist(repo, DIST_NATIVE_TARGETS="none")
    assert done.returncode == 1
    assert "run `make helper-pins`" in done.stderr
    assert f"-{'0' * 64}  {name}" in done.stderr
