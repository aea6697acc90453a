"""How listings name an MCP call and mark a tool error (journal/listing.py), for `broker show`,
`broker search` and the inspector alike."""

from __future__ import annotations

from journal.entry import TOOL_ERROR
from journal.listing import call_label, call_target, entry_row, status_text


def _entry(method: str, params: object, **response: object) -> dict:
    return {"seq": 1, "mcp": {"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            "request": {"method": method, "url": "stdio:server --flag"}, "response": {"status": 200, **response}}


def test_the_tool_prompt_resource_or_task_is_named() -> None:
    assert call_label(_entry("tools/call", {"name": "send_message", "arguments": {}})) == "tools/call send_message"
    assert call_label(_entry("prompts/get", {"name": "greet"})) == "prompts/get greet"
    assert call_label(_entry("resources/read", {"uri": "note://n1"})) == "resources/read note://n1"
    assert call_label(_entry("tasks/result", {"taskId": "t-1"})) == "tasks/result t-1"
    assert entry_row(_entry("tools/call", {"name": "x"}), 1)["target"] == "x"


def test_entries_without_a_name_keep_the_method_alone() -> None:
    assert call_label(_entry("sampling/createMessage", {"messages": []})) == "sampling/createMessage"
    http = {"seq": 1, "mcp": None, "request": {"method": "GET", "url": "https://api.github.com/user"}}
    assert call_label(http) == "GET" and call_target(http) is None
    # a tampered entry of any shape reads as "no name", never raises
    for params in (None, [], "x", {"name": 5}, {"name": ""}):
        assert call_target(_entry("tools/call", params)) is None
    assert call_target({"mcp": "nonsense"}) is None and call_label({"request": None}) == "?"


def test_a_tool_error_is_marked_beside_its_status() -> None:
    assert status_text(200, TOOL_ERROR) == "200 (tool error)"
    assert status_text(200, None) == "200"
    assert status_text(None, "the client went away") == "ERR(the client went away)"
    assert status_text(None, None) == "ERR(?)"
