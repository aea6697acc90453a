"""Anthropic Messages API (`POST /v1/messages`): texts to reference, tool calls, tool results, streams.

Request: `system` (a string or text blocks), `messages[].content` (a string or content blocks:
`text`, `image`/`document` with base64 `source.data`, `tool_use` (in clear), `tool_result` whose
`content` is a string or blocks, `thinking`), `tools[]` (`name`, `description`, `input_schema`).
Response: `content[]` blocks of the same kinds. Stream (`"stream": true`): `message_start`,
`content_block_start`, `content_block_delta` (`text_delta`, `input_json_delta`, `thinking_delta`,
`signature_delta`), `content_block_stop`, `message_delta`, `message_stop`, `ping`, `error`.
"""

from __future__ import annotations

import json

from journal.models.refs import Referencer
from journal.models.shapes import ToolCall, ToolDef, ToolResult
from journal.sse import json_events

NAME = "anthropic"
HOSTS = frozenset({"api.anthropic.com"})
PATHS = ("/v1/messages",)
_TEXT_KEYS = ("text", "thinking")


def match(host: str, path: str) -> bool:
    return host in HOSTS and path in PATHS


def _block(block: object, r: Referencer) -> object:
    if isinstance(block, str):
        return r.text(block)
    if not isinstance(block, dict):
        return block
    out = dict(block)
    kind = out.get("type")
    if kind in ("tool_use", "server_tool_use"):
        return out  # the instruction: in clear
    for key in _TEXT_KEYS:
        if isinstance(out.get(key), str):
            out[key] = r.text(out[key])
    if kind == "redacted_thinking" and isinstance(out.get("data"), str):
        out["data"] = r.text(out["data"])
    if isinstance(out.get("source"), dict) and isinstance(out["source"].get("data"), str):
        out["source"] = dict(out["source"], data=r.text(out["source"]["data"]))
    if "content" in out:  # tool_result, web search results and the like
        out["content"] = _content(out["content"], r)
    return out


def _content(content: object, r: Referencer) -> object:
    if isinstance(content, str):
        return r.text(content)
    if isinstance(content, list):
        return [_block(b, r) for b in content]
    return content


def reference_request(body: dict, r: Referencer) -> dict:
    out = dict(body)
    if "system" in out:
        out["system"] = _content(out["system"], r)
    if isinstance(out.get("messages"), list):
        out["messages"] = [
            dict(m, content=_content(m.get("content"), r)) if isinstance(m, dict) and "content" in m else m
            for m in out["messages"]
        ]
    return out


def reference_response(body: dict, r: Referencer) -> dict:
    out = dict(body)
    if "content" in out:
        out["content"] = _content(out["content"], r)
    return out


def assemble_stream(raw: bytes) -> dict | None:
    """The message a stream's events build, in the non-streamed response's shape."""
    message: dict | None = None
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for ev in json_events(raw):
        kind = ev.get("type")
        if kind == "message_start" and isinstance(ev.get("message"), dict):
            message = dict(ev["message"])
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
            blocks[ev.get("index", len(blocks))] = dict(ev["content_block"])
        elif kind == "content_block_delta" and isinstance(ev.get("delta"), dict):
            i, delta = ev.get("index", 0), ev["delta"]
            block = blocks.setdefault(i, {"type": "text", "text": ""})
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif dtype == "input_json_delta":
                partial[i] = partial.get(i, "") + delta.get("partial_json", "")
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.get("signature", "")
            elif dtype == "citations_delta":
                block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "message_delta":
            message = message if message is not None else {"type": "message", "role": "assistant"}
            if isinstance(ev.get("delta"), dict):
                message.update(ev["delta"])
            if isinstance(ev.get("usage"), dict):
                message["usage"] = {**(message.get("usage") or {}), **ev["usage"]}
        elif kind == "error":
            message = message if message is not None else {}
            message["error"] = ev.get("error")
    if message is None and not blocks:
        return None
    for i, text in partial.items():
        try:
            blocks[i]["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[i]["input"] = text  # as streamed: the client could not parse it either
    message = message if message is not None else {"type": "message", "role": "assistant"}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def tool_calls(response: object) -> list[ToolCall]:
    if not isinstance(response, dict) or not isinstance(response.get("content"), list):
        return []
    return [
        ToolCall(b.get("id"), b["name"], b.get("input"))
        for b in response["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("name"), str)
    ]


def tool_results(request: object) -> list[ToolResult]:
    out: list[ToolResult] = []
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return out
    for m in request["messages"]:
        if not isinstance(m, dict) or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                content = b.get("content")
                if isinstance(content, list):
                    parts = [p.get("text", p.get("source", p)) if isinstance(p, dict) else p for p in content]
                else:
                    parts = [content]
                out.append(ToolResult(b.get("tool_use_id"), None, parts))
    return out


def tools(request: object) -> list[ToolDef]:
    if not isinstance(request, dict) or not isinstance(request.get("tools"), list):
        return []
    return [
        ToolDef(t["name"], t.get("description"), t.get("input_schema"))
        for t in request["tools"]
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    ]
