"""`kubectl prune-gate`: the plugin's commands and kubectl's flags, run by the real kubectl; its
krew manifest checked by krew's own validator and installed by krew itself, on every platform.

kubectl, krew (kubectl-krew) and validate-krew-manifest come from `scripts/build-binaries`
(built from their pinned Go modules when missing); outside CI a machine that cannot build them
skips those tests, saying so; in CI that fails (tests/ci.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from gate import __version__
from gate.cli import kubectl_plugin, root
from tests.ci import pinned_binary

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "plugins" / "krew"
PLATFORMS = (("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64"))
#: Two contexts whose servers refuse at once: the error names the server the context chose.
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
  - {name: first, cluster: {server: "https://127.0.0.1:9"}}
  - {name: second, cluster: {server: "https://127.0.0.2:9"}}
users:
  - {name: u, user: {token: t}}
contexts:
  - {name: first, context: {cluster: first, user: u}}
  - {name: second, context: {cluster: second, user: u}}
current-context: first
"""


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(kubectl_plugin.plugin, list(args), prog_name="kubectl prune-gate")


# --- the plugin's command line ------------------------------------------------------------------


def test_the_console_scripts_are_the_plugin_and_its_completion() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"]["kubectl-prune_gate"] == "gate.cli.kubectl_plugin:run"
    assert project["scripts"]["kubectl_complete-prune_gate"] == "gate.cli.kubectl_plugin:complete"


def test_it_lists_the_cluster_commands_only() -> None:
    done = invoke("--help")
    assert done.exit_code == 0, done.output
    listed = done.output.split("Commands:")[1].split()
    assert [w for w in listed if w in root.COMMANDS] == sorted(kubectl_plugin.CLUSTER_COMMANDS)
    assert "Usage: kubectl prune-gate [OPTIONS] COMMAND" in done.output


@pytest.mark.parametrize("name", sorted(kubectl_plugin.NOT_A_CLUSTER_COMMAND))
def test_a_command_that_is_not_a_cluster_command_points_at_gate(name: str) -> None:
    done = invoke(name, "--help")
    assert done.exit_code == 2
    assert f"`kubectl prune-gate {name}` is not a cluster command" in done.output
    assert f"Run it as `gate {name} ...`" in done.output


def test_every_gate_command_is_the_plugins_or_refused_with_a_reason() -> None:
    every = {*root.COMMANDS, "codes", "webhook"} | set(root.main.commands)
    assert every == set(kubectl_plugin.CLUSTER_COMMANDS) | set(kubectl_plugin.NOT_A_CLUSTER_COMMAND)


@pytest.mark.parametrize(
    "argv",
    [["doctor"], ["heal"], ["audit"], ["retire", "status"], ["fence", "status"], ["fence", "hold"]],
    ids=" ".join,
)
def test_kubectls_context_flag_is_an_alias_of_kube_context(argv: list[str]) -> None:
    done = invoke(*argv, "--help")
    assert done.exit_code == 0, done.output
    assert f"Usage: kubectl prune-gate {' '.join(argv)} " in done.output
    assert "--kube-context, --context NAME" in done.output
    assert "--kubeconfig FILE" in done.output


def test_the_alias_does_not_reach_gates_own_commands() -> None:
    assert invoke("doctor", "--help").exit_code == 0
    done = CliRunner().invoke(root.main, ["doctor", "--help"], prog_name="gate")
    assert "--kube-context NAME" in done.output and "--context" not in done.output


# --- the real kubectl ---------------------------------------------------------------------------


def binary(name: str) -> str:
    """Path of the pinned binary NAME (tests.ci.pinned_binary)."""
    return pinned_binary(name)


