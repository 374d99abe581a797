"""Process-level speed-ups, in one place, each with what it saves and how that was measured.

Each trick here trades clarity for time or memory that every CI step pays, so each is kept only
while its measurement says it pays; `python -m bench.bench_speedups` measures them all again: a
fresh `gate check` process per run, with and without each, interleaved, median of 15 runs, on
bench_check's rendered input (10,000 objects in 2,000 files a side, parse cache off so each run
parses, native YAML reader) and on the bundled incident (examples/incident, 5 objects). Figures
from this project's 2-core machine with other work running (five other sessions and a CI run):
CPU time (user + system) is quoted first, as the steadier figure; wall time swings with the load.

Two runs of the bench, the first beside heavy load, the second on a quieter machine:

- `quick_exit`, the exit path of the `gate` console script: 10,000 objects: CPU 0.43 / 0.41 s
  with it, 0.49 / 0.46 s with Python's own exit (-0.065 / -0.050 s, 13 / 11 %); wall 0.94 /
  0.41 s vs 1.17 / 0.47 s. On the incident, 0.01 s CPU (0.19 s vs 0.20 s): the teardown it
  skips grows with the input.
- `without_cyclic_gc`, the collector paused for `gate check`: 10,000 objects: CPU 0.43 / 0.41 s
  vs 0.46 / 0.44 s with the collector on (-0.035 / -0.032 s, 8 %), no full collection instead
  of 2; wall 0.94 / 0.41 s vs 0.99 / 0.45 s. On the incident, no difference.
- `blake2b` from `_blake2`, not `hashlib`: peak RSS 43.2 / 43.5 MiB vs 46.9 / 46.9 MiB
  (-3.7 / -3.4 MiB: hashlib loads OpenSSL's `_hashlib`); import 0.2 ms vs 2.7 ms
  (`-X importtime`); CPU on 10,000 objects +0.001 / -0.024 s with it: within the noise.

What stays where it works, each with its reason there: imports deferred to the run that needs
them (`gate.cli.root`'s commands, jsonschema in `gate.sources.policyfile`, the thread pool in
`gate.cli.check`, hashlib in `gate.engine.cascades`), held by tests/unit/test_startup.py; the
shape checks' quick pass (`gate.model.shapes`); `os.scandir` rather than a Path per file
(`gate.sources.manifests`); the Makefile's `editable_mode=compat` install. `mallopt` belongs to
the webhook's server (webhook/serve.py). The native YAML reader (native/) and the parse cache
(`gate.sources.parsecache`) are features with their own benchmarks (bench_git, bench_check);
what they save in work, counted, is in `python -m bench.bench_internals`.

Stdlib only, and it imports nothing of `gate`: the CLI and the sources use it, the pure layers
never do (an import-linter contract holds both).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

try:
    # hashlib's own BLAKE2, without hashlib: importing hashlib loads OpenSSL, 3.7 MiB of a
    # check's memory and 2.5 ms of its start, for hashes it does not use.
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built otherwise
    from hashlib import blake2b

__all__ = ["blake2b", "quick_exit", "without_cyclic_gc"]

F = TypeVar("F", bound=Callable[..., Any])


def without_cyclic_gc(f: F) -> F:
    """Run a batch command with the cyclic garbage collector paused, and resume it after.

    A check builds tens of thousands of long-lived, acyclic objects (parsed bodies, identities)
    and frees them at exit; each collection on the way walks all of them again, for nothing
    (on 10,000 objects a side, 8 % of the CPU: see the module docstring). Reference
    counting still frees everything that is dropped; the collector comes back on when the
    command returns (or raises), so an in-process caller (a test) keeps its own; a caller that
    had it off keeps it off.
    """

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return f(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return cast(F, run)


def quick_exit(code: object) -> NoReturn:
    """End the process with `code` (a `SystemExit.code`) as a normal exit would, minus its teardown.

    When a command returns, its output is written; what a normal exit adds is the interpreter
    freeing every object one by one (11-13 % of the CPU of a check of 10,000 objects a side: see
    the module docstring), for nothing: the kernel takes the memory back at once. So the
    streams are flushed, the exit handlers run (the parse cache writes there), and the process
    ends with the command's code.
    A stream that cannot be flushed (a closed pipe), a thread still running (a normal exit
    waits for it), or a profiler or tracer (`python -m cProfile -m gate`, coverage: they report
    after the program) takes Python's own exit instead.
    """
    if sys.getprofile() is not None or sys.gettrace() is not None or _threads_running():
        sys.exit(code)  # type: ignore[arg-type]  # a profiler reports after; a normal exit waits
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)  # type: ignore[arg-type]
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): Python prints it and exits 1
        print(code, file=sys.stderr, flush=True)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):  # what an exit handler may have written
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _threads_running() -> bool:
    main = threading.main_thread()
    return any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main)
