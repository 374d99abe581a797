"""`gate heal`'s text says what it would record in a dry run, in the conditional, and what it
recorded once it acted, in the past tense (issue 37): a dry run that quoted "prune-gate heal
deleted pod web-0" read as if the pod were gone. The exact lines."""

from __future__ import annotations

from gate.engine.doctor import Thresholds
from gate.engine.heal import HealOptions, Outcome
from gate.report.doctor import heal_text
from tests.unit.test_heal import _stranded, pinned, plan

DISPOSABLE = {"prune-gate.io/data": "disposable"}
WHY = (
    "(uid uid-web-0, node n1, Running) that pinned claim data, its data is disposable: it is "
    "marked prune-gate.io/data=disposable, no managedFields entry owns it, so who wrote it "
    "cannot be told; its StatefulSet web recreates it, Pending until the claim exists again"
)


def _event_lines(text: str) -> list[str]:
    """The line under each action: its Event."""
    lines = text.split("\n")
    return [
        lines[i + 1].strip()
        for i, line in enumerate(lines)
        if line.split(" ", 1)[0] in ("planned", "would", "done", "failed", "skipped")
    ]


def test_a_dry_run_says_which_event_it_would_record_in_the_conditional() -> None:
    p = plan(**pinned(DISPOSABLE))
    text = heal_text(p, [], apply=False)
    assert text.split("\n")[0] == "dry run: nothing was changed (run with --apply to act)"
    expected = f"would record Event ClaimReleased: prune-gate heal would delete pod web-0 {WHY}"
    assert _event_lines(text) == [expected]
    accepted = [
        Outcome(a, "would do", "the API server accepted it as a dry run") for a in p.actions
    ]
    assert _event_lines(heal_text(p, accepted, apply=False)) == [expected]
    assert " deleted pod" not in text


def test_the_real_run_quotes_the_event_it_recorded_in_the_past_tense() -> None:
    p = plan(**pinned(DISPOSABLE))
    done = [Outcome(a, "done", "Event ClaimReleased recorded") for a in p.actions]
    assert _event_lines(heal_text(p, done, apply=True)) == [
        f"prune-gate heal deleted pod web-0 {WHY}"
    ]
    assert p.actions[0].event.message == f"prune-gate heal deleted pod web-0 {WHY}"


def test_an_action_not_done_records_no_event() -> None:
    p = plan(**pinned(DISPOSABLE))
    failed = [Outcome(a, "failed", 'pods "web-0" is forbidden') for a in p.actions]
    assert _event_lines(heal_text(p, failed, apply=True)) == [
        "Event ClaimReleased not recorded: nothing was done"
    ]


def test_every_action_has_its_conditional() -> None:
    """Force-deleting a pod on a dead node, and a rescue's two steps."""
    forced = plan(th=Thresholds(older_than=0), **_stranded())
    (line,) = _event_lines(heal_text(forced, [], apply=False))
    assert line.startswith(
        "would record Event PodForceDeleted: prune-gate heal would force-delete pod web-0 "
        "(uid uid-web-0): its deadline passed 5m ago"
    )
    rescue = plan(HealOptions(rescue=True), **pinned())
    retain, release = _event_lines(heal_text(rescue, [], apply=False))
    assert retain == (
        "would record Event VolumeRescued: prune-gate heal --rescue would set reclaimPolicy "
        "Delete -> Retain while claim shop/data (uid uid-data) is Terminating, so that its data "
        "would outlive the claim"
    )
    assert release.startswith("would record Event ClaimReleased: prune-gate heal would delete")
    for action in (*forced.actions, *rescue.actions):
        assert action.would and action.would != action.event.message
