"""`gate doctor` and `gate heal` before they reach a cluster: targets, thresholds, and where git
declares a stuck object (--manifests, --rev). What they say about a cluster is in
tests/e2e/test_doctor_heal.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.cli.doctor import declared_lookup, parse_target
from gate.model.errors import InputError
from gate.model.refs import ObjectRef
from tests.unit.helpers import GitRepo
from tests.unit.test_cli import gate

CLAIM = """\
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: shop}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"""
DATA = ObjectRef("", "PersistentVolumeClaim", "shop", "data")


@pytest.mark.parametrize(
    ("text", "kind"),
    [("pvc/data", "PersistentVolumeClaim"), ("ns/shop", "Namespace"), ("PV/x", "PersistentVolume")],
)
def test_targets_are_named_as_kubectl_names_kinds(text: str, kind: str) -> None:
    assert parse_target(text)[1] == kind


@pytest.mark.parametrize("text", ["data", "pvc/", "secret/x", "pvc/a/b"])
def test_a_bad_target_says_what_to_give(text: str) -> None:
    with pytest.raises(InputError, match="KIND/NAME"):
        parse_target(text)


@pytest.mark.parametrize("command", ["doctor", "heal"])
def test_a_threshold_without_a_unit_is_a_usage_error_before_any_cluster_is_read(
    command: str, tmp_path: Path
) -> None:
    done = gate(command, "--older-than", "5", "--kubeconfig", str(tmp_path / "none"), cwd=tmp_path)
    assert done.returncode == 2
    assert "--older-than" in done.stderr and "units" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreadable_kubeconfig_is_exit_2_with_the_fix(tmp_path: Path) -> None:
    done = gate("doctor", "-A", "--kubeconfig", str(tmp_path / "none"), cwd=tmp_path)
    assert done.returncode == 2 and "kubeconfig" in done.stderr
    assert "Traceback" not in done.stderr


def test_heal_watch_of_one_object_is_a_usage_error(tmp_path: Path) -> None:
    done = gate("heal", "--watch", "pvc/data", "-n", "x", cwd=tmp_path)
    assert done.returncode == 2 and "--watch" in done.stderr


def test_manifests_say_where_git_declares_it(tmp_path: Path) -> None:
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "claim.yaml").write_text(CLAIM)
    declared = declared_lookup(str(tmp_path / "apps"), None, ".", (), None)
    assert (declared(DATA) or "").endswith("claim.yaml:5")
    assert declared(ObjectRef("", "PersistentVolumeClaim", "shop", "other")) is None


def test_a_revision_says_where_git_declares_it(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"apps/shop/claim.yaml": CLAIM})
    repo.commit(
        {
            "apps/shop/claim.yaml": None,
            "apps/shop/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        },
        "remove the claim",
    )
    declared = declared_lookup(None, "HEAD~1", str(repo.root), ("apps",), None)
    assert declared(DATA) == "apps/shop/claim.yaml:5"
    assert declared_lookup(None, "HEAD", str(repo.root), ("apps",), None)(DATA) is None
    with pytest.raises(InputError, match="--rev"):
        declared_lookup(None, None, str(repo.root), ("apps",), None)
    with pytest.raises(InputError, match="not both"):
        declared_lookup("x", "HEAD", str(repo.root), (), None)


def test_a_manifest_without_a_namespace_is_in_the_namespace_looked_in(tmp_path: Path) -> None:
    (tmp_path / "claim.yaml").write_text(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\n"
    )
    assert declared_lookup(str(tmp_path), None, ".", (), None, "shop")(DATA) is not None
    assert declared_lookup(str(tmp_path), None, ".", (), None)(DATA) is None


def test_the_default_namespace_is_the_contexts_as_kubectl_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.kube.client import context_namespace

    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\n'
        "users: [{name: u, user: {token: t}}]\n"
    )
    contexts = tmp_path / "contexts.yaml"
    contexts.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: shop\ncontexts:\n"
        "  - {name: shop, context: {cluster: c, user: u, namespace: shop}}\n"
        "  - {name: bare, context: {cluster: c, user: u}}\n"
    )
    monkeypatch.setenv("KUBECONFIG", f"{clusters}:{contexts}")  # a list of files, merged
    assert context_namespace(None, None) == "shop"
    assert context_namespace(None, "bare") == "default"
