"""The policy file: defaults, validation errors that name the key path, durations with units."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gate.engine.context import Context
from gate.engine.policy import Policy, parse_duration
from gate.model.errors import ConfigError
from gate.model.findings import Code, Severity
from gate.model.quantity import parse_quantity
from gate.model.refs import ObjectRef
from gate.sources.policyfile import load_policy, policy_from_dict


def test_defaults() -> None:
    p = Policy()
    assert p.is_guarded_kind("", "PersistentVolumeClaim")
    assert not p.is_guarded_kind("", "ConfigMap")
    assert p.severity_for(Code.NOT_RETIRED, Context.MERGED) is Severity.BLOCK
    assert p.severity_for(Code.SPECULATIVE_PRUNE, Context.SPECULATIVE) is Severity.DEFER
    assert p.severity_for(Code.ORPHANED_BY_KEEP, Context.PREVIEW) is Severity.WARN


def test_full_file(tmp_path: Path) -> None:
    f = tmp_path / "prune-gate.yaml"
    f.write_text(
        """\
guardedKinds: [PersistentVolumeClaim, Bucket.s3.example.com]
severity:
  CONSUMER_REMAINS: warn
  NOT_RETIRED: {preview: warn}
exemptions:
  - kind: PersistentVolumeClaim
    namespace: "ci-*"
    labels: {tier: scratch}
    codes: [NOT_RETIRED]
    reason: CI scratch claims
    expires: "2027-06-30"
annotations: {retire: example.com/retire}
live: {timeout: 45s}
webhook:
  deployers: ["system:serviceaccount:flux-system:kustomize-controller"]
  fence: {namespace: prune-gate, name: speculation-fence}
  resync: 1h30m
  maxCacheAge: 2h
