"""Small builders for tests: YAML in, a CheckResult out; and a throwaway git repository."""

from __future__ import annotations

import datetime as dt
import inspect
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.model.findings import Code
from gate.model.liveview import LiveView
from gate.sources.manifests import parse_stream

TODAY = dt.date(2026, 12, 2)


def run(
    base: str,
    head: str,
    *,
    context: Context = Context.PREVIEW,
    policy: Policy | None = None,
    force: bool = False,
    live: LiveView | None = None,
) -> CheckResult:
    """Check two YAML streams (dedented) with a fixed date."""
    return check_objects(
        parse_stream(textwrap.dedent(base), "base.yaml"),
        parse_stream(textwrap.dedent(head), "head.yaml"),
        context=context,
        policy=policy or Policy(),
        today=TODAY,
        force=force,
        live=live,
    )


def codes(result: CheckResult) -> set[Code]:
    """The codes of the findings that survived policy."""
    return {f.code for f in result.decision.findings}


CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: app{annotations}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: {size}
"""


def claim(size: str = "10Gi", retire: str | None = None, extra_ann: str = "") -> str:
    """A claim app/data, optionally annotated for retirement."""
    ann = ""
    if retire or extra_ann:
        ann = "\n  annotations:"
        if retire:
            ann += f'\n    prune-gate.io/retire: "{retire}"'
        if extra_ann:
            ann += f"\n    {extra_ann}"
    return CLAIM.format(annotations=ann, size=size)


def deployment(claim_name: str = "data") -> str:
    """A Deployment app/web mounting a claim."""
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
spec:
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: web, image: nginx}}]
      volumes:
        - name: data
          persistentVolumeClaim: {{claimName: {claim_name}}}
"""


def live_pod(
    name: str, claim_name: str, node: str = "n1", phase: str = "Running", **meta: Any
) -> dict[str, Any]:
    """A live pod app/<name> on a node, mounting a claim."""
    return {
        "metadata": {"name": name, "namespace": "app", "uid": f"uid-{name}", **meta},
        "spec": {
            "nodeName": node,
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
        "status": {"phase": phase},
    }


def live_workload(name: str, claim_name: str = "data", **meta: Any) -> dict[str, Any]:
    """A live workload app/<name> (any kind) whose pod template mounts a claim."""
    volume = {"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}
    return {
        "metadata": {"name": name, "namespace": "app", **meta},
        "spec": {"template": {"spec": {"volumes": [volume]}}},
    }


def doc(*parts: str) -> str:
    """Join documents into one stream."""
    return "---\n".join(parts)


class GitRepo:
    """A throwaway repository: write files, commit, return the sha."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.name", "Test")
        self.git("config", "user.email", "test@example.invalid")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.root, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    def write(self, files: dict[str, str | None]) -> None:
        """Write (or, for None, delete) files relative to the root."""
        for path, text in files.items():
            target = self.root / path
            if text is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(text), encoding="utf-8")

    def commit(self, files: dict[str, str | None], message: str = "change") -> str:
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


def cli_runner() -> CliRunner:
    """A runner whose result keeps stderr apart, in every click pyproject admits (8.1 mixes the
    two unless told; 8.2 dropped the switch and always keeps them apart)."""
    options: dict[str, Any] = {}
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:
        options["mix_stderr"] = False
    return CliRunner(**options)


def run_together(
    script: str,
    argvs: Sequence[Sequence[str]],
    env: dict[str, str] | None = None,
    guard: float = 120,
) -> list[str]:
    """One Python process per argument list running `script`, all started before any is told
    to go (each waits for a line on stdin), as concurrent runs of a cache are; what each printed.
    `guard` is a hang guard, not a speed target. Each must exit 0 and print nothing on stderr."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in argvs
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=guard)
            assert (proc.returncode, err) == (0, "")
            outs.append(out.strip())
    finally:
        for proc in procs:
            proc.kill()
    return outs
