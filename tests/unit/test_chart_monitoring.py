"""The chart's monitoring (issue 37): its PrometheusRule and Grafana dashboard, off by default.

Rendered by the real helm (tests/unit/test_chart.py); the rules and every query of the dashboard
are checked by the real promtool (`scripts/build-binaries path promtool`, built from
tools/promtool), which also runs unit tests of the alerts (`promtool test rules`). Every metric a
rule or a panel reads must be one the webhook exports: the names come from the webhook's own
collectors, fed with stand-in figures, not from a list kept here.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ci import pinned_binary
from tests.unit.test_chart import CHART, FULLNAME, NAMESPACE, one, render
from webhook.arm import ANNOTATION, Armer
from webhook.cache import CacheStats
from webhook.events import EventCounts, RecordingSink
from webhook.httpserver import ListenerStats
from webhook.metrics import ConnectionsCollector, Metrics
from webhook.selfwatch import SelfWatch

Obj = dict[str, Any]

pytestmark = pytest.mark.binaries

ON = {"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}}
DASHBOARD = {"grafanaDashboard": {"enabled": True}}
SELECTOR = f'job="{FULLNAME}", namespace="{NAMESPACE}"'
#: Series Prometheus makes itself, not the webhook.
PROMETHEUS_OWN = {"up"}


def promtool() -> str:
    """Path of the pinned promtool (tests.ci.pinned_binary)."""
    return pinned_binary("promtool")


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False, cwd=cwd)


# --- what the webhook exports -------------------------------------------------------------


class _Stuck:
    passes, errors = 1, 0

    def counts(self) -> dict[tuple[str, str], int]:
        return {("PersistentVolumeClaim", "WaitingOnPods"): 1}


@functools.cache
def exported() -> frozenset[str]:
    """Every sample name the webhook's /metrics can show: its collectors (metrics.py, the
    arming, the self-watch, the listeners), each with a figure so that every family has a
    sample. The worker master's families (`prune_gate_webhook_workers`) are left out: no rule
    or panel needs them."""
    stats = CacheStats(3, 1, 2.0, {"Pod": 1}, {"Pod": True}, ("x.example.com",))
    metrics = Metrics(
        lambda: stats,
        lambda: EventCounts(1, 1, 1),
        certificate_expiry=lambda: 2.0e9,
        stuck=_Stuck(),
    )
    metrics.requests.labels(code="200").inc()
    metrics.decisions.labels(outcome="allowed", code="none").inc()
    metrics.latency.observe(0.01)
    metrics.registry.register(ConnectionsCollector(lambda: [ListenerStats("tls", 1, 2, 0)]))
    armer = Armer("pg", lambda: True, lambda _h, _c: True, lambda _ops: {})
    armer.offer({"metadata": {"annotations": {ANNOTATION: "Fail"}}, "webhooks": []})
    watch = SelfWatch(None, None, RecordingSink(), name="pg", armer=armer)
    metrics.registry.register(watch.collector())
    return frozenset(
        sample.name for family in metrics.registry.collect() for sample in family.samples
    )


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads: identifiers followed by a selector `{`,
    and every prune_gate_ name (with or without one)."""
    selected = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
    return selected | set(re.findall(r"\bprune_gate_[a-z0-9_]+", expr))


def test_the_exported_names_are_read_from_the_collectors() -> None:
    """The reference set is real: a name the webhook does not export is not in it."""
    names = exported()
    assert "prune_gate_webhook_configuration_armed" in names
    assert "prune_gate_webhook_requests_total" in names
    assert "prune_gate_webhook_handler_seconds_bucket" in names
    assert "prune_gate_stuck_objects" in names
    assert "prune_gate_webhook_certificate_expiry_timestamp_seconds" in names
    assert "prune_gate_webhook_armed" not in names


# --- the PrometheusRule -------------------------------------------------------------------


def rule_of(values: Obj) -> Obj:
    return one(render(values), "PrometheusRule")


def alerts(values: Obj = ON) -> dict[str, Obj]:
    rules = rule_of(values)["spec"]["groups"][0]["rules"]
    return {r["alert"]: r for r in rules if "alert" in r}


def test_monitoring_is_off_by_default() -> None:
    objs = render()
    assert not [o for o in objs if o["kind"] == "PrometheusRule"]
    assert not [o for o in objs if o["metadata"]["name"].endswith("-dashboard")]


