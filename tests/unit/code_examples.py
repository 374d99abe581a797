"""The example on each code's page, made by the real rule on a tiny fixture (test_codes_pages).

Each code gets one scenario: a golden `gate check` case (tests/golden/check/NAME, run through the
CLI with `--format text`), an engine run with a live view (the objects as `gate check --live` or
the webhook's cache would hold them), or an admission review the webhook decides. What the door
prints for that code is the example; `gate.model.codeexamples` holds them, written by
`UPDATE_GOLDEN=1 pytest tests/unit/test_codes_pages.py`, so a page can never show a finding the
rules no longer make.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gate.app.check import CheckRequest, RenderedInputs, run_check
from gate.engine.check import CheckResult, check_objects
from gate.engine.context import Context
from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from gate.engine.remotes import compare_remotes
from gate.model.errors import UncountedError
from gate.model.findings import Code, Finding
from gate.report.common import visible
from tests.unit import test_cascades as cascades
from tests.unit import test_decide_bypasses as admission
from tests.unit import test_flux_moves as moves
from tests.unit.helpers import TODAY, claim, live_pod, run
from webhook.decide import decide_admission
from webhook.review import parse_review

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "check"

#: Where the example shows: what `gate check` prints, or what the webhook answers.
CHECK, WEBHOOK = "check", "webhook"

#: The CI environment `gate check` reads: a golden case runs outside CI (as test_golden_check).
_CI_VARIABLES = (
    "GITHUB_ACTIONS",
    "GITHUB_EVENT_NAME",
    "GITHUB_EVENT_PATH",
    "GITHUB_OUTPUT",
    "GITHUB_STEP_SUMMARY",
)

#: Codes whose example is a golden `gate check` case: code -> the case's directory name.
GOLDEN_CASES: dict[Code, str] = {
    Code.NOT_RETIRED: "not-retired",
    Code.SPECULATIVE_PRUNE: "speculative-prune",
    Code.CONSUMER_REMAINS: "consumer-remains",
    Code.FORCED_REPLACEMENT: "forced-replacement",
    Code.IMMUTABLE_FIELD_CHANGE: "immutable-field-change",
    Code.NAMESPACE_HOLDS_CLAIMS: "namespace-holds-claims",
    Code.STATEFULSET_DELETES_CLAIMS: "statefulset-deletes-claims",
    Code.CRD_HOLDS_RESOURCES: "crd-holds-resources",
    Code.PV_BOUND: "pv-bound",
    Code.ORPHANED_BY_KEEP: "orphaned-by-keep",
    Code.VOLUME_RETAINS_DATA: "volume-retains-data",
    Code.OWNER_REFERENCE_ADDED: "owner-reference-added",
    Code.RETENTION_DELETES_CLAIMS: "retention-deletes-claims",
    Code.OVERRIDE_IN_MANIFEST: "override-in-manifest",
    Code.GUARD_TAMPERED: "guard-tampered",
    Code.RECLAIM_SWITCHED_TO_DELETE: "reclaim-switched-to-delete",
    Code.RELEASE_CONTENT_UNKNOWN: "release-content-unknown",
    Code.KUSTOMIZATION_REMOVED: "kustomization-removed",
    Code.MASS_PRUNE: "mass-prune",
    Code.FORCE_DISABLED_VOID: "force-disabled-void",
}


@contextmanager
def _in(directory: Path) -> Iterator[None]:
    """Run from `directory`, outside CI, and come back."""
    saved = {name: os.environ.pop(name) for name in _CI_VARIABLES if name in os.environ}
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)
        os.environ.update(saved)


def golden_findings(case: str) -> tuple[Finding, ...]:
    """What `gate check --base-manifests base --head-manifests head` finds on a golden case,
    from its directory, with its `args` (only `--context` and `--force` are used there)."""
    directory = GOLDEN / case
    args_file = directory / "args"
    args = args_file.read_text(encoding="utf-8").split() if args_file.is_file() else []
    context = Context(args[args.index("--context") + 1]) if "--context" in args else Context.PREVIEW
    request = CheckRequest(RenderedInputs("base", "head"), context, force="--force" in args)
    with _in(directory):
        done = run_check(request, say=lambda _: None)
    return done.result.decision.findings


def _findings(result: CheckResult) -> tuple[Finding, ...]:
    return result.decision.findings


def _state(*objs: tuple[str, str, dict[str, Any]]) -> LiveState:
    return cascades.state(*objs)


def claim_mounted() -> tuple[Finding, ...]:
    live = _state(("v1", "Pod", live_pod("web-0", "data")))
    return _findings(run(claim(retire="moved to new-db"), "", live=live))


def reclaim_delete_loses_data() -> tuple[Finding, ...]:
    pv = {"metadata": {"name": "pv-1"}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}
    live_claim = {"metadata": {"name": "data", "namespace": "app"}, "spec": {"volumeName": "pv-1"}}
    live = _state(("v1", "PersistentVolumeClaim", live_claim), ("v1", "PersistentVolume", pv))
    return _findings(run(claim(), "", live=live))


def already_terminating() -> tuple[Finding, ...]:
    meta = {
        "name": "data",
        "namespace": "app",
        "annotations": {"prune-gate.io/retire": "moved to new-db"},
        "deletionTimestamp": "2026-12-01T09:00:00Z",
        "finalizers": ["kubernetes.io/pvc-protection"],
    }
    live = _state(("v1", "PersistentVolumeClaim", {"metadata": meta, "spec": {}}))
    return _findings(run(claim(), claim(), live=live, context=Context.MERGED))


def release_uninstall_deletes() -> tuple[Finding, ...]:
    live = _state(("v1", "PersistentVolumeClaim", cascades.release_claim()))
    return _findings(run(cascades.helm_release(), cascades.CONFIGMAP, live=live))


def kustomization_prunes_guarded() -> tuple[Finding, ...]:
    entries = [cascades.CLAIM_ID, cascades.CONFIGMAP_ID]
    live = _state(cascades.live_kustomization(entries), cascades.flux_claim())
    return _findings(run(cascades.kustomization(), cascades.CONFIGMAP, live=live))


def application_deletes_resources() -> tuple[Finding, ...]:
    finalizer = cascades.ARGO_FIN
    live = _state(cascades.live_application([finalizer]), cascades.flux_claim())
    return _findings(run(cascades.application(finalizer), cascades.CONFIGMAP, live=live))


def owner_deletes_dependents() -> tuple[Finding, ...]:
    live = _state(cascades.owned_claim(cascades.DB_OWNER))
    return _findings(run(cascades.DB, cascades.CONFIGMAP, live=live))


def flux_move_prunes() -> tuple[Finding, ...]:
    return _findings(moves.run(*moves.sides()))


def remote_content_unknown() -> tuple[Finding, ...]:
    url = "https://raw.githubusercontent.com/example/db/v1.2.0/deploy/db.yaml"
    file = "apps/db/kustomization.yaml"
    lines: tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]] = ({(file, url): 4}, {})
    findings, notes = compare_remotes({(file, url)}, set(), speculative=False, lines=lines)
    assert not notes
    result = check_objects(
        [], [], context=Context.PREVIEW, policy=Policy(), today=TODAY, extra_findings=findings
    )
    return _findings(result)


def _refusal(outcome: Any) -> str:
    assert not outcome.response.allowed, outcome
    message: str = outcome.response.status.message
    return message


def speculation_fence() -> str:
    retired = admission.claim(ann={admission.RETIRE: "moved to new-db"})
    doc = admission.request("DELETE", retired)
    return _refusal(admission.decide(doc, retired, fence=admission.HELD))


def unidentified_object() -> str:
    doc = admission.request("DELETE", None, user="kubernetes-admin", name="")
    doc["request"]["kind"] = {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"}
    return _refusal(admission.decide(doc))


class _Uncountable(LiveState):
    """A cache whose list of a custom kind fails, said as webhook.cache says it."""

    def custom_resource_count(self, group: str, kind: str) -> int | None:
        raise UncountedError(
            f"{kind}.{group}: the custom resources cannot be counted: ApiError: 403 forbidden"
        )


def resources_uncounted() -> str:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "backups.example.com", "uid": "uid-crd"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Backup", "plural": "backups"},
            "scope": "Namespaced",
        },
    }
    doc = admission.request("DELETE", crd, user="kubernetes-admin")
    state = _Uncountable(admission.POLICY.guarded_kinds)
    state.upsert(crd)
    req = parse_review(json.dumps(doc).encode())
    outcome = decide_admission(req, admission.POLICY, state, admission.FREE, admission.NOW.date())
    return _refusal(outcome)


#: Codes whose `gate check` example is made here from the engine and a live view.
CHECK_SCENARIOS: dict[Code, Callable[[], tuple[Finding, ...]]] = {
    Code.CLAIM_MOUNTED: claim_mounted,
    Code.RECLAIM_DELETE_LOSES_DATA: reclaim_delete_loses_data,
    Code.ALREADY_TERMINATING: already_terminating,
    Code.RELEASE_UNINSTALL_DELETES: release_uninstall_deletes,
    Code.KUSTOMIZATION_PRUNES_GUARDED: kustomization_prunes_guarded,
    Code.APPLICATION_DELETES_RESOURCES: application_deletes_resources,
    Code.OWNER_DELETES_DEPENDENTS: owner_deletes_dependents,
    Code.FLUX_MOVE_PRUNES: flux_move_prunes,
    Code.REMOTE_CONTENT_UNKNOWN: remote_content_unknown,
}

#: Codes only the webhook makes: the message it refuses the request with.
WEBHOOK_SCENARIOS: dict[Code, Callable[[], str]] = {
    Code.SPECULATION_FENCE: speculation_fence,
    Code.UNIDENTIFIED_OBJECT: unidentified_object,
    Code.RESOURCES_UNCOUNTED: resources_uncounted,
}


def example(code: Code) -> tuple[str, str]:
    """(door, example) for `code`, made by the real rule now."""
    if code in WEBHOOK_SCENARIOS:
        return WEBHOOK, WEBHOOK_SCENARIOS[code]()
    if code in GOLDEN_CASES:
        findings = golden_findings(GOLDEN_CASES[code])
    else:
        findings = CHECK_SCENARIOS[code]()
    first = next((f for f in findings if f.code is code), None)
    assert first is not None, f"no {code} finding: {[f.code.value for f in findings]}"
    return CHECK, finding_text(first)


def finding_text(finding: Finding) -> str:
    """One finding alone, in the text report's words: severity, code, object and where; the
    message; each line of evidence; the fix. (The report groups an object's findings, and says
    where the candidate shows it too; a page shows one code's, where base declares it.)"""
    src = str(finding.source) if finding.source is not None else ""  # where base declares it
    header = f"{finding.severity.value} {finding.code.value} {visible(finding.ref.display())}"
    lines = [header + (f" ({visible(src)})" if src else "")]
    lines.append(f"  {visible(finding.message)}")
    lines.extend(f"  - {visible(e)}" for e in finding.evidence)
    if finding.remediation:
        lines.append(f"  fix: {visible(finding.remediation)}")
    return "\n".join(lines)


def _quote(text: str) -> str:
    """A Python string literal, quoted as ruff formats it: double quotes, unless the text holds
    more double quotes than single ones."""
    body = text.replace("\\", "\\\\").replace("\n", "\\n")
    quote = "'" if text.count('"') > text.count("'") else '"'
    return quote + body.replace(quote, "\\" + quote) + quote


def _chunks(text: str, width: int) -> list[str]:
    """`text` cut into pieces whose literals fit `width`: after a run of spaces or a newline, and
    inside a word only when the word alone does not fit."""
    pieces: list[str] = []
    for line in text.splitlines(keepends=True):
        current = ""
        for token in re.findall(r"\s+|\S+\s*", line):
            if current and len(_quote(current + token)) > width:
                pieces.append(current)
                current = ""
            while len(_quote(token)) > width:  # a word longer than a line: cut it
                cut = width - 2 - token.count('"') - token.count("'")
                pieces.append(token[: max(cut // 2, 10)])
                token = token[max(cut // 2, 10) :]
            current += token
        pieces.append(current)
    return [p for p in pieces if p]


def module_text(examples: dict[Code, tuple[str, str]]) -> str:
    """`gate/model/codeexamples.py` for these examples, formatted as ruff formats it."""
    lines = [
        '"""The example on each code\'s page: what the real rule prints on a tiny fixture.',
        "",
        "Generated from the scenarios of tests/unit/code_examples.py by",
        "`UPDATE_GOLDEN=1 pytest tests/unit/test_codes_pages.py`; do not edit: that test fails",
        "when a rule's output drifts from its page.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from gate.model.findings import Code",
        "",
        "#: code -> (door, example): `check` is a finding as `gate check` prints it, `webhook`",
        "#: the message the webhook refuses a request with (kubectl prints it after",
        "#: `denied the request:`).",
        "EXAMPLES: dict[Code, tuple[str, str]] = {",
    ]
    for code, (door, text) in examples.items():
        lines.append(f"    Code.{code.name}: (")
        lines.append(f"        {_quote(door)},")
        pieces = _chunks(text, 100 - 12)
        if len(pieces) == 1:
            lines.append(f"        {_quote(pieces[0])},")
        else:
            lines.append("        (")
            lines.extend(f"            {_quote(p)}" for p in pieces)
            lines.append("        ),")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"
