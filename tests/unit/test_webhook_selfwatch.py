"""The self-watch compares the live registration with what was registered, field by field."""

from __future__ import annotations

import copy
from typing import Any

from gate.sources.policyfile import policy_from_dict
from webhook.events import RecordingSink
from webhook.register import build_configuration, with_fence
from webhook.selfwatch import CONFIGURATION_TAMPERED, SelfWatch, differences

POLICY = policy_from_dict({"webhook": {"fence": {"namespace": "ci", "name": "fence"}}})
CONFIG = with_fence(build_configuration("pg", "https://h:1/validate", b"ca", POLICY), POLICY)


def live(change: Any = None) -> dict[str, Any]:
    """The configuration as the API server returns it: defaults filled in, metadata added."""
    obj = copy.deepcopy(CONFIG)
    obj["metadata"].update(uid="u1", resourceVersion="7")
    for hook in obj["webhooks"]:
        hook.setdefault("objectSelector", {})
    if change:
        change(obj)
    return obj


def test_the_registration_as_served_has_no_differences() -> None:
    assert differences(CONFIG, live()) == []


def test_every_weakening_is_named() -> None:
    assert differences(CONFIG, None) == ["the configuration was deleted"]

    def weaken(obj: dict[str, Any]) -> None:
        main = obj["webhooks"][0]
        main["failurePolicy"] = "Ignore"
        main["rules"] = []
        main["clientConfig"]["caBundle"] = "b3RoZXI="
        main["objectSelector"] = {"matchLabels": {"never": "x"}}
        obj["webhooks"].pop()

    assert differences(CONFIG, live(weaken)) == [
        "webhook prune-gate.prune-gate.io: clientConfig changed",
        "webhook prune-gate.prune-gate.io: rules changed",
        "webhook prune-gate.prune-gate.io: failurePolicy changed",
        "webhook prune-gate.prune-gate.io: objectSelector changed",
        "webhook fence.prune-gate.io was removed",
    ]


def test_observe_counts_records_and_restores() -> None:
    sink = RecordingSink()
    restored: list[dict[str, Any]] = []
    watch = SelfWatch(None, CONFIG, sink, restore=restored.append)
    watch.observe(live())
    assert (watch.tampered, sink.events, restored) == (0, [], [])
    watch.observe(None)
    assert (watch.tampered, watch.restored, restored) == (1, 1, [CONFIG])
    assert [e.reason for e in sink.events] == [CONFIGURATION_TAMPERED]
    assert sink.events[0].ref.name == "pg"
    assert "the configuration was deleted; registering it again" in sink.events[0].message


def test_a_charts_registration_is_its_own_baseline_and_never_restored() -> None:
    sink = RecordingSink()
    watch = SelfWatch(None, None, sink, name="pg")
    watch.observe(None)  # not applied yet: nothing to compare with
    watch.observe(live())
    assert (watch.tampered, sink.events) == (0, [])
    watch.observe(live(lambda o: o["webhooks"][0].update(failurePolicy="Ignore")))
    assert (watch.tampered, watch.restored) == (1, 0)
    assert "failurePolicy changed; restore it (helm upgrade)" in sink.events[0].message


def test_chart_grants_reading_only_its_own_registration() -> None:
    from tests.unit.test_chart import FULLNAME, one, render

    objs = render()
    role = one(objs, "ClusterRole", f"{FULLNAME}-selfwatch")
    assert role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": [one(objs, "ValidatingWebhookConfiguration")["metadata"]["name"]],
            "verbs": ["get", "list", "watch"],
        }
    ]
    args = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--watch-registration={FULLNAME}" in args