def test_the_alerts_operators_expect_are_there() -> None:
    assert set(alerts()) == {
        "PruneGateWebhookDown",
        "PruneGateWebhookNotArmed",
        "PruneGateWebhookCacheStale",
        "PruneGateWebhookWatchBroken",
        "PruneGateWebhookCertificateExpiring",
        "PruneGateDeletionStuck",
        "PruneGateStuckDetectorFailing",
        "PruneGateWebhookErrors",
        "PruneGateWebhookShedding",
        "PruneGateWebhookConfigurationTampered",
        "PruneGateCustomResourcesUncounted",
    }
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    names = schema["properties"]["prometheusRule"]["properties"]["disabled"]["items"]["enum"]
    assert set(names) == set(alerts())


@pytest.mark.parametrize(
    "tls",
    [
        {"mode": "helm"},
        {"mode": "certManager"},
        {"mode": "secret", "secret": {"name": "serving", "caBundle": "eA=="}},
    ],
    ids=["helm", "certManager", "secret"],
)
def test_promtool_checks_the_rendered_rules(tmp_path: Path, tls: Obj) -> None:
    """Each TLS mode renders its own renewal advice into the certificate alert."""
    rule = rule_of({**ON, "tls": tls})
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    checked = run_promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 11 rules found" in checked.stdout


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """The check can fail: an expression that does not parse is reported."""
    broken = {"prometheusRule": {**ON["prometheusRule"], "extraRules": [
        {"alert": "Broken", "expr": "sum by (job (up)"}
    ]}}  # fmt: skip
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_of(broken)["spec"]))
    checked = run_promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode != 0
    assert "Broken" in checked.stdout + checked.stderr or "parse" in checked.stderr


def test_every_alert_reads_only_this_releases_webhook_metrics() -> None:
    names = exported()
    for name, rule in alerts().items():
        expr = rule["expr"]
        assert SELECTOR in expr, f"{name} does not select this release: {expr}"
        read = metric_names(expr)
        assert read, name
        unknown = read - names - PROMETHEUS_OWN
        assert not unknown, f"{name} reads {unknown}, which the webhook does not export"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_selector_labels_disabled_and_extra_rules() -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "selector": 'service="pg"',
            "labels": {"release": "kps"},
            "alertLabels": {"team": "platform", "severity": "page"},
            "disabled": ["PruneGateCustomResourcesUncounted"],
            "extraRules": [{"record": "pg:requests:rate5m", "expr": "sum(rate(up[5m]))"}],
        }
    }
    rule = rule_of(values)
    assert rule["metadata"]["labels"]["release"] == "kps"
    rules = rule["spec"]["groups"][0]["rules"]
    named = {r["alert"]: r for r in rules if "alert" in r}
    assert "PruneGateCustomResourcesUncounted" not in named
    assert rules[-1] == {"record": "pg:requests:rate5m", "expr": "sum(rate(up[5m]))"}
    down = named["PruneGateWebhookDown"]
    assert (
        down["expr"]
        == 'sum by (namespace, job) (up{service="pg"}) == 0 or absent(up{service="pg"})'
    )
    # added to every alert; an alert's own severity stays
    assert down["labels"] == {"severity": "critical", "team": "platform"}


def test_thresholds_come_from_the_values() -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "cacheStaleSeconds": 300,
            "certificateExpiryDays": 30,
            "notArmedFor": "5m",
            "stuckFor": "1h",
        }
    }
    named = alerts(values)
    assert named["PruneGateWebhookCacheStale"]["expr"].endswith("> 300")
    assert named["PruneGateWebhookCertificateExpiring"]["expr"].endswith(f"< {30 * 86400}")
    assert named["PruneGateWebhookNotArmed"]["for"] == "5m"
    assert named["PruneGateDeletionStuck"]["for"] == "1h"


