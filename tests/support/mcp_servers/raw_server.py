"""A scripted stdio MCP server that writes exact bytes, for wire-level tests of the shim.

    python -m tests.support.mcp_servers.raw_server LOGFILE

Every line it receives is appended, byte for byte, to LOGFILE. It answers with hand-written
lines (odd key order and spacing on purpose, as other SDKs write them), so a test can check that
the shim changes nothing. What `tools/call` does depends on the tool name:

- `echo`: answers with `arguments.text` as the text content;
- `crash`: exits with code 7 without answering;
- `hold`: never answers (cancellation, timeouts, disconnects);
- `notjson`: writes a line that is not JSON, then answers;
- `bigint`: answers with an integer beyond 2^53 (JSON the journal cannot hold exactly);
- `ask`: sends a server-to-client `sampling/createMessage` request (id "s-1") and answers the call
  with the client's reply once it arrives;
- `chatty`: sends a progress notification before and a log notification after its answer, in one write;
- `emit`: writes the bytes of `arguments.b64` (base64) exactly, then answers (fuzz tests of what a
  server may send);
- `big`: answers with a text of `arguments.size` bytes;
- `fail`: answers with a tool error (`isError: true`) whose text is `arguments.reason`;
- `elicit`: sends a server-to-client `elicitation/create` request (id "e-1") and answers the call
  with the client's reply once it arrives;
- a `tools/call` with `params.task` is task-based (2025-11-25): the answer is a `CreateTaskResult`
  (task id `task-<call id>`); `tasks/get` gives its status, `tasks/result` its result (never, for
  `hold`, until it is cancelled: then an error), `tasks/cancel` cancels it;
- anything else: answers `{"content": [...], "isError": false}`.

`prompts/get` answers one user message `hello <arguments.who>`.

`tools/list` answers in two pages (`nextCursor`), so the first page alone leaves tools unknown.
Unknown methods get -32601. `initialize` and `server/discover` name the server "Raw Server". A
message it cannot make sense of is ignored: the server never stops on its input.
"""

from __future__ import annotations

import base64
import json
import os
import sys

TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "hold", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "ask", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "chatty", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "bigint", "inputSchema": {"type": "object"}},
    {"name": "delete_everything", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": True}},
    {"name": "emit", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "big", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "fail", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "elicit", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "send_mail", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False}},
]
TASKS: dict[str, dict] = {}  # task id -> {"tool", "text", "status", "waiting": result request ids}
PAGE = 4


def out(data: bytes) -> None:
    os.write(1, data)


def answer(request_id: object, result: dict) -> bytes:
    # result first, jsonrpc last, spaces after colons: not how the Python SDK writes it
    return ('{"result": ' + json.dumps(result) + ', "id": ' + json.dumps(request_id) + ', "jsonrpc": "2.0"}\n').encode()


def not_found(request_id: object) -> bytes:
    error = '"error":{"code":-32601,"message":"Method not found"}}\n'
    return ('{"jsonrpc":"2.0","id":' + json.dumps(request_id) + "," + error).encode()


def _task(task_id: str) -> dict:
    task = TASKS[task_id]
    return {"taskId": task_id, "status": task["status"], "createdAt": "2026-12-01T00:00:00Z",
            "lastUpdatedAt": "2026-12-01T00:00:00Z", "ttl": 60000}


def main() -> None:
    log = open(sys.argv[1], "ab", buffering=0)  # noqa: SIM115
    waiting: dict[str, object] = {}  # server request id -> the tools/call id it belongs to
    buf = b""
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            log.write(line + b"\n")
            try:
                handle(line, waiting)
            except Exception:  # noqa: BLE001, S110 - garbage in (fuzz tests): no answer, keep serving
                pass