"""
    )
    p = load_policy(f)
    assert p.is_guarded_kind("s3.example.com", "Bucket")
    assert not p.is_guarded_kind("", "PersistentVolume")
    assert p.severity_for(Code.NOT_RETIRED, Context.PREVIEW) is Severity.WARN
    assert p.severity_for(Code.NOT_RETIRED, Context.MERGED) is Severity.BLOCK
    assert p.severity_for(Code.CONSUMER_REMAINS, Context.MERGED) is Severity.WARN
    assert p.retire_annotation == "example.com/retire"
    assert p.live_timeout_seconds == 45
    assert p.webhook.resync_seconds == 5400
    assert p.webhook.fence == ("prune-gate", "speculation-fence")
    ref = ObjectRef("", "PersistentVolumeClaim", "ci-7", "x")
    today = dt.date(2026, 12, 2)
    assert p.exemption_for(ref, {"tier": "scratch"}, Code.NOT_RETIRED, today) is not None
    assert p.exemption_for(ref, {"tier": "prod"}, Code.NOT_RETIRED, today) is None
    assert p.exemption_for(ref, {"tier": "scratch"}, Code.CLAIM_MOUNTED, today) is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"guardedKind": []}, "(top level): unknown key 'guardedKind'"),
        ({"webhook": {"resync": "300"}}, "webhook.resync: '300' is not a duration with units"),
        ({"severity": {"NOT_A_CODE": "block"}}, "'NOT_A_CODE': unknown finding code"),
        ({"severity": {"NOT_RETIRED": "fatal"}}, "severity.NOT_RETIRED"),
        ({"exemptions": [{"kind": "PersistentVolumeClaim", "reason": "x"}]}, "exemptions.0"),
        ({"webhook": {"fence": {"name": "f", "ns": "x"}}}, "webhook.fence: unknown key 'ns'"),
    ],
)
def test_errors_name_the_key_path(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict(doc, "prune-gate.yaml")
    assert str(err.value).startswith("prune-gate.yaml: ")
    assert message in str(err.value)


def test_bad_yaml_names_line(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("severity:\n  NOT_RETIRED: [\n")
    with pytest.raises(ConfigError, match=r"p.yaml:3: invalid YAML"):
        load_policy(f)


def test_durations() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("250ms") == 0.25
    for bad in ("", "30", "5 m", "1d", "m5"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


def test_quantities() -> None:
    assert parse_quantity("1Gi") == 1024 * parse_quantity("1Mi")
    assert parse_quantity("1G") == 10**9
    assert parse_quantity("1.5Gi") == parse_quantity("1536Mi")
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(5) == 5
    for bad in ("", "Gi", "1GB", "x", True):
        with pytest.raises(ValueError, match="not a quantity"):
            parse_quantity(bad)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"live": {"timeout": 30}}, "live.timeout: 30 is not a duration with units"),
        ({"live": {"timeout": 30}}, "write 30s"),
        (
            {
                "exemptions": [
                    {"kind": "PersistentVolumeClaim", "reason": "r", "expires": dt.date(2027, 1, 1)}
                ]
            },
            'exemptions.0.expires: 2027-01-01 must be quoted, as a string: "2027-01-01"',
        ),
        ({"guardedKinds": ["*"]}, "guardedKinds.0: '*' is not a kind: write Kind"),
    ],
)
def test_errors_say_how_to_write_it(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict(doc, "p.yaml")
    assert message in str(err.value)


def test_the_example_policy_is_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    policy = load_policy(root / "examples" / "prune-gate.yaml")
    assert policy.webhook.fence == ("prune-gate", "speculation-fence")


def test_an_unquoted_expiry_is_read_as_kubernetes_reads_it(tmp_path: Path) -> None:
    """A date stays a string, so `expires: 2027-01-01` works unquoted, and an invalid one is a
    clear error instead of a traceback from the YAML loader."""
    entry = "exemptions:\n- kind: PersistentVolumeClaim\n  reason: r\n  expires: {}\n"
    ok = tmp_path / "ok.yaml"
    ok.write_text(entry.format("2027-01-01"))
    assert load_policy(str(ok)).exemptions[0].expires == dt.date(2027, 1, 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(entry.format("2027-02-30"))
    with pytest.raises(ConfigError, match=r"exemptions\.0\.expires: not a date: '2027-02-30'"):
        load_policy(str(bad))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"guardedKinds": ["PersistentVolumeClaims"]},
            "guardedKinds.0: PersistentVolumeClaims is no kind of the core API group, so nothing "
            "would be guarded; did you mean PersistentVolumeClaim?",
        ),
        (
            {"webhook": {"guardedKinds": ["PersistentVolumeClaim", "Statefulset.apps"]}},
            "webhook.guardedKinds.1: Statefulset is no kind of API group apps, so nothing would "
            "be guarded; did you mean StatefulSet.apps?",
        ),
    ],
)
def test_a_guarded_kind_typo_is_an_error_naming_the_nearest(doc: object, message: str) -> None:
    """A typo in a built-in group used to be accepted and guarded nothing."""
    with pytest.raises(ConfigError) as err:
        policy_from_dict(doc, "p.yaml")
    assert str(err.value) == f"p.yaml: {message}"


def test_custom_and_builtin_kinds_are_accepted() -> None:
    policy = policy_from_dict(
        {"guardedKinds": ["ConfigMap", "Widget.example.com", "Lease.coordination.k8s.io"]}
    )
    assert ("example.com", "Widget") in policy.guarded_kinds


@pytest.mark.parametrize(
    ("webhook", "says"),
    [
        ({"resync": "20m"}, "webhook.maxCacheAge (15m) must be longer than webhook.resync (20m)"),
        ({"resync": "10m", "maxCacheAge": "10m"}, "(10m) must be longer than webhook.resync (10m)"),
        ({"maxCacheAge": "5m"}, "webhook.maxCacheAge (5m) must be longer than webhook.resync (5m)"),
        (
            {"resync": "1h30m", "maxCacheAge": "1h"},
            "(1h) must be longer than webhook.resync (1h30m)",
        ),
    ],
)
def test_max_cache_age_not_longer_than_resync_is_an_error(
    webhook: dict[str, str], says: str
) -> None:
    """A cache that re-lists less often than readiness allows it to age goes unready on a
    healthy cluster: refused when the policy is read, naming both values and the fix."""
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"webhook": webhook}, "prune-gate.yaml")
    message = str(err.value)
    assert message.startswith("prune-gate.yaml: ") and says in message
    assert "Set maxCacheAge above" in message and "or shorten resync" in message


def test_max_cache_age_longer_than_resync_is_accepted() -> None:
    wh = policy_from_dict({"webhook": {"resync": "10m", "maxCacheAge": "11m"}}).webhook
    assert (wh.resync_seconds, wh.max_cache_age_seconds) == (600, 660)
    assert Policy().webhook.max_cache_age_seconds > Policy().webhook.resync_seconds


def test_an_unquoted_off_is_told_to_be_quoted(tmp_path: Path) -> None:
    """YAML 1.1 reads `off` as false: the message says what to write."""
    path = tmp_path / "prune-gate.yaml"
    path.write_text("severity:\n  SPECULATIVE_PRUNE: off\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r'false is not a severity: quote it, as in "off"'):
        load_policy(path)
    path.write_text('severity:\n  SPECULATIVE_PRUNE: "off"\n', encoding="utf-8")
    assert load_policy(path).severity_for(Code.SPECULATIVE_PRUNE, Context.MERGED) is Severity.OFF


def test_the_heal_section() -> None:
    p = policy_from_dict(
        {
            "heal": {
                "watch": {"releaseDisposableClaims": True, "forceDeletePodsOnDeadNodes": True},
                "disposableClaims": [
                    {"namespace": "ci-*", "labels": {"tier": "cache"}, "reason": "rebuilt nightly"}
                ],
            }
        },
        "prune-gate.yaml",
    )
    assert p.heal_watch.release_disposable_claims and p.heal_watch.force_delete_pods_on_dead_nodes
    assert not p.heal_watch.rescue_volumes
    claim = ObjectRef("", "PersistentVolumeClaim", "ci-42", "cache")
    assert p.heal_disposable(claim, {"tier": "cache"})
    assert not p.heal_disposable(claim, {"tier": "db"})
    assert not Policy().heal_disposable(claim, {"tier": "cache"})
    with pytest.raises(ConfigError, match="reason"):
        policy_from_dict({"heal": {"disposableClaims": [{"name": "x"}]}}, "prune-gate.yaml")
    with pytest.raises(ConfigError, match="forceDelete"):
        policy_from_dict({"heal": {"watch": {"forceDelete": True}}}, "prune-gate.yaml")