def series(name: str, values: str, **labels: str) -> Obj:
    every = {"job": FULLNAME, "namespace": NAMESPACE, **labels}
    text = ", ".join(f'{k}="{v}"' for k, v in every.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def expanded(rule: Obj, **values: str) -> dict[str, str]:
    """The rule's annotations as Prometheus expands them, for templates of `$value` and
    `$labels.x` only (the alerts tested below use no other)."""
    out = {}
    for key, text in rule["annotations"].items():
        for name, value in values.items():
            placeholder = "$value" if name == "value" else f"$labels.{name}"
            text = text.replace("{{ " + placeholder + " }}", value)
        assert "{{" not in text, text
        out[key] = text
    return out


def test_promtool_unit_tests_of_the_alerts(tmp_path: Path) -> None:
    """Not armed for 15 minutes fires, not before; every pod down, or none scraped at all,
    fires after 5 minutes with the release's labels (one pod down does not); a stuck claim seen
    by two pods fires once after stuckFor and resolves when it goes; a detector that only fails
    fires, per job."""
    named = alerts()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_of(ON)["spec"]))
    base = {"job": FULLNAME, "namespace": NAMESPACE}
    stuck_labels = {"kind": "PersistentVolumeClaim", "state": "WaitingOnPods"}
    down = {
        "exp_labels": {**base, "severity": "critical"},
        "exp_annotations": expanded(named["PruneGateWebhookDown"]),
    }
    cases = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # armed on one worker only: max by (namespace, job) reads the pod's answer
                    series("prune_gate_webhook_configuration_armed", "0x30", pod="a", worker="0"),
                    series("up", "1x30", pod="a"),
                ],
                "alert_rule_test": [
                    {"eval_time": "14m", "alertname": "PruneGateWebhookNotArmed", "exp_alerts": []},
                    {
                        "eval_time": "16m",
                        "alertname": "PruneGateWebhookNotArmed",
                        "exp_alerts": [
                            {
                                "exp_labels": {**base, "severity": "warning"},
                                "exp_annotations": expanded(named["PruneGateWebhookNotArmed"]),
                            }
                        ],
                    },
                    {"eval_time": "16m", "alertname": "PruneGateWebhookDown", "exp_alerts": []},
                ],
            },
            {
                "interval": "1m",
                # one pod down, the other up: not down; then both down
                "input_series": [series("up", "0x20", pod="a"), series("up", "1x5 0x15", pod="b")],
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": "PruneGateWebhookDown", "exp_alerts": []},
                    {"eval_time": "10m", "alertname": "PruneGateWebhookDown", "exp_alerts": []},
                    {"eval_time": "12m", "alertname": "PruneGateWebhookDown", "exp_alerts": [down]},
                ],
            },
            {
                "interval": "1m",
                # never scraped at all (only another release's webhook is): down, same labels
                "input_series": [series("up", "1x20", pod="a", job="other")],
                "alert_rule_test": [
                    {"eval_time": "6m", "alertname": "PruneGateWebhookDown", "exp_alerts": [down]},
                ],
            },
            {
                "interval": "1m",
                "input_series": [
                    # two pods run the detector and see the same claim: one alert, value 1
                    series("prune_gate_stuck_objects", "1x30 0x10", pod="a", **stuck_labels),
                    series("prune_gate_stuck_objects", "1x30 0x10", pod="b", **stuck_labels),
                    series(
                        "prune_gate_stuck_objects", "0x40", pod="a", kind="Pod", state="NodeGone"
                    ),
                ],
                "alert_rule_test": [
                    {"eval_time": "14m", "alertname": "PruneGateDeletionStuck", "exp_alerts": []},
                    {
                        "eval_time": "16m",
                        "alertname": "PruneGateDeletionStuck",
                        "exp_alerts": [
                            {
                                "exp_labels": {**base, **stuck_labels, "severity": "warning"},
                                "exp_annotations": expanded(
                                    named["PruneGateDeletionStuck"], value="1", **stuck_labels
                                ),
                            }
                        ],
                    },
                    {"eval_time": "35m", "alertname": "PruneGateDeletionStuck", "exp_alerts": []},
                ],
            },
            {
                "interval": "1m",
                "input_series": [
                    series("prune_gate_stuck_detector_errors_total", "0+1x40", pod="a"),
                    series("prune_gate_stuck_detector_passes_total", "3x40", pod="a"),
                    series("prune_gate_stuck_detector_errors_total", "0+1x40", pod="b"),
                    series("prune_gate_stuck_detector_passes_total", "0+1x40", pod="b", job="x"),
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "35m",
                        "alertname": "PruneGateStuckDetectorFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {**base, "severity": "warning"},
                                "exp_annotations": expanded(named["PruneGateStuckDetectorFailing"]),
                            }
                        ],
                    },
                ],
            },
            {
                "interval": "1m",
                # two workers shed 60 reviews a minute between them for 20 minutes, then none
                "input_series": [
                    series("prune_gate_webhook_requests_shed_total", "0+30x20 600x20", worker="0"),
                    series("prune_gate_webhook_requests_shed_total", "0+30x20 600x20", worker="1"),
                    series("prune_gate_webhook_requests_shed_total", "0x40", pod="b"),
                ],
                "alert_rule_test": [
                    {"eval_time": "8m", "alertname": "PruneGateWebhookShedding", "exp_alerts": []},
                    {
                        "eval_time": "17m",
                        "alertname": "PruneGateWebhookShedding",
                        "exp_alerts": [
                            {
                                "exp_labels": {**base, "severity": "warning"},
                                "exp_annotations": expanded(
                                    named["PruneGateWebhookShedding"], value="1"
                                ),
                            }
                        ],
                    },
                    {"eval_time": "35m", "alertname": "PruneGateWebhookShedding", "exp_alerts": []},
                ],
            },
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    tested = run_promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


