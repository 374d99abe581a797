"""Exemptions expire by one date, the UTC one, in `gate check` and the webhook alike.

Before, the CLI asked the local date (`date.today()`) and the webhook the UTC date: on a runner in
UTC+14 an exemption ended a day early in CI, in UTC-12 a day late, against the webhook's verdict.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gate.sources.clock import utc_date, utc_today
from tests.unit.helpers import claim

ROOT = Path(__file__).resolve().parents[2]
#: POSIX zone strings (no tz database needed); the sign is west-positive: UTC+14 and UTC-12.
AHEAD, BEHIND = "KIR-14", "BAK+12"


def gate_in_zone(zone: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real console script, run with the local time zone set to `zone`."""
    exe = shutil.which("gate")
    cmd = [exe] if exe else [sys.executable, "-m", "gate"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(PYTHONPATH=str(ROOT), TZ=zone)
    return subprocess.run(
        [*cmd, *args], cwd=ROOT, capture_output=True, text=True, env=env, check=False
    )


def local_date_in(zone: str) -> dt.date:
    """Today in `zone`, as a process with TZ=zone sees it."""
    env = {**os.environ, "TZ": zone}
    code = "import datetime; print(datetime.date.today().isoformat())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return dt.date.fromisoformat(out.stdout.strip())


def test_utc_date_of_a_moment_in_any_zone_is_its_utc_date() -> None:
    kiritimati = dt.timezone(dt.timedelta(hours=14))
    moment = dt.datetime(2026, 12, 4, 2, 0, tzinfo=kiritimati)  # 2026-12-03 12:00 UTC
    assert utc_date(moment) == dt.date(2026, 12, 3)
    assert utc_date(dt.datetime(2026, 12, 3, 23, 0)) == dt.date(2026, 12, 3)  # naive: UTC
    assert utc_today() == dt.datetime.now(dt.UTC).date()


def test_gate_check_expires_exemptions_by_the_utc_date_in_any_local_zone(
    tmp_path: Path,
) -> None:
    """At any hour, UTC+14 or UTC-12 (or both) has another date than UTC. The exemption expires
    on the earlier of the two dates: by UTC it is still in force ahead of UTC, and already over
    behind it; by the local date, the other way round."""
    utc = dt.datetime.now(dt.UTC).date()
    zones = [(z, d) for z in (AHEAD, BEHIND) if (d := local_date_in(z)) != utc]
    assert zones, "UTC+14 and UTC-12 are 26 hours apart: one of them has another date"
    (tmp_path / "base.yaml").write_text(claim())
    (tmp_path / "head.yaml").write_text("")
    for zone, local in zones:
        expires = min(local, utc)
        in_force = expires >= utc
        policy = tmp_path / f"policy-{zone}.yaml"
        rule = {"kind": "PersistentVolumeClaim", "reason": "INC-9", "expires": expires.isoformat()}
        policy.write_text(json.dumps({"exemptions": [rule]}))
        result = gate_in_zone(
            zone,
            "check",
            "--base-manifests",
            str(tmp_path / "base.yaml"),
            "--head-manifests",
            str(tmp_path / "head.yaml"),
            "--config",
            str(policy),
            "-o",
            "json",
        )
        assert result.returncode == (0 if in_force else 1), (zone, result.stdout, result.stderr)
        assert bool(json.loads(result.stdout)["exempted"]) is in_force, zone
