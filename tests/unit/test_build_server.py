"""Kustomize builds share one kept helper process per revision (`prune-gate-kustomize --serve`).

A kept process must give what a process per build gives, build after build, whatever an earlier
build did: a candidate's kustomization that swaps kustomize's OpenAPI schema (`openapi:`) must
not change how the next path renders. And everything that goes wrong with the kept process is
still a build error or a fallback, never a hang or a wrong build.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gate.model.errors import RenderError
from gate.sources import render
from gate.sources.buildserver import BuildServer
from tests.ci import needs_binaries
from tests.unit.helpers import GitRepo

HELPER = shutil.which(render.HELPER)

#: `make test` puts the confined renderer on PATH; a missing one is a failure in CI, not a skip.
needs_helper = needs_binaries(
    HELPER is not None,
    reason="prune-gate-kustomize is not on PATH (run `make test`, which builds it)",
)

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
        - {name: a, image: a:1}
        - {name: b, image: b:1}
"""
#: A strategic merge patch of container a: merged by name under the built-in schema, so b stays.
PATCHED = """\
resources: [deploy.yaml]
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: web}
      spec:
        template:
          spec:
            containers:
              - {name: a, image: a:2}
"""
#: A kustomization with a schema of its own that knows no merge keys.
SCHEMA_SWAP = "openapi:\n  path: schema.json\nresources: [cm.yaml]\n"
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"


