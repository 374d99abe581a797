"""Attack 8 of issue 8: a review is the caller's word, so only the API server's may record Events.

With `--client-ca` the TLS context requires a client certificate from that CA (reloaded on
rotation like the serving pair); a bad client CA file is a one-line error, exit 2. Without it the
app still decides, but records no Event from a review (a forged one by `eve` in
`platform-oncall` would put a real PruneOverridden Event on a claim), and says so once at start.
Probes and Prometheus, which have no client certificate, use the plain-HTTP health port.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gate.engine.livestate import LiveState
from gate.sources.policyfile import policy_from_dict
from tests.unit.test_webhook_app import NOW, claim, pod, review
from tests.unit.test_webhook_hardening import KUBECONFIG
from tests.unit.wsgiclient import client_of
from webhook import tls
from webhook.app import EVENTS_OFF, Settings, create_app
from webhook.cache import StaticCache
from webhook.events import RecordingSink
from webhook.httpserver import HttpsServer
from webhook.serve import CertReloader, health_only, listen_socket

POLICY = policy_from_dict({"webhook": {"breakGlassGroups": ["platform-oncall"]}})


def _forged(obj: dict[str, Any]) -> dict[str, Any]:
    """A review as anyone could write it: eve, in the break-glass group."""
    doc = review(obj, user="eve")
    doc["request"]["userInfo"]["groups"] = ["platform-oncall", "system:authenticated"]
    return doc


def _decide(record_events: bool, doc: dict[str, Any]) -> tuple[dict[str, Any], RecordingSink]:
    live = LiveState(POLICY.guarded_kinds)
    for obj in (claim(), pod("web-0", "data")):
        live.upsert(obj)
    sink = RecordingSink()
    settings = Settings(
        policy=POLICY,
        cache=StaticCache(live),
        events=sink,
        now=lambda: NOW,
        record_events=record_events,
    )
    with client_of(create_app(settings)) as c:
        resp = c.post("/validate", data=json.dumps(doc), content_type="application/json")
    assert resp.status_code == 200
    return resp.get_json()["response"], sink


def test_without_trusted_callers_a_forged_override_records_no_event() -> None:
    trusted, trusted_sink = _decide(True, _forged(claim()))
    assert [e.reason for e in trusted_sink.events] == ["PruneOverridden"]
    untrusted, sink = _decide(False, _forged(claim()))
    assert sink.events == []
    assert untrusted == trusted  # the verdict does not depend on it


def test_without_trusted_callers_a_refusal_records_no_event_either() -> None:
    response, sink = _decide(False, review(claim(), user="mallory"))
    assert response["allowed"] is False
    assert response["status"]["reason"] == "CLAIM_MOUNTED"
    assert sink.events == []


def test_events_off_is_said_once_at_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="prune_gate.webhook"):
        _decide(False, _forged(claim()))
    said = [r for r in caplog.records if r.getMessage() == EVENTS_OFF]
    assert len(said) == 1
    assert EVENTS_OFF.startswith("no --client-ca: any caller that reaches the port could forge")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prune_gate.webhook"):
        _decide(True, _forged(claim()))
    assert not [r for r in caplog.records if r.getMessage() == EVENTS_OFF]


# ------------------------------------------------------------------------- the TLS context


def _files(tmp_path: Path) -> tuple[Path, Path, Path, tls.CertPair]:
    """A serving pair, a client CA file, and that CA (to sign client certificates)."""
    cert, key, client_ca = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "client-ca.crt"
    server_ca = tls.make_ca()
    tls.write_pair(tls.make_serving_cert(server_ca, ["127.0.0.1"]), cert, key)
    (tmp_path / "ca.crt").write_bytes(server_ca.cert_pem)
    ca = tls.make_ca("webhook client CA")
    client_ca.write_bytes(ca.cert_pem)
    return cert, key, client_ca, ca


def _handshake(
    tmp_path: Path, server_ctx: ssl.SSLContext, client: tls.CertPair | None
) -> tuple[bytes, str | None]:
    """One connection: what the client read back, and the server's TLS error (None: served)."""
    server_error: list[str | None] = [None]
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls_conn:
                    tls_conn.recv(16)
                    tls_conn.sendall(b"ok")
            except (ssl.SSLError, OSError) as exc:
                server_error[0] = f"{type(exc).__name__}: {exc}"

        thread = threading.Thread(target=serve)
        thread.start()
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        if client is not None:
            tls.write_pair(client, tmp_path / "client.crt", tmp_path / "client.key")
            ctx.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
        got = b""
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                conn.sendall(b"hello")
                got = conn.recv(16)
        except (ssl.SSLError, OSError):
            pass
        thread.join(10)
    return got, server_error[0]


