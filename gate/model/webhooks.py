"""The names of prune-gate's webhook entries in its ValidatingWebhookConfiguration: one table.

`webhook.register` (and the chart, checked against it by tests) names the entries it writes by
these; the GUARD_TAMPERED rule of `gate check` recognises prune-gate's own configuration in a
candidate's manifests by them. gate never imports webhook, so the table lives here, below both.
Pure data.
"""

from __future__ import annotations

#: The entry that decides the guarded kinds' DELETEs, and the UPDATEs and CREATEs that matter.
WEBHOOK_NAME = "prune-gate.prune-gate.io"
#: The entry for the fence Lease (`webhook.guards`), separate from the guarded kinds' entry.
FENCE_WEBHOOK_NAME = "fence.prune-gate.io"
#: Every entry of prune-gate's configuration: a configuration with one of them is a guard.
GUARD_WEBHOOKS = frozenset({WEBHOOK_NAME, FENCE_WEBHOOK_NAME})
