"""`gate webhook serve`: which cluster it talks to, and what it leaves behind."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.errors import ClusterError
from webhook import tls
from webhook.cli import api_client, kube_configuration

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"}}
users:
- name: u
  user: {{token: t}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""


def _kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KUBECONFIG.format(server=server), encoding="utf-8")
    return path


@pytest.fixture
def in_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A pod's environment with no kubeconfig; in-cluster loading is recorded, not performed."""
    from kubernetes import config

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    loaded: list[str] = []

    def fake_incluster(client_configuration: Any = None, **_kw: Any) -> None:
        loaded.append("in-cluster")
        client_configuration.host = "https://10.96.0.1:443"

    monkeypatch.setattr(config, "load_incluster_config", fake_incluster)
    return loaded


def test_kubeconfig_option_wins(in_cluster: list[str], tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "given.yaml", "https://given:6443")
    assert kube_configuration(str(path)).host == "https://given:6443"
    assert in_cluster == []


def test_kubeconfig_env_before_in_cluster(
    in_cluster: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "env.yaml", "https://env:6443")))
    cfg = kube_configuration(None)
    assert cfg.host == "https://env:6443"
    assert cfg.connection_pool_maxsize == 64
    assert in_cluster == []


def test_home_kubeconfig_before_in_cluster(in_cluster: list[str], tmp_path: Path) -> None:
    _kubeconfig(tmp_path / "home" / ".kube" / "config", "https://home:6443")
    assert kube_configuration(None).host == "https://home:6443"
    assert in_cluster == []


def test_in_cluster_when_there_is_no_kubeconfig(in_cluster: list[str]) -> None:
    assert kube_configuration(None).host == "https://10.96.0.1:443"
    assert in_cluster == ["in-cluster"]


def test_each_client_rewrites_certificate_files_a_worker_removed(tmp_path: Path) -> None:
    """A gunicorn worker's exit removes the client's temporary certificate files (atexit runs in
    the fork): the master's next client, unregistering the webhook, must not need them."""
    ca = base64.b64encode(tls.make_ca().cert_pem).decode()
    path = tmp_path / "kubeconfig"
    path.write_text(
        KUBECONFIG.format(server="https://127.0.0.1:6443").replace(
            "{server: ", f"{{certificate-authority-data: {ca}, server: "
        ),
        encoding="utf-8",
    )
    first = kube_configuration(str(path)).ssl_ca_cert
    Path(first).unlink()
    api = api_client(str(path))
    try:
        assert Path(api.configuration.ssl_ca_cert).is_file()
    finally:
        api.close()


def test_no_cluster_at_all_is_a_usage_error_before_serving(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gate.cli import main
    from webhook import serve

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(serve.WebhookServer, "run", lambda self: pytest.fail("served"))
    with pytest.raises(ClusterError):
        kube_configuration(None)
    result = CliRunner().invoke(main, ["webhook", "serve", "--self-signed"])
    assert result.exit_code == 2, result.output
    assert "cannot load the kubeconfig" in result.output


def _serve_until_sigterm(tmp_path: Path, *args: str) -> str:
    """Run `gate webhook serve --self-signed ARGS` until its worker boots, SIGTERM it; its log."""
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:9")
    env = {**os.environ, "TMPDIR": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
    cmd = [sys.executable, "-m", "gate", "webhook", "serve", "--self-signed"]
    lines: list[str] = []
    with subprocess.Popen(
        [*cmd, "--listen", "127.0.0.1:0", *args], env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                lines.append(line)
                if "Booting worker" in line:
                    break
            proc.send_signal(signal.SIGTERM)
            lines.extend(proc.stderr)
            assert proc.wait(timeout=30) == 0, "".join(lines)
        finally:
            if proc.poll() is None:
                proc.kill()
    return "".join(lines)


def test_self_signed_removes_its_temporary_certificates_on_sigterm(tmp_path: Path) -> None:
    log = _serve_until_sigterm(tmp_path)
    assert "self-signed certificate written" in log
    assert "self-signed certificate removed" in log
    assert list(tmp_path.glob("prune-gate-certs-*")) == []


def test_self_signed_keeps_a_cert_dir_it_was_given(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    _serve_until_sigterm(tmp_path, "--cert-dir", str(certs))
    assert sorted(p.name for p in certs.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
