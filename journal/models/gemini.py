"""Google Gemini API (`generativelanguage.googleapis.com`): `models/{m}:generateContent` and
`:streamGenerateContent` (server-sent events with `?alt=sse`, else one JSON array of chunks).

Request: `contents[].parts[]` and `systemInstruction.parts[]`: `text`, `inlineData.data` (base64),
`functionCall` (`name`, `args`, optional `id`: in clear), `functionResponse` (`name`, `response`: a
JSON object, referenced over its canonical bytes); `tools[].functionDeclarations[]` (`name`,
`description`, `parameters`). Response: `candidates[].content.parts[]` of the same kinds. Each
streamed chunk is a whole `GenerateContentResponse` holding the next parts. The REST API accepts
snake_case names too (`system_instruction`, `function_call`, ...); both are read.
"""

from __future__ import annotations

import json

from journal.models.refs import Referencer
from journal.models.shapes import ToolCall, ToolDef, ToolResult
from journal.sse import json_events

NAME = "gemini"
HOSTS = frozenset({"generativelanguage.googleapis.com"})
_METHODS = (":generateContent", ":streamGenerateContent")


_LIVE = "GenerativeService.BidiGenerateContent"
"""Gemini Live: a WebSocket at `/ws/google.ai.generativelanguage.<version>.GenerativeService.BidiGenerateContent`
(and `...BidiGenerateContentConstrained`), each message an entry (journal/models/websocket.py)."""


def is_model_path(path: str) -> bool:
    return path.endswith(_METHODS) or (path.startswith("/ws/") and _LIVE in path)


def match(host: str, path: str) -> bool:
    return host in HOSTS and is_model_path(path)


def _get(d: dict, camel: str) -> tuple[str, object]:
    """(the key used, its value) for a camelCase name or its snake_case twin."""
    snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in camel)
    if camel in d:
        return camel, d[camel]
    return snake, d.get(snake)


def _part(part: object, r: Referencer) -> object:
    if not isinstance(part, dict):
        return part
    out = dict(part)
    if isinstance(out.get("text"), str):
        out["text"] = r.text(out["text"])
    key, inline = _get(out, "inlineData")
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        out[key] = dict(inline, data=r.text(inline["data"]))
    key, fr = _get(out, "functionResponse")
    if isinstance(fr, dict) and "response" in fr:
        out[key] = dict(fr, response=r.value(fr["response"]))
    for name in ("executableCode", "codeExecutionResult"):
        key, value = _get(out, name)
        if isinstance(value, dict):
            field = "code" if name == "executableCode" else "output"
            if isinstance(value.get(field), str):
                out[key] = dict(value, **{field: r.text(value[field])})
    return out


def _content(content: object, r: Referencer) -> object:
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return content
    return dict(content, parts=[_part(p, r) for p in content["parts"]])


def reference_request(body: dict, r: Referencer) -> dict:
    out = dict(body)
    if isinstance(out.get("contents"), list):
        out["contents"] = [_content(c, r) for c in out["contents"]]
    key, system = _get(out, "systemInstruction")
    if system is not None:
        out[key] = _content(system, r) if isinstance(system, dict) else r.text(system)
    return out


def reference_response(body: object, r: Referencer) -> object:
    if isinstance(body, list):  # streamGenerateContent without alt=sse, recorded as received
        return [reference_response(b, r) for b in body]
    if not isinstance(body, dict):
        return body
    out = dict(body)
    if isinstance(out.get("candidates"), list):
        out["candidates"] = [
            dict(c, content=_content(c.get("content"), r)) if isinstance(c, dict) and "content" in c else c
            for c in out["candidates"]
        ]
    return out


def merge_chunks(chunks: list) -> dict | None:
    """The response a list of streamed chunks builds: parts appended, adjacent texts joined."""
    merged: dict | None = None
    candidates: dict[int, dict] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        merged = merged if merged is not None else {}
        for key, value in chunk.items():
            if key != "candidates":
                merged[key] = value
        for c in chunk.get("candidates") or ():
            if not isinstance(c, dict):
                continue
            i = c.get("index", 0)
            slot = candidates.setdefault(i, {"content": {"role": "model", "parts": []}})
            for key, value in c.items():
                if key != "content":
                    slot[key] = value
            content = got if isinstance(got := c.get("content"), dict) else {}
            if content.get("role"):
                slot["content"]["role"] = content["role"]
            for part in content.get("parts") or ():
                parts = slot["content"]["parts"]
                if (isinstance(part, dict) and set(part) <= {"text", "thought"} and parts
                        and set(parts[-1]) <= {"text", "thought"} and parts[-1].get("thought") == part.get("thought")
                        and isinstance(parts[-1].get("text"), str) and isinstance(part.get("text"), str)):
                    parts[-1] = dict(parts[-1], text=parts[-1]["text"] + part["text"])
                else:
                    parts.append(part)
    if merged is None:
        return None
    if candidates:
        merged["candidates"] = [candidates[i] for i in sorted(candidates)]
    return merged


def assemble_stream(raw: bytes) -> dict | None:
    return merge_chunks(json_events(raw))


def assemble_array(raw: bytes) -> dict | None:
    """`streamGenerateContent` without `alt=sse`: a JSON array of chunks."""
    try:
        chunks = json.loads(raw)
    except ValueError:
        return None
    return merge_chunks(chunks) if isinstance(chunks, list) else None


def _parts(content: object) -> list:
    if isinstance(content, dict) and isinstance(content.get("parts"), list):
        return [p for p in content["parts"] if isinstance(p, dict)]
    return []


def tool_calls(response: object) -> list[ToolCall]:
    out: list[ToolCall] = []
    if not isinstance(response, dict):
        return out
    for c in response.get("candidates") or ():
        for p in _parts(c.get("content") if isinstance(c, dict) else None):
            _, fc = _get(p, "functionCall")
            if isinstance(fc, dict) and isinstance(fc.get("name"), str):
                out.append(ToolCall(fc.get("id"), fc["name"], fc.get("args")))
    _, live = _get(response, "toolCall")  # a Gemini Live server message
    calls = _get(live, "functionCalls")[1] if isinstance(live, dict) else None
    for fc in calls if isinstance(calls, list) else ():
        if isinstance(fc, dict) and isinstance(fc.get("name"), str):
            out.append(ToolCall(fc.get("id"), fc["name"], fc.get("args")))
    return out


def tool_results(request: object) -> list[ToolResult]:
    out: list[ToolResult] = []
    if not isinstance(request, dict):
        return out
    for c in request.get("contents") or ():
        for p in _parts(c):
            _, fr = _get(p, "functionResponse")
            if isinstance(fr, dict):
                out.append(ToolResult(fr.get("id"), fr.get("name"), [fr.get("response")]))
    return out


def tools(request: object) -> list[ToolDef]:
    out: list[ToolDef] = []
    if not isinstance(request, dict):
        return out
    for t in request.get("tools") or ():
        if not isinstance(t, dict):
            continue
        _, decls = _get(t, "functionDeclarations")
        for d in decls if isinstance(decls, list) else ():
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                out.append(ToolDef(d["name"], d.get("description"), d.get("parameters", d.get("parametersJsonSchema"))))
    return out
