"""`broker run -v`'s line per recorded call quotes what the agent chose (its session name, the method, the URL):
shown escaped on its one line (broker/cli/terminal_text.py), never obeyed by the operator's terminal."""

from __future__ import annotations

from broker.proxy.call_log import recorded_call_line

LIE = "\x1b[2J\x1b]0;title\x07\r\nbroker: recorded seq=1 session=forged\u202e\u2028\x9b[/]"


def test_the_recorded_call_line_escapes_what_the_agent_chose() -> None:
    line = recorded_call_line(True, "s" + LIE, "other", "GET" + LIE, 200, "https://example.com/" + LIE)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line, repr(line)
    assert not any(c in line for c in "\u202e\u2028\x9b\x07"), repr(line)
    assert line.startswith("recorded seq=? session=s\\x1b[2J\\x1b]0;title\\x07\\r\\nbroker: recorded"), line
    assert line.count("\\x1b[2J") == 3 and "[/]" in line
