"""The `gate` command line (`gate.cli.root` is its group; `run` is the console script)."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

from gate.cli.root import WEBHOOK_EXTRA, main

__all__ = ["WEBHOOK_EXTRA", "main", "run"]


def run() -> NoReturn:
    """`gate`: the command, then a quick exit.

    When a command returns, its output is written; what a normal exit adds is the interpreter
    freeing every object one by one, 0.15-0.2 s after a check of 10,000 objects a side, for
    nothing: the kernel takes the memory back at once. So the streams are flushed, the exit
    handlers run (the parse cache writes there), and the process ends with the command's code.
    A stream that cannot be flushed (a closed pipe), a thread still running (a normal exit
    waits for it), or a profiler or tracer (`python -m cProfile -m gate`, coverage: they report
    after the program) takes Python's own exit instead.
    """
    try:
        main()  # standalone: it always ends in SystemExit
        code: object = 0
    except SystemExit as exc:
        code = exc.code
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
