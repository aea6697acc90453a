"""Log lines on stderr (`broker run`, the recording service, the workers, `broker exec`) quote what the agent
sent: a URL, a host name, an exception about its bytes. `broker.log_lines.stderr_handler` makes every message one
line with no terminal sequence in it, in text and in JSON lines alike."""

from __future__ import annotations

import io
import json
import logging

import pytest

from broker.log_lines import LOG_FORMAT_ENV, stderr_handler

HOSTILE = "https://a.example/x\x1b[2J\x1b]0;owned\x07\rbroker: recorded seq=1 session=s\n\u202egnp.exe"


def _logged(monkeypatch: pytest.MonkeyPatch, fmt: str) -> str:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setenv(LOG_FORMAT_ENV, fmt)
    handler = stderr_handler("broker", logging.Formatter("broker: %(levelname)s: %(message)s"))
    log = logging.getLogger("tests.log_line_escapes")
    log.propagate = False
    log.addHandler(handler)
    try:
        log.warning("refused %s: %s", HOSTILE, ValueError(HOSTILE))
    finally:
        log.removeHandler(handler)
    return stream.getvalue()


def test_a_text_log_line_quoting_the_agent_stays_one_line_without_terminal_sequences(monkeypatch):
    out = _logged(monkeypatch, "text")
    assert out.count("\n") == 1 and out.endswith("\n")
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out
    assert out.startswith("broker: WARNING: refused https://a.example/x\\x1b[2J\\x1b]0;owned\\x07\\rbroker: recorded")
    assert "\\n\\u202egnp.exe" in out


def test_a_json_log_line_carries_the_escaped_message(monkeypatch):
    out = _logged(monkeypatch, "json")
    assert out.count("\n") == 1
    event = json.loads(out)
    assert event["level"] == "WARNING" and "\x1b" not in event["message"] and "\u202e" not in event["message"]
    assert event["message"].startswith("refused https://a.example/x\\x1b[2J")


def test_a_clean_message_is_left_as_it_was(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setenv(LOG_FORMAT_ENV, "text")
    handler = stderr_handler("broker", logging.Formatter("%(message)s"))
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "call %d of %s", (3, "gmail"), None)
    handler.handle(record)
    assert stream.getvalue() == "call 3 of gmail\n"
    assert record.msg == "call %d of %s" and record.args == (3, "gmail")
