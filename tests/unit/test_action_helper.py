"""action/helper, the Action's renderer: the release's binary is kept only when its sha256 is the
one the commit pins, else built from the action's tools/kustomize with go; a check that needs a
renderer (render: kustomize, flux-root) gets none silently never: exit 2. The releases are served
over loopback HTTP, the build is a real `go build` of a small stand-in module."""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gate import __version__

ROOT = Path(__file__).resolve().parents[2]
GO = shutil.which("go")
NAME = "prune-gate-kustomize-{os}-{arch}"


def platform_name() -> str:
    system = {"Linux": "linux", "Darwin": "darwin"}[os.uname().sysname]
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    return NAME.format(os=system, arch=arch[os.uname().machine])


@dataclass
class Release:
    """A loopback release server: RELEASE/v<version>/<name> is served from `folder`."""

    url: str
    folder: Path

    def publish(self, content: bytes) -> str:
        path = self.folder / f"v{__version__}" / platform_name()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return hashlib.sha256(content).hexdigest()


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Release]:
    folder = tmp_path / "release"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Release(f"http://127.0.0.1:{server.server_address[1]}", folder)
    finally:
        server.shutdown()
        server.server_close()


def action_copy(tmp_path: Path, pin: str | None) -> Path:
    """The action's folder as the runner has it: the script, the version, the pins, and a
    tools/kustomize that builds a small program saying what it is."""
    action = tmp_path / "action-path"
    (action / "action").mkdir(parents=True)
    shutil.copy2(ROOT / "action" / "helper", action / "action" / "helper")
    (action / "gate").mkdir()
    shutil.copy2(ROOT / "gate" / "__init__.py", action / "gate" / "__init__.py")
    pins = f"{pin}  {platform_name()}\n" if pin else ""
    (action / "action" / "helper.sha256").write_text(pins)
    tools = action / "tools" / "kustomize"
    tools.mkdir(parents=True)
    (tools / "go.mod").write_text("module example.com/standin\n\ngo 1.21\n")
    (tools / "main.go").write_text(
        'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("built from source") }\n'
    )
    return action


@dataclass
class Run:
    code: int
    stdout: str
    outputs: dict[str, str]
    summary: str
    helper: Path


