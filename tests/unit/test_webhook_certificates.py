"""Attack 9b of issue 8: an expired (or not yet valid) serving certificate never loads silently.

On start it is a one-line error naming the file and its notAfter, exit 2; a rotation to one keeps
serving the previous certificate and makes /readyz 503 with the reason; the served
certificate's expiry is a gauge."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from gate.engine.livestate import LiveState
from tests.unit.test_webhook_app import POLICY
from tests.unit.test_webhook_hardening import KUBECONFIG
from tests.unit.wsgiclient import client_of
from webhook import tls
from webhook.app import Settings, WebhookApp, create_app
from webhook.cache import StaticCache
from webhook.serve import CertReloader

NOW = dt.datetime.now(dt.UTC)
GAUGE = "prune_gate_webhook_certificate_expiry_timestamp_seconds"


def _write(tmp_path: Path, start: dt.datetime, days: int) -> tuple[Path, Path, x509.Certificate]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    pair = tls.make_serving_cert(tls.make_ca(), ["127.0.0.1"], days=days, not_before=start)
    tls.write_pair(pair, cert, key)
    return cert, key, x509.load_pem_x509_certificate(pair.cert_pem)


def _serve(tmp_path: Path, cert: Path, key: Path) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG, encoding="utf-8")
    cmd = [sys.executable, "-m", "gate", "webhook", "serve", "--listen", "127.0.0.1:0"]
    return subprocess.run(
        [*cmd, "--cert-file", str(cert), "--key-file", str(key)],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_with_an_expired_certificate_names_file_and_not_after_exit_2(
    tmp_path: Path,
) -> None:
    cert, key, parsed = _write(tmp_path, NOW - dt.timedelta(days=30), days=10)
    result = _serve(tmp_path, cert, key)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    not_after = parsed.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert lines[0].startswith(f"error: the serving certificate {cert} expired: notAfter ")
    assert not_after in lines[0]


def test_serve_with_a_certificate_not_valid_yet_is_exit_2(tmp_path: Path) -> None:
    cert, key, _ = _write(tmp_path, NOW + dt.timedelta(days=2), days=10)
    result = _serve(tmp_path, cert, key)
    assert result.returncode == 2, result.stderr
    assert f"the serving certificate {cert} is not valid yet: notBefore" in result.stderr
    assert "Traceback" not in result.stderr


def _app(reloader: CertReloader) -> WebhookApp:
    return create_app(
        Settings(
            policy=POLICY,
            cache=StaticCache(LiveState(POLICY.guarded_kinds)),
            serving_problem=reloader.problem,
            certificate_expiry=reloader.not_after,
        )
    )


def test_a_rotation_to_an_expired_certificate_keeps_the_old_one_and_is_unready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key, good = _write(tmp_path, NOW - dt.timedelta(minutes=5), days=30)
    reloader = CertReloader(cert, key)
    first = reloader.context()
    app = _app(reloader)
    with client_of(app) as c:
        assert c.get("/readyz").status_code == 200
        metrics = c.get("/metrics").get_data(as_text=True)
    assert _gauge(metrics) == good.not_valid_after_utc.timestamp()

    _, _, expired = _write(tmp_path, NOW - dt.timedelta(days=30), days=10)
    with caplog.at_level(logging.ERROR):
        assert reloader.context() is first, "the expired certificate was loaded"
    assert "keeping the previous one" in caplog.text
    with client_of(app) as c:
        resp = c.get("/readyz")
        metrics = c.get("/metrics").get_data(as_text=True)
    assert resp.status_code == 503
    reason = resp.get_json()["reason"]
    assert reason.startswith("certificate rotation rejected, serving the previous one: ")
    assert f"{cert} expired: notAfter " in reason
    assert expired.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ") in reason
    # the gauge is the certificate in use, not the rejected one
    assert _gauge(metrics) == good.not_valid_after_utc.timestamp()

    _write(tmp_path, NOW - dt.timedelta(minutes=5), days=60)
    assert reloader.context() is not first
    with client_of(app) as c:
        assert c.get("/readyz").status_code == 200


def test_a_served_certificate_that_runs_out_makes_the_server_unready(tmp_path: Path) -> None:
    cert, key, _ = _write(tmp_path, NOW - dt.timedelta(minutes=5), days=1)
    clock = [NOW]
    reloader = CertReloader(cert, key, now=lambda: clock[0])
    assert reloader.problem() is None
    clock[0] = NOW + dt.timedelta(days=2)
    problem = reloader.problem()
    assert problem is not None
    assert problem.startswith(f"the serving certificate {cert} expired: notAfter ")


def _gauge(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f"{GAUGE} "):
            return float(line.split()[1])
    raise AssertionError(f"no {GAUGE} in /metrics:\n{metrics}")