def tree(root: Path) -> Path:
    for rel, text in {
        "victim/kustomization.yaml": PATCHED,
        "victim/deploy.yaml": DEPLOYMENT,
        "swap/kustomization.yaml": SCHEMA_SWAP,
        "swap/cm.yaml": CONFIG_MAP,
        "swap/schema.json": '{"definitions": {}}',
        "nested/kustomization.yaml": "resources: [../swap]\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root.resolve()


def alone(root: Path, target: str) -> str:
    """What a process of its own builds."""
    assert HELPER is not None
    done = subprocess.run(
        [HELPER, "--root", str(root), str(root / target)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@needs_helper
def test_a_kept_helper_builds_what_a_process_per_build_builds(tmp_path: Path) -> None:
    root = tree(tmp_path)
    assert HELPER is not None
    server = BuildServer(HELPER, timeout=60)
    try:
        first = server.build([root], root / "victim")
        assert first is not None and first.returncode == 0, first
        pid = server._proc.pid if server._proc else None
        second = server.build([root], root / "victim")
        assert second is not None and server._proc is not None and server._proc.pid == pid
    finally:
        server.close()
    assert first.stdout == second.stdout == alone(root, "victim")
    assert "image: b:1" in first.stdout and "image: a:2" in first.stdout


@needs_helper
@pytest.mark.parametrize("swap", ["swap", "nested"])
def test_a_build_that_swaps_the_schema_does_not_change_the_next(tmp_path: Path, swap: str) -> None:
    root = tree(tmp_path)
    assert HELPER is not None
    server = BuildServer(HELPER, timeout=60)
    try:
        swapped = server.build([root], root / swap)
        assert swapped is not None and swapped.returncode == 0, swapped
        after = server.build([root], root / "victim")
    finally:
        server.close()
    assert after is not None and after.stdout == alone(root, "victim")
    assert "image: b:1" in after.stdout  # with the swapped schema, the patch replaced the list


@needs_helper
def test_a_refused_build_is_the_same_error_as_alone(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / "out").mkdir()
    (root / "out/kustomization.yaml").write_text("resources: [/etc/hostname]\n")
    assert HELPER is not None
    server = BuildServer(HELPER, timeout=60)
    try:
        refused = server.build([root], root / "out")
        ok = server.build([root], root / "victim")  # and the process still serves
    finally:
        server.close()
    single = subprocess.run(
        [HELPER, "--root", str(root), str(root / "out")], capture_output=True, text=True
    )
    assert refused is not None and refused.returncode == single.returncode == 1
    assert refused.stderr == single.stderr and "outside the revision's tree" in refused.stderr
    assert ok is not None and ok.returncode == 0


@needs_helper
def test_what_a_build_prints_cannot_pass_for_an_answer(tmp_path: Path) -> None:
    # The answers go out on a descriptor of their own; the process's stdout, where kustomize or
    # anything it calls could print, is its stderr.
    root = tree(tmp_path)
    assert HELPER is not None
    server = BuildServer(HELPER, timeout=60)
    try:
        assert server.build([root], root / "victim") is not None
        assert server._proc is not None
        fds = Path(f"/proc/{server._proc.pid}/fd")
        assert (fds / "1").readlink() == (fds / "2").readlink()
    finally:
        server.close()


def fake_helper(tmp_path: Path, body: str) -> str:
    """An executable standing in for the helper: `body` is Python, run with the arguments."""
    path = tmp_path / "fake-helper"
    path.write_text(f"#!{sys.executable}\nimport json, sys\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


ANSWER = 'print(json.dumps({"code": 0, "stdout": "kind: X\\n", "stderr": ""}), flush=True)'


def test_a_helper_that_does_not_serve_is_run_once_per_build(tmp_path: Path) -> None:
    old = fake_helper(tmp_path, "print('usage: ...', file=sys.stderr); sys.exit(2)")
    server = BuildServer(old, timeout=60)
    assert server.build([tmp_path], tmp_path) is None
    assert server.serves is False


def test_a_helper_older_than_the_generator_is_not_served_from(tmp_path: Path) -> None:
    """A helper that says {"serve": 1} predates Flux's generator: it would ignore the request's
    "generate" and build a Flux path without the Kustomization's patches or targetNamespace, so
    it is run as one that does not serve (and a Flux build then says the helper is too old)."""
    older = fake_helper(tmp_path, f'print(json.dumps({{"serve": 1}}), flush=True)\n{ANSWER}')
    server = BuildServer(older, timeout=60)
    try:
        assert server.build([tmp_path], tmp_path, generate={"root": str(tmp_path)}) is None
    finally:
        server.close()
    assert server.serves is False


READS = (
    'print(json.dumps({"code": 0, "stdout": "kind: X\\n", "stderr": "", '
    '"reads": [["file", "/x/kustomization.yaml"]]}), flush=True)'
)


@pytest.mark.parametrize(("version", "traced"), [(2, False), (3, True), (4, True)])
def test_a_helper_says_what_it_read_from_version_3_and_a_later_one_serves_too(
    tmp_path: Path, version: int, traced: bool
) -> None:
    """A helper of version 2 serves, but does not name its reads: its builds are not kept. A
    later helper than this code knows still serves (requests only gain members)."""
    helper = fake_helper(
        tmp_path,
        f'print(json.dumps({{"serve": {version}}}), flush=True)\nsys.stdin.readline()\n{READS}',
    )
    server = BuildServer(helper, timeout=60)
    try:
        done = server.build([tmp_path], tmp_path, trace=True)
    finally:
        server.close()
    assert done is not None and done.stdout == "kind: X\n"
    assert server.reads == ([["file", "/x/kustomization.yaml"]] if traced else None)


def test_a_kept_process_that_ended_is_started_again(tmp_path: Path) -> None:
    # answers one build, then ends (as the helper does after a build that panicked)
    once = fake_helper(
        tmp_path, f'print(json.dumps({{"serve": 2}}), flush=True)\nsys.stdin.readline()\n{ANSWER}'
    )
    server = BuildServer(once, timeout=60)
    try:
        first, second = server.build([tmp_path], tmp_path), server.build([tmp_path], tmp_path)
    finally:
        server.close()
    assert first is not None and second is not None
    assert first.stdout == second.stdout == "kind: X\n"


def test_a_fresh_process_that_ends_without_answering_is_the_builds_error(tmp_path: Path) -> None:
    dies = fake_helper(
        tmp_path,
        'print(json.dumps({"serve": 2}), flush=True)\nsys.stdin.readline()\n'
        "print('fatal error: stack overflow', file=sys.stderr)\nsys.exit(2)",
    )
    server = BuildServer(dies, timeout=60)
    with pytest.raises(RenderError, match=r"ended while building .*fatal error: stack overflow"):
        server.build([tmp_path], tmp_path / "app")
    server.close()


def test_a_build_past_its_timeout_is_an_error_and_ends_the_process(tmp_path: Path) -> None:
    hangs = fake_helper(tmp_path, 'print(json.dumps({"serve": 2}), flush=True)\nsys.stdin.read()')
    server = BuildServer(hangs, timeout=0.5)
    with pytest.raises(RenderError, match=r"did not finish a build in 0\.5 s"):
        server.build([tmp_path], tmp_path)
    assert server._proc is None


@needs_helper
def test_every_build_of_a_revision_goes_through_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {f"app{i}/kustomization.yaml": PATCHED for i in range(3)}
    files |= {f"app{i}/deploy.yaml": DEPLOYMENT for i in range(3)}
    repo.commit(files)
    started: list[list[str]] = []
    real = subprocess.Popen

    def counting(argv: list[str], *args: object, **kwargs: object) -> object:
        started.append(list(argv))
        return real(argv, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", counting)
    objects = render.render_kustomize_paths(repo.root, "HEAD", ["app0", "app1", "app2"])
    assert len(objects) == 3
    helpers = [argv for argv in started if Path(argv[0]).name == render.HELPER]
    assert helpers == [[HELPER, "--serve"]]