def run_helper(tmp_path: Path, action: Path, release: Release, mode: str, *, go: bool,
               needs: bool = False) -> Run:  # fmt: skip
    out, summary, bin_dir = tmp_path / "output", tmp_path / "summary", tmp_path / "bin"
    out.write_text("")
    summary.write_text("")
    path = "/usr/bin:/bin"
    if go:
        assert GO, "go is on PATH"
        path = f"{Path(GO).parent}:{path}"
    env = {
        "PATH": path,
        "HOME": str(tmp_path),
        "GOCACHE": os.environ.get("GOCACHE") or str(Path.home() / ".cache" / "go-build"),
        "GOPATH": os.environ.get("GOPATH") or str(Path.home() / "go"),
        "GOFLAGS": "-mod=mod",
        "ACTION_PATH": str(action),
        "BIN": str(bin_dir),
        "HELPER": mode,
        "RELEASE_URL": release.url,
        "NEEDS_HELPER": "true" if needs else "false",
        "GITHUB_OUTPUT": str(out),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    done = subprocess.run(
        [str(action / "action" / "helper")],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return Run(done.returncode, done.stdout + done.stderr, outputs, summary.read_text(),
               bin_dir / "prune-gate-kustomize")  # fmt: skip


def test_the_releases_binary_is_kept_when_its_sha256_is_the_pinned_one(
    tmp_path: Path, release: Release
) -> None:
    pin = release.publish(b"#!/bin/sh\necho released\n")
    run = run_helper(tmp_path, action_copy(tmp_path, pin), release, "download", go=False)
    assert run.code == 0, run.stdout
    assert run.helper.read_bytes() == b"#!/bin/sh\necho released\n"
    assert os.access(run.helper, os.X_OK)
    assert run.outputs["helper"] == str(run.helper)
    url = f"{release.url}/v{__version__}/{platform_name()}"
    target = platform_name().removeprefix("prune-gate-kustomize-")
    assert run.outputs["renderer"] == (
        f"prune-gate-kustomize {__version__} {target}, downloaded from {url}, "
        f"sha256 {pin} as pinned"
    )
    assert run.summary == f"prune-gate {__version__}; renderer: {run.outputs['renderer']}\n"


def test_a_binary_that_is_not_the_pinned_one_is_refused_and_not_kept(
    tmp_path: Path, release: Release
) -> None:
    release.publish(b"#!/bin/sh\necho tampered\n")
    pin = hashlib.sha256(b"the real one").hexdigest()
    run = run_helper(tmp_path, action_copy(tmp_path, pin), release, "download", go=False)
    assert run.code == 2
    assert "::warning title=prune-gate renderer::" in run.stdout
    assert f"not the {pin} action/helper.sha256 pins: refused" in run.stdout
    assert "::error title=prune-gate renderer::no renderer:" in run.stdout
    assert not run.helper.exists()
    assert not list((tmp_path / "bin").iterdir())  # nor a part of it


@pytest.mark.skipif(GO is None, reason="go builds the stand-in renderer (install Go)")
def test_auto_builds_from_the_actions_source_when_the_release_is_not_the_pinned_one(
    tmp_path: Path, release: Release
) -> None:
    release.publish(b"#!/bin/sh\necho tampered\n")
    pin = hashlib.sha256(b"the real one").hexdigest()
    run = run_helper(tmp_path, action_copy(tmp_path, pin), release, "auto", go=True, needs=True)
    assert run.code == 0, run.stdout
    built = subprocess.run([str(run.helper)], capture_output=True, text=True, check=True)
    assert built.stdout == "built from source\n"
    assert "built from the action's tools/kustomize with go" in run.outputs["renderer"]
    digest = hashlib.sha256(run.helper.read_bytes()).hexdigest()
    assert run.outputs["renderer"].endswith(f"sha256 {digest}")


def test_auto_without_a_renderer_fails_a_check_that_needs_one(
    tmp_path: Path, release: Release
) -> None:
    """No release for this version (404) and no go: render: kustomize must not fall back."""
    run = run_helper(tmp_path, action_copy(tmp_path, "0" * 64), release, "auto", go=False,
                     needs=True)  # fmt: skip
    assert run.code == 2
    assert "::error title=prune-gate renderer::no confined renderer" in run.stdout
    assert "could not download" in run.stdout and "go is not on PATH to build it" in run.stdout
    assert "helper: none" in run.stdout  # the way out, if the fallback is wanted


def test_auto_without_a_renderer_is_a_notice_for_a_check_that_needs_none(
    tmp_path: Path, release: Release
) -> None:
    run = run_helper(tmp_path, action_copy(tmp_path, None), release, "auto", go=False)
    assert run.code == 0, run.stdout
    assert "::notice title=prune-gate renderer::no confined renderer" in run.stdout
    assert f"action/helper.sha256 pins no {platform_name()}" in run.stdout
    assert run.outputs["helper"] == ""


def test_none_uses_no_helper_and_says_so(tmp_path: Path, release: Release) -> None:
    pin = release.publish(b"#!/bin/sh\n")
    run = run_helper(tmp_path, action_copy(tmp_path, pin), release, "none", go=False)
    assert run.code == 0, run.stdout
    assert run.outputs["helper"] == ""
    assert run.outputs["renderer"].startswith("none asked (helper: none)")
    assert not run.helper.exists()


def test_an_unknown_mode_is_exit_2(tmp_path: Path, release: Release) -> None:
    run = run_helper(tmp_path, action_copy(tmp_path, None), release, "latest", go=False)
    assert run.code == 2
    assert "helper must be auto, download, build or none, not 'latest'" in run.stdout


def test_the_action_pins_every_platform_the_release_publishes() -> None:
    pins = (ROOT / "action" / "helper.sha256").read_text().splitlines()
    names = sorted(line.split()[1].lstrip("*") for line in pins)
    expected = [NAME.format(os=o, arch=a) for o in ("darwin", "linux") for a in ("amd64", "arm64")]
    assert names == expected
    assert all(len(line.split()[0]) == 64 for line in pins)