# --- the Grafana dashboard ----------------------------------------------------------------

#: Grafana's variables in the dashboard's queries, and what stands for each when promtool parses.
VARIABLES = {"$__rate_interval": "5m", "$namespace": "gatekeeping", "$job": FULLNAME}


def dashboard_map(values: Obj = DASHBOARD) -> Obj:
    return one(render(values), "ConfigMap", f"{FULLNAME}-dashboard")


def dashboard(values: Obj = DASHBOARD) -> Obj:
    data = dashboard_map(values)["data"]
    assert list(data) == ["prune-gate.json"]
    parsed: Obj = json.loads(data["prune-gate.json"])
    return parsed


def queries(board: Obj) -> list[tuple[str, str]]:
    """(panel title, expression) of every target, and of every query variable."""
    out = [(p["title"], t["expr"]) for p in board["panels"] for t in p["targets"]]
    out += [
        (v["name"], v["query"]["query"])
        for v in board["templating"]["list"]
        if v["type"] == "query"
    ]
    return out


def test_the_dashboard_config_map_carries_the_sidecars_label() -> None:
    cm = dashboard_map()
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    custom = {
        "grafanaDashboard": {
            "enabled": True,
            "label": "dashboards.example.com/load",
            "labelValue": "yes",
            "namespace": "monitoring",
            "annotations": {"grafana_folder": "prune-gate"},
        }
    }
    cm = dashboard_map(custom)
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["dashboards.example.com/load"] == "yes"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "prune-gate"}


def test_the_dashboard_is_the_charts_file_and_shows_what_operators_look_for() -> None:
    board = dashboard()
    assert board == json.loads((CHART / "dashboards" / "prune-gate.json").read_text())
    assert board["uid"] == "prune-gate-webhook"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    read = set().union(*(metric_names(q) for _, q in queries(board)))
    for wanted in (
        "prune_gate_webhook_requests_total",
        "prune_gate_webhook_decisions_total",
        "prune_gate_webhook_handler_seconds_bucket",
        "prune_gate_webhook_cache_objects",
        "prune_gate_webhook_cache_age_seconds",
        "prune_gate_webhook_configuration_armed",
        "prune_gate_stuck_objects",
        "prune_gate_webhook_certificate_expiry_timestamp_seconds",
    ):
        assert wanted in read, wanted


def test_every_dashboard_query_reads_exported_metrics_of_the_chosen_webhook() -> None:
    names = exported()
    for title, expr in queries(dashboard()):
        read = metric_names(expr)
        assert read, title
        unknown = read - names - PROMETHEUS_OWN
        assert not unknown, f"panel {title!r} reads {unknown}, which the webhook does not export"
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            assert 'namespace="$namespace", job="$job"' in target["expr"], panel["title"]


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    rules = []
    for i, (title, expr) in enumerate(queries(dashboard())):
        if expr.startswith("label_values("):  # Grafana's, not PromQL: check its selector
            expr = f"count({expr[len('label_values(') : expr.rindex(',')]})"
        for variable, stand_in in VARIABLES.items():
            expr = expr.replace(variable, stand_in)
        assert "$" not in expr, f"{title}: a variable promtool cannot stand in for: {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    (tmp_path / "queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    checked = run_promtool("check", "rules", "queries.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout
