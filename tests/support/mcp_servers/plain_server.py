"""A small stdio MCP server for attack tests of the shim: batches, slow answers, first-wins keys.

    python -m tests.support.mcp_servers.plain_server LOGFILE [first-wins]

Every line it receives is appended to LOGFILE. A JSON-RPC batch gets one answer line per request
in it (in order). `tools/call`: `echo` answers `arguments.text`; `slow` sleeps `arguments.seconds`
first (it answers even a call the client cancelled, as servers may); `delete_everything` answers
"deleted"; `last_words` writes its whole answer (a text of `arguments.size` bytes) without the newline
that ends the line, and exits. With `first-wins`, an object with a duplicate key keeps the first value (as some JSON
parsers do), where Python's `json` keeps the last. A line that is not UTF-8 is read with U+FFFD for
its bad bytes, as a Node server (the TypeScript SDK's stdio transport) reads it.
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "slow", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "delete_everything", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": True}},
]


def _first_wins(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def _answer(rid: object, result: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode() + b"\n"


def _handle(msg: object) -> bytes:
    if not isinstance(msg, dict) or "id" not in msg or not isinstance(msg.get("method"), str):
        return b""
    method, rid, params = msg["method"], msg["id"], msg.get("params") or {}
    if method == "initialize":
        return _answer(rid, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                             "serverInfo": {"name": "Plain Server", "version": "1"}})
    if method == "tools/list":
        return _answer(rid, {"tools": TOOLS})
    if method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if name == "slow":
            time.sleep(float(args.get("seconds", 1)))
        if name == "last_words":
            os.write(1, _answer(rid, {"content": [{"type": "text", "text": "w" * int(args["size"]) + " the end"}],
                                      "isError": False}).rstrip(b"\n"))
            os._exit(3)
        text = "deleted" if name == "delete_everything" else str(args.get("text", "ok"))
        return _answer(rid, {"content": [{"type": "text", "text": text}], "isError": False})
    return json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}).encode() + b"\n"


def main() -> None:
    log = open(sys.argv[1], "ab", buffering=0)  # noqa: SIM115
    hook = _first_wins if "first-wins" in sys.argv[2:] else None
    buf = b""
    while chunk := os.read(0, 1 << 20):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            log.write(line + b"\n")
            try:
                # bytes that are not UTF-8 become U+FFFD, as Node's Buffer.toString (the TypeScript SDK) has them
                msg = json.loads(line.decode("utf-8", "replace"), object_pairs_hook=hook)
            except ValueError:
                continue
            for one in msg if isinstance(msg, list) else [msg]:
                os.write(1, _handle(one))


if __name__ == "__main__":
    main()
