"""Without cargo, installing the native reader from source stops at once with one message that
says how to get it, and downloads no Rust toolchain. maturin's own backend would ask pip for
`puccinialin` and fetch a 657 MB toolchain into a temporary folder; native/backend.py wraps it.
Both ways in are tried with a PATH that has no cargo: the README's `pip install ./native`, and
pip building the project's sdist (made by maturin, with cargo). pip fetches maturin from PyPI
into its build environment, as a user's pip does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci import ci

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = "prune-gate-yaml: cargo not found, so the native YAML reader is not built"


def without_cargo() -> dict[str, str]:
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "cargo").exists()
    )
    assert shutil.which("cargo", path=path) is None
    return {**os.environ, "PATH": path}


def pip_install(venv: Path, what: str) -> subprocess.CompletedProcess[str]:
    """This pip, installing into `venv` (one without pip of its own: quicker to make)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", what],
        env=without_cargo(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtualenv, shared: every install here fails and leaves it empty."""
    path = tmp_path_factory.mktemp("no-cargo") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=300
    )
    return path


def assert_stopped_once_without_download(done: subprocess.CompletedProcess[str]) -> None:
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert out.count(MESSAGE) == 1, out
    assert "https://rustup.rs" in out and "pip install prune-gate-yaml" in out
    assert "puccinialin" not in out and "installing into a temporary directory" not in out, out


def test_pip_install_of_the_source_folder_stops_without_a_toolchain_download(venv: Path) -> None:
    assert_stopped_once_without_download(pip_install(venv, str(ROOT / "native")))


def test_pip_install_of_the_sdist_stops_the_same(venv: Path, tmp_path: Path) -> None:
    if shutil.which("cargo") is None and not ci():
        pytest.skip("making the sdist needs cargo (https://rustup.rs)")
    tools = subprocess.run(
        [str(ROOT / "scripts" / "dist"), "tools"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert tools.returncode == 0, tools.stderr
    made = subprocess.run(
        [Path(tools.stdout.strip()) / "maturin", "sdist", "--out", str(tmp_path / "sdist")],
        cwd=ROOT / "native",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    (sdist,) = (tmp_path / "sdist").glob("prune_gate_yaml-*.tar.gz")
    assert_stopped_once_without_download(pip_install(venv, str(sdist)))
