"""Server-sent events (the WHATWG event-stream format): the one framer, for the model APIs' recorded
streams (journal/models/) and the MCP gateway's relayed ones (broker/mcp/http_relay.py).

An event is the lines up to a blank line (CRLF, LF or CR line ends); a line is `field: value` (one
space after the colon dropped), a line starting with `:` is a comment, a line without a colon is a
field with an empty value. Only `event` and `data` matter here (data lines joined with "\\n").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE_END = re.compile(rb"\r\n|\n|\r")


def split_events(buf: bytearray) -> list[bytes]:
    """Take every complete event (with its blank-line terminator) off the front of `buf` (a stream as it
    arrives: what is left is the start of the next event)."""
    events: list[bytes] = []
    while True:
        m = _EVENT_END.search(buf)
        if m is None:
            return events
        events.append(bytes(buf[: m.end()]))
        del buf[: m.end()]


def _fields(event: bytes) -> tuple[str | None, list[bytes]]:
    """(the `event` field or None, the data lines) of one event."""
    name: str | None = None
    data: list[bytes] = []
    for line in _LINE_END.split(event):
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    return name, data


def event_fields(event: bytes) -> tuple[str, bytes]:
    """(event type, data) of one event: the type "message" when the event names none."""
    name, data = _fields(event)
    return name or "message", b"\n".join(data)


def event_with_data(event: bytes, data: bytes) -> bytes:
    """The same event with its data replaced (keeps id:, event:, retry: lines and comments)."""
    lines = [ln for ln in _LINE_END.split(event) if ln and ln.partition(b":")[0] != b"data"]
    return b"\n".join([*lines, b"data: " + data]) + b"\n\n"


@dataclass(frozen=True)
class Event:
    event: str  # "message" when the stream names none
    data: str  # the data lines joined by "\n"

    def json(self) -> object | None:
        """The data parsed as JSON, or None (e.g. OpenAI's `[DONE]`)."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def parse_events(raw: bytes) -> list[Event]:
    """Every event of a complete stream that has data, in order (the last one may lack its blank line)."""
    buf = bytearray(raw)
    events = split_events(buf)
    if buf:
        events.append(bytes(buf))
    out = []
    for event in events:
        name, data = _fields(event)
        if data:
            out.append(Event(name or "message", b"\n".join(data).decode("utf-8", "replace")))
    return out


def json_events(raw: bytes) -> list[dict]:
    """The events whose data is a JSON object, with the event name under `"event"` when it was given."""
    out = []
    for ev in parse_events(raw):
        value = ev.json()
        if isinstance(value, dict):
            if ev.event != "message" and "type" not in value:
                value = {"type": ev.event, **value}
            out.append(value)
    return out
