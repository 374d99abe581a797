"""`gate webhook serve`: which cluster it talks to, and what it leaves behind."""

from __future__ import annotations

import base64
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.model.errors import ClusterError
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
    """A worker process's exit removes the client's temporary certificate files (atexit runs in
    a fork too): the parent's next client, unregistering the webhook, must not need them."""
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
    from webhook import httpserver

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(httpserver.HttpsServer, "run", lambda *_a: pytest.fail("served"))
    with pytest.raises(ClusterError):
        kube_configuration(None)
    result = CliRunner().invoke(main, ["webhook", "serve", "--self-signed"])
    assert result.exit_code == 2, result.output
    assert "cannot load the kubeconfig" in result.output


class StderrLines:
    """A child's stderr, read by a thread into a queue, so that every wait on it has a deadline:
    a server that hangs before it logs, or ignores SIGTERM, fails the test instead of hanging CI
    (iterating `proc.stderr` blocks until a line or EOF comes, however long that is)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self.lines: list[str] = []
        self._stream = proc.stderr
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._ended = False
        threading.Thread(target=self._pump, name="stderr", daemon=True).start()

    def _pump(self) -> None:
        try:
            for line in self._stream:
                self._queue.put(line)
        except (OSError, ValueError):  # the pipe closed under the read: the child is gone
            pass
        self._queue.put(None)

    def _next(self, deadline: float) -> str | None:
        """The next line; None at EOF; TimeoutError once the deadline passes."""
        left = deadline - time.monotonic()
        try:
            line = self._queue.get(timeout=max(left, 0.0))
        except queue.Empty:
            raise TimeoutError(f"stderr so far:\n{''.join(self.lines)}") from None
        if line is None:
            self._ended = True
        else:
            self.lines.append(line)
        return line

    def wait_for(self, text: str, timeout: float) -> None:
        """Read until a line holds `text`; fail at EOF or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self._ended:
            line = self._next(deadline)
            if line is not None and text in line:
                return
        raise AssertionError(f"exited before logging {text!r}:\n{''.join(self.lines)}")

    def rest(self, timeout: float) -> str:
        """Everything to EOF (read within `timeout` seconds), all lines so far joined."""
        deadline = time.monotonic() + timeout
        while not self._ended:
            self._next(deadline)
        return "".join(self.lines)


def _serve_until_sigterm(tmp_path: Path, *args: str) -> str:
    """Run `gate webhook serve --self-signed ARGS` until it serves, SIGTERM it; its log."""
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:9")
    env = {**os.environ, "TMPDIR": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
    cmd = [sys.executable, "-m", "gate", "webhook", "serve", "--self-signed"]
    with subprocess.Popen(
        [*cmd, "--listen", "127.0.0.1:0", *args], env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            stderr = StderrLines(proc)
            stderr.wait_for('"serving"', timeout=60)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, "".join(stderr.lines)
            return stderr.rest(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_waiting_on_a_silent_server_has_a_deadline() -> None:
    """A child that logs one line and then hangs: the wait ends at its deadline, with the log."""
    hang = "import sys, time; print('starting', file=sys.stderr, flush=True); time.sleep(120)"
    with subprocess.Popen([sys.executable, "-c", hang], stderr=subprocess.PIPE, text=True) as proc:
        try:
            stderr = StderrLines(proc)
            with pytest.raises(TimeoutError, match="starting"):
                stderr.wait_for('"serving"', timeout=2)
            assert proc.poll() is None  # still hanging: the test, not the child, ended the wait
        finally:
            proc.kill()
        assert stderr.rest(timeout=10) == "starting\n"  # killed: EOF comes, and soon


def test_self_signed_removes_its_temporary_certificates_on_sigterm(tmp_path: Path) -> None:
    log = _serve_until_sigterm(tmp_path)
    assert "self-signed certificate written" in log
    assert "self-signed certificate removed" in log
    assert list(tmp_path.glob("prune-gate-certs-*")) == []


def test_self_signed_keeps_a_cert_dir_it_was_given(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    _serve_until_sigterm(tmp_path, "--cert-dir", str(certs))
    assert sorted(p.name for p in certs.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
