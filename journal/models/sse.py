"""Server-sent events (the WHATWG event-stream format) as the model APIs stream them."""

from __future__ import annotations

import json
from dataclasses import dataclass


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
    """Every event of a complete stream, in order; comments and `id:`/`retry:` lines are skipped."""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    events: list[Event] = []
    name, data = "", []
    for line in text.split("\n") + [""]:
        if not line:
            if data:
                events.append(Event(name or "message", "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return events


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
