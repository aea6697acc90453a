"""journal/sse.py, the one SSE framer: what the model parsers read from a recorded stream is what the MCP
relay frames from the same bytes arriving in pieces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from journal.sse import event_fields, event_with_data, parse_events, split_events

STREAM = (b": a comment\r\nevent: message_start\r\ndata: {\"a\": 1}\r\n\r\n"
          b"id: 7\ndata: x\ndata\ndata:  y\n\n"
          b"retry: 10\r\r"  # no data: no event for the parsers
          b"data: last, without its blank line")


def test_fields_comments_and_line_ends():
    events = parse_events(STREAM)
    assert [(e.event, e.data) for e in events] == [
        ("message_start", '{"a": 1}'), ("message", "x\n\n y"), ("message", "last, without its blank line")]
    assert events[0].json() == {"a": 1} and events[1].json() is None


def test_event_with_data_replaces_every_data_line_and_keeps_the_rest():
    (first, second, *_) = split_events(bytearray(STREAM))
    assert event_with_data(second, b"z") == b"id: 7\ndata: z\n\n"
    assert event_fields(event_with_data(first, b"{}")) == ("message_start", b"{}")


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_the_relay_framing_of_pieces_is_the_parse_of_the_whole(cuts):
    buf, framed = bytearray(), []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        buf += STREAM[a:b]
        framed += split_events(buf)
    framed.append(bytes(buf))  # the end of the stream closes the last event
    relayed = [event_fields(e) for e in framed]
    parsed = [(e.event, e.data.encode()) for e in parse_events(STREAM)]
    assert [r for r in relayed if r[1] or r[0] != "message"] == parsed
