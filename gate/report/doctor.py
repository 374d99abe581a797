"""How `gate doctor` and `gate heal` print their answers: text for a person at 3 a.m., JSON for
a machine. Every string that came from the cluster is made inert (`inert`): an object name or a
condition message must not write terminal escapes or CI commands."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gate.engine.doctor import MEANING, Diagnosis, State, elapsed_text, stamp
from gate.engine.heal import HealPlan, Outcome
from gate.engine.policy import duration_text
from gate.model.refs import ObjectRef
from gate.report.common import inert


def _stamp(t: dt.datetime | None) -> str | None:
    return stamp(t) if t else None


def _ref(r: ObjectRef) -> dict[str, str]:
    return {"group": r.group, "kind": r.kind, "namespace": r.namespace, "name": r.name}


def diagnosis_json(d: Diagnosis, now: dt.datetime) -> dict[str, Any]:
    return {
        "object": _ref(d.ref),
        "uid": d.uid,
        "state": d.state.value,
        "meaning": MEANING[d.state],
        "reason": d.reason,
        "deletionRequestedAt": _stamp(d.requested),
        "waitingSeconds": round((now - d.requested).total_seconds()) if d.requested else None,
        "finalizers": [{"name": f.name, "owner": f.owner} for f in d.finalizers],
        "evidence": list(d.evidence),
        "pods": [
            {
                "namespace": p.namespace,
                "name": p.name,
                "uid": p.uid,
                "node": p.node,
                "nodeReady": p.node_ready,
                "phase": p.phase,
                "since": _stamp(p.since),
                "terminating": p.terminating,
                "owner": p.owner,
            }
            for p in d.pods
        ],
        "declaredAt": d.declared,
        "marks": [
            {
                "field": m.field,
                "key": m.key,
                "value": m.value,
                "writers": [
                    {
                        "manager": w.manager,
                        "operation": w.operation,
                        "subresource": w.subresource or None,
                        "time": _stamp(w.written),
                    }
                    for w in m.writers
                ],
                "heal": m.heal_note or None,
            }
            for m in d.marks
        ],
        "fixes": list(d.fixes),
        "waitsOn": [diagnosis_json(c, now) for c in d.children],
    }


def _states(stuck: Sequence[Diagnosis]) -> Counter[str]:
    return Counter(d.state.value for r in stuck for d in r.walk())


def doctor_json(stuck: Sequence[Diagnosis], now: dt.datetime) -> str:
    return json.dumps(
        {
            "apiVersion": "prune-gate.io/v1",
            "kind": "DoctorReport",
            "now": _stamp(now),
            "stuck": [diagnosis_json(d, now) for d in stuck],
            "states": dict(sorted(_states(stuck).items())),
        },
        indent=2,
    )


def _lines(d: Diagnosis, now: dt.datetime, depth: int) -> list[str]:
    pad = "  " * depth
    age = (
        f"deletion asked {elapsed_text((now - d.requested).total_seconds())} ago"
        if (d.requested)
        else "no deletion time"
    )
    loud = "UNKNOWN STATE: " if d.state is State.UNKNOWN else ""
    out = [f"{pad}{loud}{inert(d.ref.display())}  {d.state.value}  ({age})"]
    out.append(f"{pad}  {inert(d.reason)}")
    if d.evidence:
        out.append(f"{pad}  evidence:")
        out += [
            f"{pad}      {inert(e[2:])}" if e.startswith("  ") else f"{pad}    - {inert(e)}"
            for e in d.evidence
        ]
    if d.marks:
        out.append(f"{pad}  marks (who wrote each, by managedFields):")
        out += [f"{pad}    - {inert(m.describe())}" for m in d.marks]
    if d.finalizers:
        out.append(f"{pad}  finalizers:")
        out += [f"{pad}    - {inert(f.name)}: {inert(f.owner)}" for f in d.finalizers]
    if d.fixes:
        out.append(f"{pad}  fix:")
        out += [f"{pad}    - {inert(f)}" for f in d.fixes]
    if d.children:
        out.append(f"{pad}  waits on:")
        for child in d.children:
            out += _lines(child, now, depth + 2)
    return out


def doctor_text(stuck: Sequence[Diagnosis], now: dt.datetime, older_than: float) -> str:
    if not stuck:
        return (
            f"nothing stuck: no deletion asked for more than {duration_text(older_than)} ago is "
            "still waiting"
        )
    out: list[str] = []
    for d in stuck:
        out += _lines(d, now, 0)
        out.append("")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(_states(stuck).items()))
    out.append(f"{len(stuck)} stuck deletion(s): {counts}")
    return "\n".join(out)


def heal_json(plan: HealPlan, outcomes: Sequence[Outcome], apply: bool, now: dt.datetime) -> str:
    return json.dumps(
        {
            "apiVersion": "prune-gate.io/v1",
            "kind": "HealReport",
            "now": _stamp(now),
            "dryRun": not apply,
            "actions": [
                {
                    "action": o.action.kind.value,
                    "object": _ref(o.action.target),
                    "uid": o.action.uid,
                    "heals": _ref(o.action.heals),
                    "result": o.result,
                    "detail": o.detail,
                    "event": {"reason": o.action.event.reason, "message": o.action.event.message},
                    "command": o.action.command,
                }
                for o in outcomes
            ],
            "skipped": [
                {"object": _ref(s.ref), "state": s.state.value, "why": s.why} for s in plan.skipped
            ],
        },
        indent=2,
    )


def heal_text(plan: HealPlan, outcomes: Sequence[Outcome], apply: bool) -> str:
    """The plan's outcomes; before any (the prompt of `--apply`), the planned actions, each with
    its Event's words: what the person confirms, whose mark it acts on included."""
    out: list[str] = []
    if not apply:
        out.append("dry run: nothing was changed (run with --apply to act)")
    rows = list(outcomes) or [Outcome(a, "planned") for a in plan.actions]
    for o in rows:
        a = o.action
        out.append(
            f"{o.result:<9} {a.kind.value} {inert(a.target.display())} (heals "
            f"{inert(a.heals.display())})"
        )
        out.append(f"          {inert(event_line(o))}")
        if o.detail:
            out.append(f"          {inert(o.detail)}")
        out.append(f"          by hand: {inert(a.command)}")
    for s in plan.skipped:
        out.append(f"left      {inert(s.ref.display())}  {s.state.value}: {inert(s.why)}")
    if not rows and not plan.skipped:
        out.append("nothing stuck: nothing to heal")
    return "\n".join(out)


def event_line(outcome: Outcome) -> str:
    """The action's Event as this outcome stands: its words as recorded, once done; in the
    conditional before (a dry run, the prompt of `--apply`); none when it was not done."""
    a = outcome.action
    if outcome.result == "done":
        return a.event.message
    if outcome.result in ("planned", "would do"):
        return f"would record Event {a.event.reason}: {a.would or a.event.message}"
    return f"Event {a.event.reason} not recorded: nothing was done"


def log_line(msg: str, time: dt.datetime, level: str = "info", **fields: object) -> str:
    """One structured log line (JSON) of `gate heal --watch`: time, level, msg, then fields."""
    return json.dumps({"time": _stamp(time), "level": level, "msg": msg, **fields}, default=str)
