"""The speculation fence: a `coordination.k8s.io/v1` Lease CI holds during a speculative deploy.

While CI deploys a merge-queue candidate it holds the Lease (holder = the candidate SHA, renewed
with an expiry). Deletions of guarded objects by the deployer identities are refused while it is
held, because the candidate that causes them may be evicted and never merge. A fence whose holder
stopped renewing is *expired*: it is reported, never obeyed forever, or a crashed CI job would
freeze every prune in the cluster.

Pure: the Lease arrives as its raw API JSON (or a projection of it) and `now` is passed in; no
clock and no network here. The rule that reads it, `check_speculation_fence`, is in
`gate.engine.rules.guard`: the webhook puts the fence's state in the rules' `World`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gate.model.findings import FixAction, command

#: The annotation `gate fence hold` writes on the Lease: the Kubernetes user that holds it. The
#: webhook lets only that user clear, backdate or shorten a held fence (`webhook.guards`).
HOLDER_USER = "prune-gate.io/fence-holder-user"

#: The longest a fence may say it holds, from the moment it is written: a day. CI holds it for
#: minutes (`gate fence hold --duration`, 30m by default) and renews it; a fence written to hold
#: longer, or renewed in the future, would freeze every deployer prune until a break-glass member
#: found it, so the webhook refuses to record one (`webhook.guards`).
MAX_HOLD_SECONDS = 24 * 3600


class FenceState(StrEnum):
    """What the fence says right now."""

    HELD = "held"
    EXPIRED = "expired"
    FREE = "free"  # no Lease, or a Lease without a holder (released)


@dataclass(frozen=True, slots=True)
class Lease:
    """The fields of a Lease the fence reads."""

    namespace: str
    name: str
    holder: str | None
    renewed: dt.datetime | None
    duration_seconds: int | None

    def release_command(self) -> FixAction:
        """How a person frees a fence whose holder is gone: delete the Lease."""
        return command(f"kubectl delete lease -n {self.namespace} {self.name}")


@dataclass(frozen=True, slots=True)
class FenceStatus:
    """The fence evaluated at one instant."""

    state: FenceState
    lease: Lease | None = None
    expires: dt.datetime | None = None
    #: The instant it was evaluated at (None: built by hand, not by `fence_status`).
    at: dt.datetime | None = None

    @property
    def holder(self) -> str | None:
        return self.lease.holder if self.lease is not None else None

    def describe(self) -> str:
        """`Lease ns/name held by SHA until T` (or expired / free)."""
        if self.lease is None:
            return "no fence Lease"
        where = f"Lease {self.lease.namespace}/{self.lease.name}"
        until = f" (expiry {iso_time(self.expires)})" if self.expires else ""
        if self.state is FenceState.HELD:
            return f"{where} held by {self.holder}{until}"
        if self.state is FenceState.EXPIRED:
            return f"{where} held by {self.holder} but expired{until}"
        return f"{where} is not held"


def iso_time(t: dt.datetime | None) -> str:
    """An instant as Kubernetes writes it (`2026-12-02T12:03:00.5Z`), `?` when unknown."""
    return t.isoformat().replace("+00:00", "Z") if t else "?"


def parse_time(text: Any) -> dt.datetime | None:
    """A Kubernetes MicroTime or Time (`2026-12-02T13:00:00.123456Z`), timezone-aware."""
    if not isinstance(text, str) or not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def parse_lease(obj: dict[str, Any]) -> Lease:
    """Project a raw Lease (API JSON) to the fields the fence needs."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(meta, dict) and isinstance(spec, dict)
    holder = spec.get("holderIdentity")
    duration = spec.get("leaseDurationSeconds")
    return Lease(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        holder=holder if isinstance(holder, str) and holder else None,
        renewed=parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime")),
        duration_seconds=duration if isinstance(duration, int) else None,
    )


def fence_status(lease: Lease | None, now: dt.datetime) -> FenceStatus:
    """Held when a holder renewed it less than leaseDurationSeconds ago; expired when not.

    A holder with no renew time or no duration is treated as expired: a fence that cannot say
    when it ends must not freeze prunes forever.
    """
    if lease is None or lease.holder is None:
        return FenceStatus(FenceState.FREE, lease, at=now)
    if lease.renewed is None or lease.duration_seconds is None:
        return FenceStatus(FenceState.EXPIRED, lease, at=now)
    expires = lease.renewed + dt.timedelta(seconds=lease.duration_seconds)
    state = FenceState.HELD if now < expires else FenceState.EXPIRED
    return FenceStatus(state, lease, expires, now)
