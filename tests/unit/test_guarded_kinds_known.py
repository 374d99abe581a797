"""A guarded custom kind that nothing declares is a policy error, not protection switched off.

`guardedKinds: [Backups.example.com]` (a typo of Backup) matched no object, so the removal of a
Backup passed. A kind outside the built-in groups counts only when a CustomResourceDefinition on
either side (or, under --live, the API server) declares it.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_cli import gate, write
from tests.unit.test_rules import CR as BACKUP
from tests.unit.test_rules import CRD


def _check(tmp_path: Path, guarded: str, base: str, head: str) -> tuple[int, str, str]:
    config = write(tmp_path / "prune-gate.yaml", f"guardedKinds: [{guarded}]\n")
    b = write(tmp_path / "base" / "a.yaml", base)
    h = write(tmp_path / "head" / "a.yaml", head)
    result = gate(
        "check", "--base-manifests", str(b), "--head-manifests", str(h), "--config", str(config)
    )
    return result.returncode, result.stdout, result.stderr


def test_a_typo_of_a_declared_custom_kind_is_exit_2_with_the_nearest(tmp_path: Path) -> None:
    code, _, err = _check(tmp_path, "Backups.example.com", CRD + "---\n" + BACKUP, CRD)
    assert code == 2, err
    assert err.startswith(
        "error: policy guardedKinds: Backups.example.com is no built-in kind, and no "
        "CustomResourceDefinition on either side declares it, so nothing would be guarded; did "
        "you mean Backup.example.com?"
    ), err
    assert "--live" in err


def test_a_custom_kind_no_side_declares_is_exit_2(tmp_path: Path) -> None:
    code, _, err = _check(tmp_path, "Widget.example.com", BACKUP, "")
    assert code == 2, err
    assert "policy guardedKinds: Widget.example.com is no built-in kind" in err


def test_a_declared_custom_kind_guards_its_objects(tmp_path: Path) -> None:
    code, out, err = _check(tmp_path, "Backup.example.com", CRD + "---\n" + BACKUP, CRD)
    assert code == 1, out + err
    assert "Backup app/nightly" in out and "NOT_RETIRED" in out


def test_a_typo_of_a_built_in_kind_is_still_named(tmp_path: Path) -> None:
    code, _, err = _check(tmp_path, "PersistentVolumeClaims", BACKUP, BACKUP)
    assert code == 2, err
    assert "did you mean PersistentVolumeClaim?" in err
