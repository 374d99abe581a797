"""Golden AdmissionReview cases: one request, the live state it is decided on, the answer.

Each case in tests/golden/admission is `NAME.request.json` (the body the API server would POST,
malformed on purpose for `malformed-*`), optionally `NAME.live.yaml` (raw API objects that fill
the cache; a Lease is the fence; `customResourceCount` entries set a live count), and
`NAME.response.json`: the HTTP status, the body, and the Events the request queued. Every case is
decided with `prune-gate.yaml` beside them, through a test client of a real app.
`UPDATE_GOLDEN=1 pytest tests/unit/test_webhook_golden.py` rewrites the expected files; review
the diff.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.engine.fence import Lease, parse_lease
from gate.engine.livestate import LiveState
from gate.sources.policyfile import load_policy
from tests.unit.wsgiclient import client_of
from webhook.app import Settings, create_app
from webhook.cache import StaticCache
from webhook.events import RecordingSink

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "admission"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
CASES = sorted(p.name.removesuffix(".request.json") for p in GOLDEN.glob("*.request.json"))


def load_live(path: Path, guarded: frozenset[tuple[str, str]]) -> tuple[LiveState, Lease | None]:
    """Fill a LiveState from a case's live objects; the Lease among them is the fence."""
    live = LiveState(guarded)
    lease = None
    if not path.is_file():
        return live, None
    for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if "customResourceCount" in obj:
            c = obj["customResourceCount"]
            live.set_custom_resource_count(c["group"], c["kind"], c["count"])
        elif obj.get("kind") == "Lease":
            lease = parse_lease(obj)
        else:
            live.upsert(obj)
    return live, lease


def answer(case: str) -> dict[str, Any]:
    policy = load_policy(GOLDEN / "prune-gate.yaml")
    live, lease = load_live(GOLDEN / f"{case}.live.yaml", policy.guarded_kinds)
    sink = RecordingSink()
    app = create_app(
        Settings(policy=policy, cache=StaticCache(live, lease), events=sink, now=lambda: NOW)
    )
    body = (GOLDEN / f"{case}.request.json").read_bytes()
    with client_of(app) as client:
        resp = client.post("/validate", data=body, content_type="application/json")
    return {
        "status": resp.status_code,
        "body": resp.get_json(),
        "events": [
            {"reason": e.reason, "object": e.ref.display(), "message": e.message}
            for e in sink.events
        ],
    }


@pytest.mark.parametrize("case", CASES)
def test_golden_admission(case: str) -> None:
    got = answer(case)
    path = GOLDEN / f"{case}.response.json"
    if UPDATE:
        path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.is_file(), f"missing {path}: run with UPDATE_GOLDEN=1 to create it"
    assert got == json.loads(path.read_text(encoding="utf-8"))


def test_every_case_is_complete() -> None:
    """No orphan expected files, and at least the scenarios the issue names are covered."""
    expected = {p.name.removesuffix(".response.json") for p in GOLDEN.glob("*.response.json")}
    assert expected == set(CASES)
    for must in ("claim-mounted", "fence-held-deployer", "dry-run-refused", "malformed-not-json"):
        assert must in CASES


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("malformed-")])
def test_a_refusal_speaks_to_the_api_server_door(case: str) -> None:
    """A refusal is read at kubectl or in a deployer's events: there is no candidate to keep an
    object in, so no fix may say so (the CLI's wording for the same rule does)."""
    message = str((answer(case)["body"]["response"].get("status") or {}).get("message", ""))
    for wording in ("in the candidate", "to the candidate", "keep it in the manifests"):
        assert wording not in message, message
