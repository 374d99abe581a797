"""prune-gate: stop deletions that lose data or wedge a deploy, before and when they happen.

Layers, each importing only those below it (held by `lint-imports`, see README "Layout"):
`gate.cli` over `gate.report`, `gate.sources` and `gate.kube`, over the pure `gate.engine`, over the
stdlib-only `gate.model`. The webhook (`webhook`) sits beside the CLI on the same layers.
"""

__version__ = "0.2.0"
