"""`gate version` and `gate --version`: the version, and which native reader and renderer run,
from where (a CI log must say whether the confined renderer or a fallback built the check)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gate import __version__
from gate.cli import root, version
from gate.sources import render


def gate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate", *args],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_names_are_the_renderers_own_and_the_extra_the_groups() -> None:
    assert (version.HELPER, version.HELPER_ENV) == (render.HELPER, render.HELPER_ENV)
    assert version.WEBHOOK_EXTRA == root.WEBHOOK_EXTRA


def test_the_helper_on_path_is_named_with_its_sha256(tmp_path: Path) -> None:
    helper = executable(tmp_path / "prune-gate-kustomize", "#!/bin/sh\necho helper\n")
    part = version.renderer(str(tmp_path))
    digest = hashlib.sha256(helper.read_bytes()).hexdigest()
    assert part.active
    assert part.detail == f"prune-gate-kustomize (confined) from PATH: {helper}, sha256 {digest}"


def test_without_the_helper_the_fallback_is_named_as_one(tmp_path: Path) -> None:
    kubectl = executable(tmp_path / "kubectl")
    part = version.renderer(str(tmp_path))
    assert part.active
    assert part.detail.startswith(f"kubectl kustomize from {kubectl} (fallback:")
    assert "refused, where Flux reads them" in part.detail


def test_no_renderer_at_all_is_inactive(tmp_path: Path) -> None:
    part = version.renderer(str(tmp_path))
    assert not part.active
    assert "not on PATH" in part.detail


def test_an_explicit_helper_that_is_not_executable_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRUNE_GATE_KUSTOMIZE", str(tmp_path / "missing"))
    part = version.renderer(str(tmp_path))
    assert not part.active
    assert "is not an executable file" in part.detail


def test_the_native_reader_turned_off_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRUNE_GATE_NATIVE_YAML", "off")
    part = version.native_reader()
    assert not part.active
    assert part.detail == "off (PRUNE_GATE_NATIVE_YAML=off)"


def test_version_and_dash_dash_version_print_the_same_report(tmp_path: Path) -> None:
    helper = executable(tmp_path / "prune-gate-kustomize")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PRUNE_GATE_KUSTOMIZE", None)
    env.pop("PRUNE_GATE_NATIVE_YAML", None)
    command, option = gate("version", env=env), gate("--version", env=env)
    assert command.returncode == option.returncode == 0, command.stderr + option.stderr
    assert command.stdout == option.stdout
    lines = command.stdout.splitlines()
    assert lines[0].startswith(f"gate {__version__} (Python ")
    assert lines[2].startswith(f"kustomize renderer: active: prune-gate-kustomize (confined) "
                               f"from PATH: {helper}, sha256 ")  # fmt: skip
    native = version.native_reader()
    assert lines[1] == f"native YAML reader: {'active' if native.active else 'inactive'}: " + (
        native.detail
    )
