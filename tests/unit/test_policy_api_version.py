"""The policy file's `apiVersion` (issue 37): `prune-gate.io/v1` is the current one; a file
without it is the layout from before, read as `prune-gate.io/v1alpha1` (the same keys); any other
is refused (exit 2) with the file and the versions known. `gate config migrate` adds the line,
keeping the file's comments, and refuses what it cannot migrate."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from gate.engine.policy import (
    KNOWN_API_VERSIONS,
    LEGACY_API_VERSION,
    POLICY_API_VERSION,
    migrate_policy_text,
    policy_api_version,
)
from gate.model.errors import ConfigError
from gate.sources.policyfile import load_policy, policy_from_text
from tests.unit.test_cli import ROOT, gate

BODY = "# our policy\nseverity:\n  SPECULATIVE_PRUNE: {speculative: defer}\n"
INCIDENT = ("examples/incident/base", "examples/incident/candidate")


def _check_with(policy: Path) -> tuple[int, str]:
    done = gate(
        *("check", "--config", str(policy), "--base-manifests", str(ROOT / INCIDENT[0])),
        *("--head-manifests", str(ROOT / INCIDENT[1])),
    )
    return done.returncode, done.stderr


def test_v1_and_the_layout_without_apiversion_read_the_same() -> None:
    legacy = policy_from_text(BODY, "p.yaml")
    assert policy_from_text(f"apiVersion: {POLICY_API_VERSION}\n{BODY}", "p.yaml") == legacy
    assert policy_from_text(f"apiVersion: {LEGACY_API_VERSION}\n{BODY}", "p.yaml") == legacy
    assert policy_api_version({"severity": {}}, "p.yaml") == LEGACY_API_VERSION
    assert policy_api_version({"apiVersion": POLICY_API_VERSION}, "p.yaml") == POLICY_API_VERSION


def test_an_unknown_apiversion_is_exit_2_naming_the_file_and_the_versions_known(
    tmp_path: Path,
) -> None:
    """Before the keys: a newer version's keys are not this gate's to call unknown."""
    policy = tmp_path / "prune-gate.yaml"
    policy.write_text("apiVersion: prune-gate.io/v2\nsomethingNew: true\n", encoding="utf-8")
    code, stderr = _check_with(policy)
    assert code == 2
    assert stderr == (
        f"error: {policy}: apiVersion: 'prune-gate.io/v2' is not a policy version this gate "
        "knows: it reads prune-gate.io/v1 and prune-gate.io/v1alpha1 (a file without "
        "apiVersion as prune-gate.io/v1alpha1); write apiVersion: prune-gate.io/v1, or run a "
        "prune-gate that knows 'prune-gate.io/v2'\n"
    )
    for odd in ("v1", "1", "[prune-gate.io/v1]", "null"):
        with pytest.raises(ConfigError, match=r"p\.yaml: apiVersion: .* is not a policy version"):
            policy_from_text(f"apiVersion: {odd}\n", "p.yaml")


def test_the_schema_knows_the_versions_the_loader_knows() -> None:
    text = resources.files("gate").joinpath("schemas/policy.schema.json").read_text("utf-8")
    assert json.loads(text)["properties"]["apiVersion"]["enum"] == list(KNOWN_API_VERSIONS)


def test_the_chart_values_leave_apiversion_to_the_configmap() -> None:
    """The chart's `policy:` value is the body; its ConfigMap writes the apiVersion line."""
    values = json.loads((ROOT / "charts/prune-gate/values.schema.json").read_text("utf-8"))
    assert "apiVersion" not in values["properties"]["policy"]["properties"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (BODY, f"# our policy\napiVersion: {POLICY_API_VERSION}\n" + BODY.split("\n", 1)[1]),
        ("severity: {}\n", f"apiVersion: {POLICY_API_VERSION}\nseverity: {{}}\n"),
        ("---\n# c\nheal: {}", f"---\n# c\napiVersion: {POLICY_API_VERSION}\nheal: {{}}"),
        ("# only a comment", f"# only a comment\napiVersion: {POLICY_API_VERSION}\n"),
        ("", f"apiVersion: {POLICY_API_VERSION}\n"),
        (
            f"severity: {{}}\napiVersion: {LEGACY_API_VERSION}  # old\n",
            f"severity: {{}}\napiVersion: {POLICY_API_VERSION}\n",
        ),
    ],
)
def test_migrating_the_text_adds_or_sets_the_line_and_keeps_the_rest(
    before: str, after: str
) -> None:
    assert migrate_policy_text(before) == after
    assert policy_from_text(after, "p.yaml") == policy_from_text(before, "p.yaml")