def test_with_a_client_ca_only_its_certificates_get_through(tmp_path: Path) -> None:
    cert, key, client_ca, ca = _files(tmp_path)
    reloader = CertReloader(cert, key, client_ca_file=client_ca)
    ctx = reloader.context()
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert _handshake(tmp_path, ctx, tls.make_client_cert(ca, "kube-apiserver")) == (b"ok", None)
    got, error = _handshake(tmp_path, ctx, None)
    assert got == b""
    assert error is not None and "CERTIFICATE" in error.upper(), error
    other = tls.make_client_cert(tls.make_ca("eve's CA"), "kube-apiserver")
    got, error = _handshake(tmp_path, ctx, other)
    assert got == b""
    assert error is not None, "a certificate from another CA was accepted"


def test_without_a_client_ca_no_certificate_is_asked_for(tmp_path: Path) -> None:
    cert, key, _, _ = _files(tmp_path)
    ctx = CertReloader(cert, key).context()
    assert ctx.verify_mode is ssl.CERT_NONE
    assert _handshake(tmp_path, ctx, None) == (b"ok", None)


def test_a_rotated_client_ca_is_reloaded_and_a_broken_one_keeps_the_old(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key, client_ca, _ = _files(tmp_path)
    reloader = CertReloader(cert, key, client_ca_file=client_ca)
    first = reloader.context()
    rotated = tls.make_ca("rotated client CA")
    client_ca.write_bytes(rotated.cert_pem)
    second = reloader.context()
    assert second is not first
    assert reloader.reloads == 1
    assert _handshake(tmp_path, second, tls.make_client_cert(rotated, "apiserver"))[0] == b"ok"
    client_ca.write_text("half-written")
    with caplog.at_level(logging.ERROR):
        assert reloader.context() is second
    assert "keeping the previous one" in caplog.text
    problem = reloader.problem()
    assert problem is not None and f"the client CA {client_ca} holds no PEM" in problem


# ------------------------------------------------------------------------------- the CLI


def _serve(tmp_path: Path, client_ca: Path) -> subprocess.CompletedProcess[str]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls.write_pair(tls.make_serving_cert(tls.make_ca(), ["127.0.0.1"]), cert, key)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG, encoding="utf-8")
    cmd = [sys.executable, "-m", "gate", "webhook", "serve", "--listen", "127.0.0.1:0"]
    return subprocess.run(
        [*cmd, "--cert-file", str(cert), "--key-file", str(key), "--client-ca", str(client_ca)],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_serve_with_a_missing_client_ca_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.crt"
    line = _one_line_error(_serve(tmp_path, missing))
    assert line == f"error: cannot read the client CA {missing}: No such file or directory"


def test_serve_with_a_garbage_client_ca_is_one_line_exit_2(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.crt"
    garbage.write_bytes(b"\xff\xfe not a certificate")
    line = _one_line_error(_serve(tmp_path, garbage))
    assert line.startswith(f"error: the client CA {garbage} holds no PEM certificate")


def test_serve_with_a_leaf_for_client_ca_says_to_give_the_ca(tmp_path: Path) -> None:
    leaf = tmp_path / "client.crt"
    leaf.write_bytes(tls.make_client_cert(tls.make_ca(), "kube-apiserver").cert_pem)
    line = _one_line_error(_serve(tmp_path, leaf))
    assert line.startswith(f"error: the client CA {leaf} holds no CA certificate")


# ----------------------------------------------------------------------- the health port


def _get(url: str, data: bytes | None = None) -> tuple[int, dict[str, Any] | str]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, body, kind = resp.status, resp.read().decode(), resp.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        status, body, kind = exc.code, exc.read().decode(), exc.headers.get_content_type()
    return int(status), json.loads(body) if kind == "application/json" else body


def test_the_health_port_serves_probes_and_metrics_and_never_validate() -> None:
    live = LiveState(POLICY.guarded_kinds)
    app = create_app(Settings(policy=POLICY, cache=StaticCache(live), now=lambda: NOW))
    server = HttpsServer(None, None)
    sock = listen_socket("127.0.0.1", 0)
    server.add_plain(sock, health_only(app))
    up = threading.Event()
    thread = threading.Thread(target=server.run, args=(None, up.set), daemon=True)
    thread.start()
    try:
        assert up.wait(30), "the health listener did not start"
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert _get(f"{base}/healthz") == (200, {"status": "alive"})
        assert _get(f"{base}/readyz")[0] == 200
        status, text = _get(f"{base}/metrics")
        assert status == 200 and "prune_gate_webhook_requests_total" in str(text)
        status, body = _get(f"{base}/validate", json.dumps(_forged(claim())).encode())
        assert status == 404
        assert isinstance(body, dict) and body["error"] == "not found"
        assert "/validate is on the TLS port" in body["reason"]
    finally:
        server.stop()
        thread.join(30)
        sock.close()


def test_a_busy_health_port_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
        tls.write_pair(tls.make_serving_cert(tls.make_ca(), ["127.0.0.1"]), cert, key)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG, encoding="utf-8")
        cmd = [sys.executable, "-m", "gate", "webhook", "serve", "--listen", "127.0.0.1:0"]
        result = subprocess.run(
            [*cmd, "--cert-file", str(cert), "--key-file", str(key), "--health-port", str(port)],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    line = _one_line_error(result)
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{port} (--health-port): ")
