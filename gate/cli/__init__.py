"""The `gate` command line (`gate.cli.root` is its group)."""

from gate.cli.root import WEBHOOK_EXTRA, main

__all__ = ["WEBHOOK_EXTRA", "main"]