def handle(line: bytes, waiting: dict[str, object]) -> None:
    try:
        msg = json.loads(line)
    except ValueError:
        out(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}\n')
        return
    if not isinstance(msg, dict):
        return
    method, rid = msg.get("method"), msg.get("id")
    if method is None:  # a response to our own request
        if isinstance(rid, str) and rid in waiting:
            call_id = waiting.pop(rid)
            result = msg.get("result", {})
            text = result.get("content", {}).get("text") or json.dumps(result.get("content"))
            out(answer(call_id, {"content": [{"type": "text", "text": "client said " + text}], "isError": False}))
        return
    if "id" not in msg:
        return  # notifications (an id of null is a request)
    if method in ("initialize", "server/discover"):
        if method == "server/discover":
            out(not_found(rid))
            return
        out(answer(rid, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                         "serverInfo": {"name": "Raw Server", "version": "1"}}))
    elif method == "tools/list":
        params = msg.get("params") or {}
        if params.get("cursor") == "page-2":
            out(answer(rid, {"tools": TOOLS[PAGE:]}))
        else:
            out(answer(rid, {"tools": TOOLS[:PAGE], "nextCursor": "page-2"}))
    elif method == "tools/call" and isinstance((msg.get("params") or {}).get("task"), dict):
        tool = msg["params"].get("name")
        task_id = f"task-{rid}"
        TASKS[task_id] = {"tool": tool, "text": (msg["params"].get("arguments") or {}).get("text", "ok"),
                          "status": "working" if tool == "hold" else "completed", "waiting": []}
        out(answer(rid, {"task": _task(task_id)}))
    elif method in ("tasks/get", "tasks/result", "tasks/cancel"):
        task_id = (msg.get("params") or {}).get("taskId")
        task = TASKS.get(task_id)
        if task is None:
            out(('{"jsonrpc":"2.0","id":' + json.dumps(rid) + ',"error":{"code":-32602,"message":"no such task"}}\n')
                .encode())
        elif method == "tasks/get":
            out(answer(rid, _task(task_id)))
        elif method == "tasks/cancel":
            task["status"] = "cancelled"
            out(answer(rid, _task(task_id)))
            for waiting_id in task["waiting"]:
                out(('{"jsonrpc":"2.0","id":' + json.dumps(waiting_id)
                     + ',"error":{"code":-32603,"message":"task cancelled"}}\n').encode())
        elif task["status"] == "working":
            task["waiting"].append(rid)
        else:
            related = {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
            out(answer(rid, {"content": [{"type": "text", "text": task["text"]}], "isError": False,
                             "_meta": related}))
    elif method == "prompts/get":
        who = ((msg.get("params") or {}).get("arguments") or {}).get("who", "?")
        out(answer(rid, {"messages": [{"role": "user", "content": {"type": "text", "text": f"hello {who}"}}]}))
    elif method == "tools/call":
        tool = msg.get("params", {}).get("name")
        args = msg.get("params", {}).get("arguments") or {}
        if tool == "fail":
            out(answer(rid, {"content": [{"type": "text", "text": args.get("reason", "boom")}], "isError": True}))
            return
        if tool == "elicit":
            waiting["e-1"] = rid
            out(b'{"jsonrpc":"2.0","id":"e-1","method":"elicitation/create","params":{"message":"sure?",'
                b'"requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}\n')
            return
        if tool == "crash":
            os._exit(7)
        if tool == "hold":
            return
        if tool == "notjson":
            out(b"this line is not JSON\n")
        if tool == "bigint":
            out(('{"jsonrpc":"2.0","id":' + json.dumps(rid) + ',"result":{"content":[],"n":12345678901234567890}}\n')
                .encode())
            return
        if tool == "emit":
            out(base64.b64decode(args["b64"]))
        if tool == "big":
            args = {"text": "z" * int(args["size"])}
            tool = "echo"
        if tool == "ask":
            waiting["s-1"] = rid
            out(b'{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}\n')
            return
        text = args.get("text", "ok") if tool == "echo" else "ok"
        reply = answer(rid, {"content": [{"type": "text", "text": text}], "isError": False})
        if tool == "chatty":
            before = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}\n'
            after = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}\n'
            reply = before + reply + after
        out(reply)
    elif method == "resources/read":
        out(answer(rid, {"contents": [{"uri": msg["params"]["uri"], "text": "hello"}]}))
    else:
        out(not_found(rid))


if __name__ == "__main__":
    main()