def plugin_folder(folder: Path) -> Path:
    """A PATH folder holding kubectl, and a `kubectl-prune_gate` and `kubectl_complete-prune_gate`
    that run this checkout's plugin and its completion as the console scripts do."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "kubectl-prune_gate"
    script.write_text(
        f"#!{sys.executable}\nfrom gate.cli.kubectl_plugin import run\n\nrun()\n", "utf-8"
    )
    script.chmod(0o755)
    complete = folder / "kubectl_complete-prune_gate"
    complete.write_text(
        f"#!{sys.executable}\nfrom gate.cli.kubectl_plugin import complete\n\ncomplete()\n", "utf-8"
    )
    complete.chmod(0o755)
    shutil.copy(binary("kubectl"), folder / "kubectl")
    return folder


def kubectl(
    folder: Path, *args: str, home: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl with PATH = `folder` and the system's folders only: no other plugin in sight."""
    env = {
        "PATH": f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        **(extra or {}),
    }
    return subprocess.run(
        [str(folder / "kubectl"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


@pytest.mark.binaries
def test_kubectl_lists_the_plugin_and_runs_gates_doctor(tmp_path: Path) -> None:
    folder = plugin_folder(tmp_path / "bin")
    done = kubectl(folder, "plugin", "list", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(folder / "kubectl-prune_gate") in done.stdout.splitlines()
    done = kubectl(folder, "prune-gate", "doctor", "--help", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Usage: kubectl prune-gate doctor [OPTIONS] [KIND/NAME]" in done.stdout
    assert "Explain what each stuck deletion is waiting on" in done.stdout
    done = kubectl(folder, "prune-gate", "check", home=tmp_path)
    assert done.returncode == 2 and "Run it as `gate check ...`" in done.stderr


@pytest.mark.binaries
@pytest.mark.parametrize("command", ["doctor", "audit"])
def test_kubectls_flags_reach_the_cluster_they_name(tmp_path: Path, command: str) -> None:
    folder = plugin_folder(tmp_path / "bin")
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG, encoding="utf-8")
    done = kubectl(folder, "prune-gate", command, "--kubeconfig", str(config), home=tmp_path)
    assert done.returncode == 2 and "https://127.0.0.1:9" in done.stderr, done.stderr
    for flags in (["--context", "second"], ["--context=second"]):
        done = kubectl(
            folder,
            *("prune-gate", command, "--kubeconfig", str(config), *flags, "-n", "shop"),
            home=tmp_path,
        )
        assert done.returncode == 2 and "https://127.0.0.2:9" in done.stderr, done.stderr
    # KUBECONFIG, as kubectl reads it.
    done = kubectl(folder, "prune-gate", command, home=tmp_path, extra={"KUBECONFIG": str(config)})
    assert "https://127.0.0.1:9" in done.stderr, done.stderr


@pytest.mark.binaries
@pytest.mark.parametrize(
    ("words", "offered", "directive"),
    [
        (["doc"], ["doctor"], ":4"),
        (["doctor", "--cont"], ["--context"], ":4"),  # kubectl's flag, the plugin's alias
        (["fence", "st"], ["status"], ":4"),
        (["doctor", "--kubeconfig", ""], [], ":0"),  # a file: the shell's own completion
        (["check", ""], [], ":4"),  # not the plugin's: nothing
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_kubectl_completes_the_plugins_words(
    tmp_path: Path, words: list[str], offered: list[str], directive: str
) -> None:
    """kubectl (1.26+) asks kubectl_complete-prune_gate, in cobra's format."""
    folder = plugin_folder(tmp_path / "bin")
    done = kubectl(folder, "__complete", "prune-gate", *words, home=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines[:-1]] == offered
    assert lines[-1] == directive
    assert f"About to call: {folder / 'kubectl_complete-prune_gate'}" in done.stderr


# --- krew ---------------------------------------------------------------------------------------


def test_the_manifest_is_the_one_archive_py_writes_for_this_version() -> None:
    done = subprocess.run(
        [sys.executable, str(KREW / "archive.py"), "check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    manifest = yaml.safe_load((KREW / "prune-gate.yaml").read_text(encoding="utf-8"))
    assert manifest["spec"]["version"] == f"v{__version__}"
    selected = [
        (p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"])
        for p in manifest["spec"]["platforms"]
    ]
    assert selected == list(PLATFORMS)


def test_the_archive_is_the_same_bytes_every_time_and_holds_the_plugin(tmp_path: Path) -> None:
    paths = []
    for n in (1, 2):
        (tmp_path / str(n)).mkdir()
        done = subprocess.run(
            [sys.executable, str(KREW / "archive.py"), "zip", str(tmp_path / str(n))],
            capture_output=True,
            text=True,
            check=True,
        )
        paths.append(Path(done.stdout.strip()))
    first, second = (hashlib.sha256(p.read_bytes()).hexdigest() for p in paths)
    assert first == second
    with zipfile.ZipFile(paths[0]) as z:
        assert z.namelist() == ["kubectl-prune_gate", "LICENSE"]
        info = z.getinfo("kubectl-prune_gate")
        assert (info.external_attr >> 16) & 0o777 == 0o755
        text = z.read("kubectl-prune_gate").decode()
    assert f"version={__version__}\n" in text and "@VERSION@" not in text


@pytest.mark.binaries
def test_krews_validator_accepts_the_manifest_and_refuses_a_broken_one(tmp_path: Path) -> None:
    validator = binary("validate-krew-manifest")
    done = subprocess.run(
        [validator, "-manifest", str(KREW / "prune-gate.yaml"), "-skip-install"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "structural validation OK" in done.stderr
    broken = tmp_path / "prune-gate.yaml"
    text = (KREW / "prune-gate.yaml").read_text(encoding="utf-8")
    broken.write_text(text.replace(f"version: v{__version__}", f"version: {__version__}"))
    done = subprocess.run(
        [validator, "-manifest", str(broken), "-skip-install"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "version" in done.stderr


def krew_install(tmp_path: Path, os_name: str, arch: str) -> tuple[Path, Path]:
    """`kubectl krew install --manifest --archive` of this version's archive for one platform,
    into a KREW_ROOT of its own; the folder holding kubectl and krew, and that root."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    shutil.copy(binary("kubectl"), folder / "kubectl")
    shutil.copy(binary("kubectl-krew"), folder / "kubectl-krew")
    (tmp_path / "zip").mkdir(exist_ok=True)
    archive = subprocess.run(
        [sys.executable, str(KREW / "archive.py"), "zip", str(tmp_path / "zip")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    krew_root = tmp_path / f"krew-{os_name}-{arch}"
    done = kubectl(
        folder,
        *("krew", "install", f"--manifest={KREW / 'prune-gate.yaml'}", f"--archive={archive}"),
        home=tmp_path,
        extra={"KREW_ROOT": str(krew_root), "KREW_OS": os_name, "KREW_ARCH": arch},
    )
    assert done.returncode == 0, done.stderr
    return folder, krew_root


@pytest.mark.binaries
@pytest.mark.parametrize(("os_name", "arch"), PLATFORMS, ids="/".join)
def test_krew_installs_the_plugin_on_every_platform(
    tmp_path: Path, os_name: str, arch: str
) -> None:
    _, krew_root = krew_install(tmp_path, os_name, arch)
    store = krew_root / "store" / "prune-gate" / f"v{__version__}"
    assert sorted(p.name for p in store.iterdir()) == ["LICENSE", "kubectl-prune_gate"]
    link = krew_root / "bin" / "kubectl-prune_gate"
    assert link.resolve() == (store / "kubectl-prune_gate").resolve()
    assert os.access(link, os.X_OK)


@pytest.mark.binaries
def test_the_plugin_krew_installed_runs_gate(tmp_path: Path) -> None:
    """With PRUNE_GATE_PYTHON naming a Python that has prune-gate (this checkout's), the
    krew-installed plugin runs it and installs nothing."""
    folder, krew_root = krew_install(tmp_path, "linux", "amd64")
    on_path = tmp_path / "path"
    on_path.mkdir()
    shutil.copy(folder / "kubectl", on_path / "kubectl")
    for name in ("kubectl-prune_gate",):
        (on_path / name).symlink_to(krew_root / "bin" / name)
    done = kubectl(on_path, "plugin", "list", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(on_path / "kubectl-prune_gate") in done.stdout.splitlines()
    extra = {"PRUNE_GATE_PYTHON": sys.executable, "XDG_DATA_HOME": str(tmp_path / "data")}
    done = kubectl(on_path, "prune-gate", "version", home=tmp_path, extra=extra)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"gate {__version__} ")
    assert not (tmp_path / "data").exists()


def test_the_plugin_reads_the_cluster_without_being_told() -> None:
    """`gate audit` needs --live; `kubectl prune-gate audit` implies it (and gate's does not)."""
    done = CliRunner().invoke(root.main, ["audit", "--kubeconfig", "/nonexistent"])
    assert done.exit_code == 2 and "give --live" in done.output
    done = invoke("audit", "--kubeconfig", "/nonexistent")
    assert done.exit_code == 2 and "give --live" not in done.output


@pytest.mark.parametrize(
    ("python3", "said"),
    [
        (None, "python3 is not on PATH"),
        ("#!/bin/sh\nprintf '3.9.18\\n'\nexit 1\n", "python3 is 3.9.18: install a newer one"),
    ],
    ids=["no python3", "python3 3.9"],
)
def test_the_krew_plugin_without_a_python_it_can_use_says_so(
    tmp_path: Path, python3: str | None, said: str
) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("mkdir", "mktemp", "rm", "mv"):  # what the plugin runs, and no python3
        found = shutil.which(tool)
        assert found is not None
        (folder / tool).symlink_to(found)
    if python3 is not None:
        (folder / "python3").write_text(python3, "utf-8")
        (folder / "python3").chmod(0o755)
    plugin = tmp_path / "kubectl-prune_gate"
    text = (KREW / "kubectl-prune_gate").read_text("utf-8")
    plugin.write_text(text.replace("@VERSION@", __version__), "utf-8")
    plugin.chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", str(plugin), "version"],
        capture_output=True,
        text=True,
        env={"PATH": str(folder), "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 2
    assert said in done.stderr and "PRUNE_GATE_PYTHON" in done.stderr
    assert not (tmp_path / ".local").exists()
