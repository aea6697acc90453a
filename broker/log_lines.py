"""How the broker's processes write their log lines on stderr: text for a person (the default), or one
JSON object per line for a log shipper (`broker run --log-format json`, `broker mcp --log-format json`).

The choice travels in the environment (`BROKER_LOG_FORMAT`), so the processes a command starts (the
recording service, the workers) write the same format without an option of their own. A JSON line is
`{"ts": "<UTC, ms>", "level": "INFO", "source": "broker", "logger": "broker", "message": "..."}` (and
`"exception"` with the traceback text when there is one); a text line is what each source always wrote.
Either way a message is one line with no terminal sequence in it (`one_line_message`): log lines quote what the
agent sent (a URL, a host name, a tool name, an exception about its bytes).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime

from broker.cli.terminal_text import one_line

LOG_FORMAT_ENV = "BROKER_LOG_FORMAT"
LOG_FORMATS = ("text", "json")


def use_log_format(fmt: str) -> None:
    """Choose the format for this process and every process it starts."""
    os.environ[LOG_FORMAT_ENV] = fmt


def json_logs() -> bool:
    return os.environ.get(LOG_FORMAT_ENV) == "json"


def json_line(source: str, level: str, message: str, logger: str = "", exception: str = "") -> str:
    """One log event as a JSON object on one line (newlines in the message stay escaped inside it)."""
    now = datetime.now(UTC)
    event = {"ts": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z", "level": level,
             "source": source, "logger": logger or source, "message": message}
    if exception:
        event["exception"] = exception
    return json.dumps(event, ensure_ascii=False)


class JsonLines(logging.Formatter):
    """A logging record as `json_line`."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def format(self, record: logging.LogRecord) -> str:
        exception = self.formatException(record.exc_info) if record.exc_info else ""
        return json_line(self.source, record.levelname, record.getMessage(), record.name, exception)


def one_line_message(record: logging.LogRecord) -> bool:
    """A logging filter: the record's message (its arguments filled in) made one line by `one_line` before any
    formatter sees it, so a line break or ESC the agent put in a URL or name cannot forge a log line or reach
    the terminal. A traceback (`exc_info`) keeps its own lines."""
    message = record.getMessage()
    shown = one_line(message)
    if shown != message:
        record.msg, record.args = shown, None
    return True


def stderr_handler(source: str, text: logging.Formatter) -> logging.Handler:
    """A handler writing to stderr: JSON lines when chosen (see the module), else `text`; each message one line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines(source) if json_logs() else text)
    handler.addFilter(one_line_message)
    return handler
