"""Attack 11 of issue 8 (webhook side): every answer is JSON, bodies and nesting are bounded, and
`webhook serve` with a certificate or key that cannot serve is a one-line error, exit 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_webhook_app import claim, make_app, review
from tests.unit.wsgiclient import client_of
from webhook import tls
from webhook.app import Answer
from webhook.review import MAX_DEPTH, ReviewError, parse_review

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_unknown_path_and_wrong_method_are_json() -> None:
    app, _ = make_app()
    with client_of(app) as c:
        missing = c.get("/nope")
        wrong = c.get("/validate")
        put = c.put("/healthz")
        near = [c.post(path, json={}).status_code for path in ("/validate/", "/Validate")]
    assert missing.status_code == 404
    assert missing.mimetype == "application/json"
    assert missing.get_json()["error"] == "not found"
    assert "/nope" in missing.get_json()["reason"]
    assert wrong.status_code == 405
    assert wrong.mimetype == "application/json"
    assert "GET /validate" in wrong.get_json()["reason"]
    assert "POST" in wrong.headers["Allow"]
    assert put.status_code == 405
    assert put.mimetype == "application/json"
    assert near == [404, 404]


def test_head_is_get_without_the_body_and_only_where_get_is() -> None:
    app, _ = make_app()
    with client_of(app) as c:
        head = c.head("/healthz")
        get = c.get("/healthz")
        on_validate = c.head("/validate")
    assert head.status_code == 200
    assert head.data == b""
    assert head.headers["Content-Length"] == get.headers["Content-Length"] != "0"
    assert on_validate.status_code == 405
    assert on_validate.headers["Allow"] == "POST"


def test_a_body_with_no_length_and_no_end_is_not_waited_for() -> None:
    """Neither a length nor a server that says where the body ends: reading would wait for a
    client that may never send more, so nothing is read and the review is a 400."""
    app, _ = make_app()

    class Endless(io.BytesIO):
        def read(self, _size: int | None = -1) -> bytes:
            pytest.fail("the app read a body with no length and no end")

    with client_of(app) as c:
        for length in ("", "abc", "-5"):
            resp = c.post(
                "/validate",
                input_stream=Endless(),
                content_type="application/json",
                environ_overrides={"CONTENT_LENGTH": length},
            )
            assert resp.status_code == 400, length
            assert resp.get_json()["error"] == "bad request"


def test_a_chunked_body_is_read_one_byte_past_the_limit_and_no_more() -> None:
    app, _ = make_app(max_bytes=1000)
    asked: list[int | None] = []

    class Counting(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            asked.append(size)
            return super().read(size)

    with client_of(app) as c:
        resp = c.post(
            "/validate",
            input_stream=Counting(b"{" * 100_000),
            content_type="application/json",
            environ_overrides={"HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True},
        )
    assert resp.status_code == 413
    assert asked == [1001]


def test_a_body_over_the_limit_is_413_json_and_is_not_read() -> None:
    app, _ = make_app(max_bytes=1000)

    class Unreadable(io.BytesIO):
        """A body that fails the test if the app reads it."""

        def read(self, _size: int | None = -1) -> bytes:
            pytest.fail("the app read a body it had refused")

        def readline(self, _size: int | None = -1) -> bytes:
            pytest.fail("the app read a body it had refused")

    with client_of(app) as c:
        resp = c.post(
            "/validate",
            input_stream=Unreadable(),
            content_type="application/json",
            # what the client declares, which the test client would recompute from the stream
            environ_overrides={"CONTENT_LENGTH": "200000000"},
        )
    assert resp.status_code == 413
    assert resp.mimetype == "application/json"
    assert resp.get_json()["reason"] == (
        "body of 200000000 bytes exceeds the limit of 1000 bytes; not read"
    )


def test_a_chunked_body_over_the_limit_is_413_json() -> None:
    app, _ = make_app(max_bytes=1000)
    with client_of(app) as c:
        resp = c.post(
            "/validate",
            input_stream=io.BytesIO(b"[" * 5000),
            content_type="application/json",
            # a chunked body: no length, a server that says where the body ends (gunicorn does)
            environ_overrides={"HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True},
        )
    assert resp.status_code == 413
    assert resp.get_json()["error"] == "payload too large"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deeply_nested_json_is_400_with_a_reason(depth: int) -> None:
    app, _ = make_app(max_bytes=1_000_000)
    body = b"[" * depth + b"]" * depth
    with client_of(app) as c:
        resp = c.post("/validate", data=body, content_type="application/json")
    assert resp.status_code == 400
    assert resp.get_json()["reason"] == f"body nests deeper than {MAX_DEPTH} levels"


def test_nesting_inside_a_review_is_bounded_and_real_objects_pass() -> None:
    doc = review(claim())
    assert parse_review(json.dumps(doc).encode()).name == "data"
    deep: dict[str, object] = {}
    cursor = deep
    for _ in range(MAX_DEPTH):
        cursor["x"] = {}
        cursor = cursor["x"]  # type: ignore[assignment]
    doc["request"]["oldObject"]["spec"] = deep
    with pytest.raises(ReviewError, match="nests deeper than 100 levels"):
        parse_review(json.dumps(doc).encode(), max_bytes=1_000_000)


def test_an_unhandled_error_is_json() -> None:
    app, _ = make_app()

    def boom(_environ: object) -> Answer:
        raise RuntimeError("bug")

    app.routes["/boom"] = {"GET": boom}
    with client_of(app) as c:
        resp = c.get("/boom")
    assert resp.status_code == 500
    assert resp.mimetype == "application/json"
    assert "Traceback" not in resp.get_data(as_text=True)


def _serve(tmp_path: Path, cert: Path, key: Path) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG, encoding="utf-8")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    cmd = [sys.executable, "-m", "gate", "webhook", "serve", "--listen", "127.0.0.1:0"]
    return subprocess.run(
        [*cmd, "--cert-file", str(cert), "--key-file", str(key)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls.write_pair(tls.make_serving_cert(tls.make_ca(), ["127.0.0.1"]), cert, key)
    return cert, key


def _break_missing_key(cert: Path, key: Path) -> tuple[Path, str]:
    key.unlink()
    return key, "cannot read the private key"


def _break_garbage_key(cert: Path, key: Path) -> tuple[Path, str]:
    key.write_text("not a key\n")
    return key, "is not an unencrypted PEM private key"


def _break_garbage_cert(cert: Path, key: Path) -> tuple[Path, str]:
    cert.write_bytes(b"\x00\xffgarbage")
    return cert, "holds no PEM certificate"


def _break_missing_cert(cert: Path, key: Path) -> tuple[Path, str]:
    cert.unlink()
    return cert, "cannot read the serving certificate"


def _break_other_key(cert: Path, key: Path) -> tuple[Path, str]:
    other = tls.make_serving_cert(tls.make_ca(), ["127.0.0.1"])
    key.write_bytes(other.key_pem)
    return key, "does not belong to the certificate"


@pytest.mark.parametrize(
    "damage",
    [
        _break_missing_key,
        _break_garbage_key,
        _break_garbage_cert,
        _break_missing_cert,
        _break_other_key,
    ],
)
def test_serve_with_a_file_that_cannot_serve_is_one_line_exit_2(
    tmp_path: Path, damage: object
) -> None:
    cert, key = _pair(tmp_path)
    bad, words = damage(cert, key)  # type: ignore[operator]
    result = _serve(tmp_path, cert, key)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert str(bad) in lines[0]
    assert words in lines[0]
