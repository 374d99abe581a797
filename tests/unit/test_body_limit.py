"""One body limit for /validate: every place that bounds a review's body agrees with
`webhook.review.DEFAULT_MAX_BYTES`, so a change to one cannot leave another behind (there were
two values, 3 MiB + 1 in the server and 4 MiB in the app, before they came from one constant)."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

from gate.engine.livestate import LiveState
from gate.engine.policy import Policy
from tests.unit.test_chart import container, render
from webhook.app import Settings
from webhook.cache import StaticCache
from webhook.cli import serve
from webhook.httpbase import Limits
from webhook.review import DEFAULT_MAX_BYTES, parse_review

VALUES = Path(__file__).resolve().parents[2] / "charts" / "prune-gate" / "values.yaml"


def test_the_server_the_app_and_the_parser_take_the_one_limit() -> None:
    """The server reads one byte past the app's limit, so the app can tell "too large"."""
    assert Limits().max_body_bytes == DEFAULT_MAX_BYTES + 1
    policy = Policy()
    settings = Settings(policy=policy, cache=StaticCache(LiveState(policy.guarded_kinds)))
    assert settings.max_body_bytes == DEFAULT_MAX_BYTES
    assert inspect.signature(parse_review).parameters["max_bytes"].default == DEFAULT_MAX_BYTES
    option = next(p for p in serve.params if p.name == "max_body_bytes")
    assert option.default == DEFAULT_MAX_BYTES


def test_the_charts_default_is_the_command_lines() -> None:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    assert values["server"]["tls"]["maxBodyBytes"] == DEFAULT_MAX_BYTES
    assert f"--max-body-bytes={DEFAULT_MAX_BYTES}" in container(render())["args"]


def test_a_chart_value_reaches_the_command_line() -> None:
    args = container(render({"server": {"tls": {"maxBodyBytes": 8 * 1024 * 1024}}}))["args"]
    assert "--max-body-bytes=8388608" in args
