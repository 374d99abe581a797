"""The chart's policy defaults (issue 37): deployers that are Flux's and Argo CD's controllers,
a NOTES warning when none is named, and one `guardedKinds` default for both doors.

Rendered by the real helm (tests/unit/test_chart.py). Before, the chart's `policy: {}` named no
deployer, so NOT_RETIRED and the speculation fence never applied at admission; and `gate check`
guarded VolumeSnapshots while the webhook never saw their DELETEs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.engine.policy import (
    CASCADE_KINDS,
    DEFAULT_GUARDED,
    DEFAULT_WEBHOOK_GUARDED,
    Policy,
    webhook_kinds_for,
)
from gate.model.refs import parse_group_kind
from gate.sources.policyfile import policy_from_dict, policy_from_text
from tests.unit.test_chart import (
    CHART,
    DEFAULT_DEPLOYERS,
    NAMESPACE,
    RELEASE,
    one,
    render,
    run_helm,
    webhook_of,
)
from webhook.register import rules_for

Obj = dict[str, Any]

pytestmark = pytest.mark.binaries

#: What KUBERNETES-FACTS.md says the API server calls the deployers.
FLUX_KUSTOMIZE = "system:serviceaccount:flux-system:kustomize-controller"
FLUX_HELM = "system:serviceaccount:flux-system:helm-controller"
ARGOCD = "system:serviceaccount:argocd:argocd-application-controller"
WARNING = "WARNING: policy.webhook.deployers names no deployer"


def webhook_policy(values: Obj | None = None) -> Policy:
    """The policy the webhook reads from the rendered ConfigMap."""
    text = one(render(values), "ConfigMap")["data"]["prune-gate.yaml"]
    return policy_from_text(text, "prune-gate.yaml")


def test_the_default_deployers_are_flux_and_argo_cd_controllers() -> None:
    assert DEFAULT_DEPLOYERS == [FLUX_KUSTOMIZE, FLUX_HELM, ARGOCD]
    assert webhook_policy().webhook.deployers == (FLUX_KUSTOMIZE, FLUX_HELM, ARGOCD)


def test_other_policy_keys_keep_the_default_deployers_and_a_list_replaces_them() -> None:
    fenced = {"policy": {"webhook": {"fence": {"namespace": "ci", "name": "fence"}}}}
    assert webhook_policy(fenced).webhook.deployers == (FLUX_KUSTOMIZE, FLUX_HELM, ARGOCD)
    kapp = {"policy": {"webhook": {"deployers": ["system:serviceaccount:kapp:kapp"]}}}
    assert webhook_policy(kapp).webhook.deployers == ("system:serviceaccount:kapp:kapp",)
    assert webhook_policy({"policy": {"webhook": {"deployers": []}}}).webhook.deployers == ()


def notes(tmp_path: Path, values: Obj) -> str:
    """NOTES.txt as helm prints it (`helm template` leaves NOTES.txt out: a copy in which it is
    an ordinary template)."""
    chart = tmp_path / "prune-gate"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "templates" / "notes.txt")
    result = run_helm(
        "template", RELEASE, str(chart), "--namespace", NAMESPACE,
        "--show-only", "templates/notes.txt", "--debug", values=values,
    )  # fmt: skip
    # --debug prints the text although it is not YAML (helm then fails on parsing it)
    assert "prune-gate's admission webhook is installed" in result.stdout, result.stderr
    return result.stdout


def test_notes_name_the_deployers_and_warn_when_there_is_none(tmp_path: Path) -> None:
    text = notes(tmp_path, {})
    assert WARNING not in text
    assert f"Deployers (their deletions are held to NOT_RETIRED and the speculation fence): " \
        f"{FLUX_KUSTOMIZE}, {FLUX_HELM}, {ARGOCD}." in text  # fmt: skip
    nones: list[Obj] = [{"policy": {"webhook": {"deployers": []}}}, {"policy": None}]
    for i, none in enumerate(nones):
        text = notes(tmp_path / str(i), none)
        assert WARNING in text
        assert "NOT_RETIRED and the speculation fence\nnever apply at admission" in text


def test_notes_say_when_the_alerts_have_no_scrape_to_read(tmp_path: Path) -> None:
    text = notes(tmp_path, {"prometheusRule": {"enabled": True}})
    assert "prometheusRule is on but serviceMonitor is off" in text
    both = {"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}}
    assert "serviceMonitor is off" not in notes(tmp_path / "both", both)


# --- one guardedKinds default for both doors ----------------------------------------------


def test_the_webhook_decides_every_kind_ci_guards_and_the_kinds_that_cascade_to_them() -> None:
    """`gate check` and the webhook guard the same kinds; the webhook adds only the kinds whose
    deletion takes guarded objects along, which `gate check` judges by its cascade rules."""
    assert (*DEFAULT_GUARDED, *CASCADE_KINDS) == DEFAULT_WEBHOOK_GUARDED
    policy = Policy()
    assert policy.guarded_kinds < policy.webhook.guarded_kinds
    assert policy.webhook.guarded_kinds - policy.guarded_kinds == {
        parse_group_kind(k) for k in CASCADE_KINDS
    }
    assert ("snapshot.storage.k8s.io", "VolumeSnapshot") in policy.webhook.guarded_kinds
    assert policy_from_dict({}).webhook.guarded_kinds == policy.webhook.guarded_kinds


def test_a_policys_guarded_kinds_reach_the_webhook_unless_it_lists_its_own() -> None:
    claims = policy_from_dict({"guardedKinds": ["PersistentVolumeClaim"]})
    assert claims.webhook.guarded_kinds == webhook_kinds_for(
        frozenset({("", "PersistentVolumeClaim")})
    )
    own = policy_from_dict(
        {
            "guardedKinds": ["PersistentVolumeClaim"],
            "webhook": {"guardedKinds": ["PersistentVolume"]},
        }
    )
    assert own.webhook.guarded_kinds == {("", "PersistentVolume")}


@pytest.mark.parametrize(
    "policy",
    [
        None,  # the engine's default
        {"guardedKinds": ["PersistentVolumeClaim", "VolumeSnapshot.snapshot.storage.k8s.io"]},
        {
            "guardedKinds": ["PersistentVolumeClaim"],
            "webhook": {"guardedKinds": ["PersistentVolume"]},
        },
    ],
    ids=["default", "guardedKinds", "webhook.guardedKinds"],
)
def test_the_charts_rules_are_the_engines(policy: Obj | None) -> None:
    """The chart derives the webhook's rules as `gate webhook serve --register` does, from the
    same policy: the engine's default kinds, `guardedKinds` plus the cascading kinds, or
    `webhook.guardedKinds` as given."""
    values = {"policy": policy}
    expected = rules_for(policy_from_dict(policy or {}))
    assert webhook_of(render(values))["rules"] == expected
    rendered = yaml.safe_load(one(render(values), "ConfigMap")["data"]["prune-gate.yaml"])
    assert rules_for(policy_from_dict(rendered or {})) == expected


def test_an_unknown_kind_in_guarded_kinds_names_the_key_it_came_from() -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        values={"policy": {"guardedKinds": ["Ingress.networking.k8s.io"]}},
    )  # fmt: skip
    assert result.returncode != 0
    assert "policy.guardedKinds: Ingress.networking.k8s.io has no known" in result.stderr