def test_config_migrate_prints_the_migrated_file_and_leaves_it(tmp_path: Path) -> None:
    policy = tmp_path / "prune-gate.yaml"
    policy.write_text(BODY, encoding="utf-8")
    done = gate("config", "migrate", str(policy))
    assert done.returncode == 0, done.stderr
    assert done.stdout == migrate_policy_text(BODY)
    assert done.stdout.splitlines()[:2] == ["# our policy", "apiVersion: prune-gate.io/v1"]
    assert done.stderr == (
        f"config migrate: {policy} read as prune-gate.io/v1alpha1, now prune-gate.io/v1: "
        "printed on stdout; --write rewrites the file\n"
    )
    assert policy.read_text(encoding="utf-8") == BODY


def test_config_migrate_write_rewrites_it_once(tmp_path: Path) -> None:
    policy = tmp_path / "prune-gate.yaml"
    policy.write_text(BODY, encoding="utf-8")
    policy.chmod(0o640)
    done = gate("config", "migrate", "--write", str(policy))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert policy.read_text(encoding="utf-8") == migrate_policy_text(BODY)
    assert policy.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prune-gate.yaml"]
    again = gate("config", "migrate", "--write", str(policy))
    assert again.returncode == 0
    assert again.stderr == (
        f"config migrate: {policy} is prune-gate.io/v1 already: nothing to change\n"
    )
    assert load_policy(policy) == policy_from_text(BODY, "p.yaml")


def test_config_migrate_reads_prune_gate_yaml_by_default(tmp_path: Path) -> None:
    (tmp_path / "prune-gate.yaml").write_text("severity: {}\n", encoding="utf-8")
    done = gate("config", "migrate", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "apiVersion: prune-gate.io/v1\nseverity: {}\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{severity: {}}\n", "cannot add apiVersion to this file's text and keep its meaning"),
        ("apiVersion: prune-gate.io/v9\n", "'prune-gate.io/v9' is not a policy version"),
        ("severity: {NO_SUCH_CODE: warn}\n", "unknown finding code"),
    ],
)
def test_config_migrate_refuses_what_it_cannot_migrate(
    tmp_path: Path, text: str, says: str
) -> None:
    policy = tmp_path / "prune-gate.yaml"
    policy.write_text(text, encoding="utf-8")
    done = gate("config", "migrate", "--write", str(policy))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {policy}") and says in done.stderr
    assert policy.read_text(encoding="utf-8") == text  # untouched


def test_config_migrate_refuses_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text(BODY, encoding="utf-8")
    link = tmp_path / "prune-gate.yaml"
    link.symlink_to(real)
    done = gate("config", "migrate", "--write", str(link))
    assert done.returncode == 2 and "symlink" in done.stderr
    assert real.read_text(encoding="utf-8") == BODY


def test_every_example_policy_declares_v1() -> None:
    examples = sorted((ROOT / "examples").rglob("prune-gate.yaml"))
    assert examples, "no example policy"
    for path in examples:
        text = path.read_text(encoding="utf-8")
        assert f"\napiVersion: {POLICY_API_VERSION}\n" in "\n" + text, path
        load_policy(path)
