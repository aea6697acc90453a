"""Reading JSON-RPC lines without changing them: what a message is, and its id.

The relay never re-serialises what it forwards; it only looks. `parse_line` reads one line
(one JSON-RPC message or a batch) strictly with `journal.bodies.parse_json_strict` so the
value can go into an entry unchanged; a line that is not strict JSON is read leniently just to
learn its method and id, and is still relayed byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson

from journal import entry
from journal.bodies import parse_json_strict

RECORDED_METHODS = frozenset({
    "tools/call", "resources/read", "prompts/get", "tasks/get", "tasks/result", "tasks/cancel",
})
"""Client requests that become journal entries (a `tasks/get` only when its answer ends the task:
`recording.CallJournal.finish`)."""
SERVER_RECORDED_METHODS = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})
"""Server-to-client requests that become journal entries, with the client's answer as the response:
what the client's model or its user was asked, and what they said; and which roots (directories,
repositories) the client gave the server to work in."""
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel"})
"""Client requests about a task (2025-11-25): their entries name the call that created the task."""
TASK_ENDED = frozenset({"completed", "failed", "cancelled"})
"""Task statuses that end a task: a `tasks/get` answering one of these is recorded."""
TOOL_ERROR = entry.TOOL_ERROR
"""`response.error` of an entry whose tool answered with `isError: true` (docs/contract.md)."""

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
CLIENT_META = (
    PROTOCOL_VERSION_META, "io.modelcontextprotocol/clientInfo", "io.modelcontextprotocol/clientCapabilities",
)
"""2026-era request `_meta` keys the shim copies from the client's requests into its own tools/list."""


@dataclass
class Message:
    """One JSON-RPC message as seen on the wire."""

    value: object  # the parsed object (strict when `strict`, else lenient; None when unreadable)
    strict: bool  # True when `value` is exactly what the bytes say (fit for an entry)
    kind: str  # "request", "notification", "response", "invalid"

    @property
    def id(self) -> object:
        return self.value.get("id") if isinstance(self.value, dict) else None

    @property
    def method(self) -> str | None:
        m = self.value.get("method") if isinstance(self.value, dict) else None
        return m if isinstance(m, str) else None

    @property
    def params(self) -> object:
        return self.value.get("params") if isinstance(self.value, dict) else None


@dataclass
class Line:
    """A line and the messages in it (one, or several for a JSON-RPC batch)."""

    raw: bytes
    messages: list[Message]
    batch: bool
    error: str | None  # why the line is not (strict) JSON, for stderr
    other: list[Message] | None = None
    """When an object in the line has a duplicate key whose values differ: the messages as a parser that
    keeps the first value reads them (`messages` keep the last, as Python, JavaScript and Go do). A peer
    may read either: the shim cannot know which call it forwards (`ambiguous`)."""


