"""The policy file cannot be swapped out from under the gate (issue 8, attacks 4 and 11).

A candidate that replaces `prune-gate.yaml` with a symlink (to /dev/null, to a file outside the
tree) or a binary file must get exit 2 with a message naming the file, never the defaults.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.helpers import GitRepo, claim, doc
from tests.unit.test_cli import gate, write

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: app}
data: {a: b}
"""
GUARD_CONFIGMAPS = "guardedKinds: [PersistentVolumeClaim, ConfigMap]\n"


def _guarded_repo(tmp_path: Path) -> GitRepo:
    """A base that guards ConfigMaps in its policy, and a candidate that prunes one."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/app.yaml": doc(claim(), CONFIGMAP), "prune-gate.yaml": GUARD_CONFIGMAPS})
    return repo


def _check(repo: GitRepo, *extra: str) -> tuple[int, str]:
    result = gate("check", "--base", "HEAD~1", "--head", "HEAD", *extra, cwd=repo.root)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout + result.stderr


def test_candidate_symlinking_the_config_to_dev_null_is_exit_2(tmp_path: Path) -> None:
    repo = _guarded_repo(tmp_path)
    (repo.root / "prune-gate.yaml").unlink()
    (repo.root / "prune-gate.yaml").symlink_to("/dev/null")
    repo.commit({"deploy/app.yaml": claim()}, "candidate prunes the ConfigMap")
    code, out = _check(repo, "--config", "prune-gate.yaml")
    assert code == 2, out
    assert "prune-gate.yaml" in out and "symlink" in out
    # Without --config the base's regular policy still applies (the ConfigMap is guarded).
    code, out = _check(repo)
    assert code == 1, out


def test_candidate_symlinking_the_config_outside_the_tree_is_exit_2(tmp_path: Path) -> None:
    repo = _guarded_repo(tmp_path)
    outside = write(tmp_path / "lax.yaml", "guardedKinds: [PersistentVolumeClaim]\n")
    (repo.root / "prune-gate.yaml").unlink()
    (repo.root / "prune-gate.yaml").symlink_to(outside)
    repo.commit({"deploy/app.yaml": claim()}, "candidate prunes the ConfigMap")
    code, out = _check(repo, "--config", str(repo.root / "prune-gate.yaml"))
    assert code == 2, out
    assert "symlink" in out


def test_a_symlink_blob_in_the_base_is_exit_2(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    write(repo.root / "real.yaml", GUARD_CONFIGMAPS)
    (repo.root / "prune-gate.yaml").symlink_to("real.yaml")
    repo.commit({"deploy/app.yaml": doc(claim(), CONFIGMAP)}, "base links its policy")
    (repo.root / "prune-gate.yaml").unlink()
    repo.commit({"deploy/app.yaml": claim(), "prune-gate.yaml": GUARD_CONFIGMAPS}, "candidate")
    for extra in ((), ("--config", "prune-gate.yaml")):
        code, out = _check(repo, *extra)
        assert code == 2, (extra, out)
        assert "120000" in out and "prune-gate.yaml" in out


def test_files_mode_refuses_symlinked_and_special_configs(tmp_path: Path) -> None:
    manifests = write(tmp_path / "m.yaml", claim())
    real = write(tmp_path / "real.yaml", GUARD_CONFIGMAPS)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    sides = ("check", "--base-manifests", str(manifests), "--head-manifests", str(manifests))
    for config, word in ((str(link), "symlink"), ("/dev/null", "not a regular file")):
        result = gate(*sides, "--config", config, cwd=tmp_path)
        assert result.returncode == 2, (config, result.stdout, result.stderr)
        assert word in result.stderr and "Traceback" not in result.stderr
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "prune-gate.yaml").symlink_to("/dev/null")
    result = gate(*sides, cwd=cwd)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "prune-gate.yaml" in result.stderr and "symlink" in result.stderr


def test_non_utf8_policy_is_exit_2_naming_the_file(tmp_path: Path) -> None:
    manifests = write(tmp_path / "m.yaml", claim())
    for name, data in (
        ("latin1.yaml", b"guardedKinds: [Caf\xe9]\n"),
        ("nul.yaml", b"\x00\x01\x02"),
    ):
        policy = tmp_path / name
        policy.write_bytes(data)
        result = gate(
            "check", "--base-manifests", str(manifests), "--head-manifests", str(manifests),
            "--config", str(policy),
        )  # fmt: skip
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        assert name in result.stderr and "Traceback" not in result.stderr
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/app.yaml": claim()}, "base")
    (repo.root / "prune-gate.yaml").write_bytes(b"\xff\xfe garbage")
    repo.commit({}, "base with a binary policy")
    repo.commit({"deploy/app.yaml": doc(claim(), CONFIGMAP)}, "candidate")
    code, out = _check(repo)
    assert code == 2, out
    assert "prune-gate.yaml" in out and "UTF-8" in out
