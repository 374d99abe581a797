"""prune-gate: stop deletions that lose data or wedge a deploy, before and when they happen.

The package is a pure rule engine (`gate.rules`, `gate.plan`, `gate.verdict`) with thin edges that
adapt the world to it: manifests and git trees (`gate.manifests`, `gate.gitsource`), the live
cluster (`gate.cluster`), and the reports and CLI (`gate.report`, `gate.cli`).
"""

__version__ = "0.1.0"
