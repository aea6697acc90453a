"""How listings show one entry: its timeline row, its method (with the tool, prompt, resource or task an MCP
call names) and its status column. `broker show`, `broker search` and the inspector's timelines all show
entries this way.

Apart from journal.summary (the session's line, which verifies it): a listing reads entries and checks
nothing, so `broker show --seq N` loads neither the verifier nor its libraries.
"""

from __future__ import annotations

from journal.entry import TOOL_ERROR


def call_target(entry: dict) -> str | None:
    """What an MCP entry's call names: the tool (`tools/call`), the prompt (`prompts/get`), the
    resource (`resources/read`) or the task (`tasks/*`); None for any other entry. Listings show it
    beside the method, where the URL alone would only name the server."""
    mcp = entry.get("mcp")
    params = mcp.get("params") if isinstance(mcp, dict) else None
    if not isinstance(params, dict):
        return None
    for key in ("name", "uri", "taskId"):
        value = params.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def call_label(entry: dict) -> str:
    """The method as listings show it: `tools/call send_message`, or the method alone."""
    req = got if isinstance(got := entry.get("request"), dict) else {}
    method = str(method_label(req) or "?")
    target = call_target(entry)
    return f"{method} {target}" if target else method


def status_text(status: object, error: object) -> str:
    """A listing's status column: the status; `ERR(why)` when no answer came; a tool error marked."""
    if status is None:
        return f"ERR({error or '?'})"
    if error == TOOL_ERROR:
        return f"{status} (tool error)"
    return str(status)


def method_label(request: dict) -> object:
    """The request's method as timelines show it (`broker show`, `search`, the inspector): a WebSocket
    message (docs/contract.md section 8) as `WS→text` (the client sent it) or `WS←binary` (the server
    did), so a reader sees the direction and kind without opening the entry; else the method."""
    method = request.get("method")
    ws = request.get("websocket")
    if method != "WEBSOCKET" or not isinstance(ws, dict):
        return method
    arrow = "→" if ws.get("direction") == "client_to_server" else "←"
    return f"WS{arrow}{ws.get('kind')}"


def entry_row(entry: dict, line: int) -> dict:
    """One timeline row of an entry (as recorded; fields a tampered entry lacks come out as None).
    `line` is the entry's position in the file, which is its seq when the chain holds."""
    req = got if isinstance(got := entry.get("request"), dict) else {}
    resp = got if isinstance(got := entry.get("response"), dict) else {}
    return {
        "line": line, "seq": entry.get("seq"), "ts": entry.get("ts"), "connector": entry.get("connector"),
        "effect": entry.get("effect"), "capture": entry.get("capture"), "agent": entry.get("agent"),
        "principal": entry.get("principal"), "method": method_label(req), "url": req.get("url"),
        "target": call_target(entry),
        "effect_basis": req.get("effect_basis"), "status": resp.get("status"),
        "answered_by": resp.get("answered_by"), "error": resp.get("error"),
    }
