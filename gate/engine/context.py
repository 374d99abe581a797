"""The deploy context: where a decision is taken (its detection is `gate.sources.github`).

`speculative`: a merge-group candidate, which may be evicted and never merge. `merged`: a push to
the default branch. `preview`: a pull request, or a person at a laptop. `admission`: the webhook,
deciding one DELETE at the API server.
"""

from __future__ import annotations

from enum import StrEnum


class Context(StrEnum):
    """Where a decision is taken; severities can differ per context."""

    SPECULATIVE = "speculative"
    MERGED = "merged"
    PREVIEW = "preview"
    ADMISSION = "admission"
