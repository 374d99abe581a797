"""What `--register` waits for before it registers: a port it can bind, and a TLS server of its
own CA answering there (issue 13). The e2e test (test_register_order) shows the order against
the real API server; these pin the two checks themselves."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from webhook import tls
from webhook.serve import answers_tls, listen_socket


@contextmanager
def _tls_server(tmp_path: Path, ca: tls.CertPair, require_client: bool) -> Iterator[int]:
    pair = tls.make_serving_cert(ca, ["127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls.write_pair(pair, cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=tls.make_ca("another").cert_pem.decode())
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    with context.wrap_socket(conn, server_side=True) as wrapped:
                        wrapped.recv(1)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=10)


@pytest.fixture
def ca() -> tls.CertPair:
    return tls.make_ca()


@pytest.mark.parametrize("require_client", [False, True])
def test_our_tls_server_answers(tmp_path: Path, ca: tls.CertPair, require_client: bool) -> None:
    # A server that requires a client certificate (`--client-ca`) still proves it serves.
    with _tls_server(tmp_path, ca, require_client) as port:
        assert answers_tls("127.0.0.1", port, ca.cert_pem)


def test_a_server_of_another_ca_is_not_ours(tmp_path: Path, ca: tls.CertPair) -> None:
    with _tls_server(tmp_path, tls.make_ca("someone else"), False) as port:
        assert not answers_tls("127.0.0.1", port, ca.cert_pem)


def test_a_port_that_only_listens_does_not_answer(ca: tls.CertPair) -> None:
    # The kernel completes the TCP handshake of a bound, listening socket nobody accepts on:
    # that is not serving.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        assert not answers_tls("127.0.0.1", listener.getsockname()[1], ca.cert_pem, timeout=0.5)


def test_a_closed_port_does_not_answer(ca: tls.CertPair) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert not answers_tls("127.0.0.1", port, ca.cert_pem)


def test_a_taken_port_cannot_be_listened_on() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken, pytest.raises(OSError):
        listen_socket("127.0.0.1", taken.getsockname()[1])
    with listen_socket("127.0.0.1", 0) as free:  # a free one raises nothing, and listens
        assert free.getsockname()[1] > 0
        socket.create_connection(free.getsockname(), timeout=5).close()
