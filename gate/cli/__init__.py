"""The `gate` command line (`gate.cli.root` is its group; `run` is the console script)."""

from __future__ import annotations

from typing import NoReturn

from gate.cli.root import WEBHOOK_EXTRA, main
from gate.speed import quick_exit

__all__ = ["WEBHOOK_EXTRA", "main", "run"]


def run() -> NoReturn:
    """`gate`: the command, then a quick exit with its code (`gate.speed.quick_exit` says why)."""
    try:
        main()  # standalone: it always ends in SystemExit
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    quick_exit(code)
