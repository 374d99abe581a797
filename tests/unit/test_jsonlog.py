"""The webhook's log lines (`webhook.jsonlog`): one JSON object a line, with the fields a call
passes, and none of what logging would gather per record for nothing (the caller's place)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from webhook import jsonlog

#: The logging switches `configure` turns off, put back after each test.
SWITCHES = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing", "logAsyncioTasks")


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    for name in SWITCHES:
        monkeypatch.setattr(logging, name, getattr(logging, name, None), raising=False)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    jsonlog.configure()
    out = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    return out


def test_a_line_is_one_json_object_with_the_extra_fields(stream: io.StringIO) -> None:
    log = logging.getLogger("prune_gate.webhook")
    log.warning("DELETE refused", extra={"uid": "u1", "findings": ["CLAIM_MOUNTED"], "x": None})
    log.debug("not at info")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["message"] == "DELETE refused"
    assert (line["level"], line["logger"]) == ("warning", "prune_gate.webhook")
    assert (line["uid"], line["findings"], line["x"]) == ("u1", ["CLAIM_MOUNTED"], None)
    assert line["time"].endswith("+00:00")


def test_an_exception_is_in_its_line(stream: io.StringIO) -> None:
    try:
        raise RuntimeError("bug")
    except RuntimeError:
        logging.getLogger("prune_gate.webhook").exception("could not decide", extra={"uid": "u"})
    line = json.loads(stream.getvalue())
    assert "RuntimeError: bug" in line["exception"]
    assert line["uid"] == "u"


def test_the_callers_place_is_not_looked_up(stream: io.StringIO) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logging.getLogger().addHandler(Keep())
    logging.getLogger("prune_gate.webhook").info("allowed")
    assert records[0].funcName == "(unknown function)"
    assert records[0].threadName is None
