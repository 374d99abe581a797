"""What the webhook answers for one request, and what it logs and records: the `Outcome`.

Both deciders build one (`webhook.decide` for guarded objects, `webhook.guards` for the fence
Lease) and the app turns it into the AdmissionReview response (`webhook.review.render_response`),
a log line, metrics and Events. It sits below both deciders, so they depend downward on it and
never on each other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gate.engine.verdict import Exempted, Verdict
from gate.model.events import EventSpec
from gate.model.findings import Finding
from webhook.review import AdmissionRequest, AdmissionResponse, Status

#: `Outcome.code` when no finding decided.
NO_CODE = "none"

#: The longest message we put in `status.message` (kubectl prints it whole).
MAX_MESSAGE = 2000
#: The API server may truncate a warning longer than this; we cut it ourselves, predictably.
MAX_WARNING = 256


@dataclass(frozen=True)
class Outcome:
    """The decision for one request: the answer, and what to log and record."""

    response: AdmissionResponse
    verdict: Verdict
    findings: tuple[Finding, ...] = ()
    overridden_by: str | None = None
    events: tuple[EventSpec, ...] = field(default=())
    deployer: bool = False
    #: Findings that would have refused and that a policy exemption let through (the answer
    #: allowed them with a warning and a `PruneExempted` Event); empty otherwise.
    exempted: tuple[Exempted, ...] = ()

    @property
    def code(self) -> str:
        """The finding code that decided: the refusal's reason, else the overridden refusal's,
        else the exempted refusal's, else a warning's, else `none`."""
        if self.response.status is not None:
            return self.response.status.reason
        if self.exempted and self.overridden_by is None:
            return self.exempted[0].finding.code.value
        return self.findings[0].code.value if self.findings else NO_CODE


def cut(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with an ellipsis when longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def allowed(req: AdmissionRequest, warnings: tuple[str, ...] = ()) -> AdmissionResponse:
    """The allowing answer to `req`, with its warnings."""
    return AdmissionResponse(req.uid, True, warnings=warnings)


def refused(
    req: AdmissionRequest, code: str, message: str, warnings: tuple[str, ...] = ()
) -> AdmissionResponse:
    """The refusing answer to `req`: 403, the finding code as the reason, the message."""
    return AdmissionResponse(req.uid, False, Status(403, code, message), warnings)


def allow_untouched(req: AdmissionRequest) -> Outcome:
    """The outcome of a request nothing applies to: allowed, nothing to log or record."""
    return Outcome(allowed(req), Verdict.ALLOW)