def _first_wins(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _first_wins_reading(data: bytes, last: object) -> object:
    """`data` read keeping the first value of a duplicate key; `last` (the last-wins reading) when the two
    read the same (compared as JSON text: NaN, which is unequal to itself, reads the same both ways)."""
    try:
        first = json.loads(data.decode("utf-8", "replace"), object_pairs_hook=_first_wins)
        same = json.dumps(first, sort_keys=True) == json.dumps(last, sort_keys=True)
    except (ValueError, RecursionError):
        return last
    return last if same else first


def _kind(value: object) -> str:
    if not isinstance(value, dict):
        return "invalid"
    if isinstance(value.get("method"), str):
        return "request" if "id" in value else "notification"
    if "id" in value and ("result" in value or "error" in value):
        return "response"
    return "invalid"


def _lenient(data: bytes) -> object:
    """The line as a lenient peer reads it: bytes that are not UTF-8 as U+FFFD, as Node's Buffer.toString
    (the TypeScript SDK's stdio transport) reads them, so the call such a server runs is the call tracked."""
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        return _lenient_text(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def _lenient_text(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def parse_line(raw: bytes) -> Line:
    body = raw.rstrip(b"\r\n")
    if not body.strip():
        return Line(raw, [], False, None)
    ok, value = parse_json_strict(body)
    error = None
    other: list[Message] | None = None
    if not ok:
        value = _lenient(body)
        error = "not JSON" if value is None else "JSON the journal cannot hold exactly (duplicate keys or huge numbers)"
        if value is not None and (first := _first_wins_reading(body, value)) is not value:
            other = [Message(v, False, _kind(v)) for v in (first if isinstance(first, list) else [first])]
            error = "JSON whose duplicate keys parsers read differently (the first or the last value)"
    if isinstance(value, list):
        return Line(raw, [Message(v, ok, _kind(v)) for v in value], True, error, other)
    msg = Message(value, ok, _kind(value))
    if value is not None and msg.kind == "invalid" and error is None:
        error = "not a JSON-RPC message"
    return Line(raw, [msg], False, error, other)


def id_key(request_id: object) -> str:
    """A dict key for a JSON-RPC id of any JSON type (huge integers, floats, NaN, strings with lone
    surrogates, null, objects, arrays) that keeps 1 and "1" apart; never raises.

    An integral float is keyed as the integer (a JavaScript server answers id 1.0 as 1). The ids
    clients use (integers, short ASCII strings) are keyed without the JSON encoder, as it keys them."""
    if type(request_id) is str and request_id.isascii() and request_id.isprintable() and (
            '"' not in request_id and "\\" not in request_id):
        return f'"{request_id}"'
    if type(request_id) is float and request_id.is_integer():
        request_id = int(request_id)
    try:
        if type(request_id) is int:
            return str(request_id)  # ValueError beyond Python's digit limit, as json.dumps
        return json.dumps(request_id, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):  # nested too deeply for a key: this one id alone
        return f"<unkeyable {type(request_id).__name__} {id(request_id):x}>"


def dumps(value: object) -> bytes:
    """JSON bytes for any value a lenient parse can give (integers beyond 64 bits, NaN included), for
    the few lines the shim writes itself; never raises for such values."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def error_response(request_id: object, code: int, message: str) -> bytes:
    """A JSON-RPC error line the shim itself answers with (the id as the client sent it)."""
    error = orjson.dumps({"code": code, "message": message})
    return b'{"jsonrpc":"2.0","id":' + dumps(request_id) + b',"error":' + error + b"}\n"


def notification(method: str, params: dict) -> bytes:
    return dumps({"jsonrpc": "2.0", "method": method, "params": params}) + b"\n"


def client_meta(message: Message) -> dict:
    """The 2026-era client `_meta` keys of a request read exactly (empty when it has none)."""
    params = message.params if message.strict and isinstance(message.params, dict) else {}
    meta = got if isinstance(got := params.get("_meta"), dict) else {}
    return {k: meta[k] for k in CLIENT_META if k in meta}


def is_tool_error(response: Message | None) -> bool:
    """Whether a JSON-RPC response is a tool result with `isError: true` (a tool that failed, as
    opposed to a protocol error, which is a JSON-RPC `error`)."""
    value = response.value if response is not None and response.strict else None
    result = value.get("result") if isinstance(value, dict) else None
    return isinstance(result, dict) and result.get("isError") is True


def task_id(params: object) -> str | None:
    """`params.taskId` of a tasks/* request, or None."""
    got = params.get("taskId") if isinstance(params, dict) else None
    return got if isinstance(got, str) else None


def created_task(response: Message | None) -> str | None:
    """The task id a task-based call's answer (`CreateTaskResult`) created, or None."""
    value = response.value if response is not None and response.strict else None
    result = value.get("result") if isinstance(value, dict) else None
    task = result.get("task") if isinstance(result, dict) else None
    return task_id(task)


def task_status(response: Message | None) -> str | None:
    """The status a `tasks/get` answer gives (None when it is no such answer)."""
    value = response.value if response is not None and isinstance(response.value, dict) else None
    result = value.get("result") if value is not None else None
    status = result.get("status") if isinstance(result, dict) else None
    return status if isinstance(status, str) else None


def server_name(result: object) -> str | None:
    """The server's own name from an `initialize` result or a 2026-era result's `_meta`."""
    if not isinstance(result, dict):
        return None
    info = result.get("serverInfo")
    if not isinstance(info, dict):
        meta = result.get("_meta")
        info = meta.get(SERVER_INFO_META) if isinstance(meta, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    return name if isinstance(name, str) and name else None
