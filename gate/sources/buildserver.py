"""The confined kustomize helper kept running across builds (`prune-gate-kustomize --serve`).

A Flux repository is many Kustomizations, each built at two revisions, and kustomize parses the
Kubernetes OpenAPI schema embedded in it for every build that patches (0.2 s of a build that
otherwise takes 0.01 s): on onedr0p/home-ops that was 157 builds. One kept process per
revision pays that once. The helper answers one JSON line per request with the exit code and
output a process of its own would have given, and resets what one build could leave for the
next (see tools/kustomize). Anything that goes wrong with the kept process is a build error as
before: a build past its timeout kills it; a process that ends without answering is started
again for the next build, or its stderr is the error when a fresh one did that; a helper that
does not say it serves (an older one named by PRUNE_GATE_KUSTOMIZE) is run once per build.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from gate.model.errors import RenderError

#: What the helper says first when it serves: 3 since it names what a build read (for the
#: build cache), 2 since it runs Flux's generator (a helper that says 1 is older, and treated as
#: one that does not serve; one that says 2 serves, untraced). A later one says more, and
#: serves what this asks: requests only gain members it may ignore.
HELLO = {"serve": 3}
_SERVES_FROM = 2


class BuildServer:
    """One `helper --serve` process, started on first use; `build` is thread-unsafe (one
    server per revision, each read by one thread)."""

    def __init__(self, helper: str, timeout: float) -> None:
        self.helper, self.timeout = helper, timeout
        self.serves = True  # until the helper shows it does not
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._traces = False
        #: What the last build read, when asked (`trace`) and the helper says: [kind, path]
        #: pairs (tools/kustomize/trace.go); else None.
        self.reads: list[list[str]] | None = None

    def build(
        self,
        roots: list[Path],
        target: Path,
        flux: dict[str, Any] | None = None,
        remote: dict[str, str] | None = None,
        generate: dict[str, Any] | None = None,
        *,
        trace: bool = False,
    ) -> subprocess.CompletedProcess[str] | None:
        """The helper's result for `target` confined to `roots`, or None when it does not serve
        (the caller runs it once per build instead). `flux` is a Flux Kustomization's post-build
        (tools/kustomize/flux.go): the helper substitutes with Flux's own code; `remote` maps a
        remote entry's URL to its fetched file; `generate` has Flux's generator make (or amend)
        a directory's kustomization file before the build (flux.go's fluxGenerate); `trace`
        asks what the build read, kept in `reads`."""
        self.reads = None
        ask: dict[str, Any] = {"roots": [str(r) for r in roots], "target": str(target)}
        if trace:
            ask["trace"] = True
        if generate is not None:
            ask["generate"] = generate
        if flux is not None:
            ask["flux"] = flux
        if remote:
            ask["remote"] = remote
        request = json.dumps(ask)
        argv = [self.helper, "--serve", str(target)]
        for attempt in (1, 2):
            fresh = self._proc is None
            if fresh and not self._start():
                return None
            answer = self._ask(request.encode() + b"\n")
            if answer is not None:
                code, out, err = answer["code"], answer["stdout"], answer["stderr"]
                if trace and self._traces:
                    self.reads = _reads_of(answer.get("reads"))
                return subprocess.CompletedProcess(argv, code, out, err)
            # it ended without answering: a kept one may have ended after an earlier build's
            # panic, so one more try on a fresh one; a fresh one's death is this build's error
            stderr = self._close()
            if fresh or attempt == 2:
                raise RenderError(
                    f"`{self.helper} --serve` ended while building {target}: "
                    f"{stderr.strip() or 'no message'}"
                )
        raise AssertionError("unreachable")

    def close(self) -> None:
        """End the process (its input closes; it exits at once)."""
        self._close()

    def _start(self) -> bool:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept open while it runs)
        try:
            self._proc = subprocess.Popen(
                [self.helper, "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
            )
        except OSError as exc:
            self._close()
            raise RenderError(f"cannot run {self.helper}: {exc}") from None
        hello = self._read_line()
        version = hello.get("serve") if isinstance(hello, dict) and len(hello) == 1 else None
        if type(version) is not int or version < _SERVES_FROM:  # an older helper: a usage
            self._close()  # error, or a build of "--serve"
            self.serves = False
            return False
        self._traces = version >= HELLO["serve"]
        return True

    def _ask(self, request: bytes) -> dict[str, Any] | None:
        """The answer to `request`, or None when the process ended first."""
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(request)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        answer = self._read_line()
        if not isinstance(answer, dict) or not {"code", "stdout", "stderr"} <= answer.keys():
            return None
        return answer

    def _read_line(self) -> Any:
        """One JSON line from the process within the timeout, or None at its end (or for a line
        that is not JSON); past the timeout the process is killed and the build is an error."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        chunks: list[bytes] = []
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self._close(kill=True)
                    raise RenderError(
                        f"`{self.helper} --serve` did not finish a build in {self.timeout:g} s"
                    )
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return None
                chunks.append(chunk)
                if chunk.endswith(b"\n"):  # an answer is one line, and ends with its newline
                    break
        try:
            return json.loads(b"".join(chunks))
        except ValueError:
            return None

    def _close(self, kill: bool = False) -> str:
        """End the process if any (`kill`: at once, not when its input closes); what it wrote to
        stderr."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if kill:
                proc.kill()
            if proc.stdin is not None:
                with contextlib.suppress(OSError):  # a broken pipe: it has ended
                    proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        stderr = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            stderr = self._stderr.read().decode(errors="replace")
            self._stderr.close()
            self._stderr = None
        return stderr


def _reads_of(raw: object) -> list[list[str]] | None:
    """The helper's `reads` ([] when it read nothing), or None when they are not what it sends."""
    if raw is None:
        return []
    if isinstance(raw, list) and all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in raw
    ):
        return raw
    return None
