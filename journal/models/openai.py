"""OpenAI Chat Completions (`/v1/chat/completions`) and Responses (`/v1/responses`), and servers that
speak them on other hosts (vLLM, Ollama, LiteLLM: `model_api = "openai"` in the connectors file).

Chat Completions: request `messages[]` whose `content` is a string or parts (`text`, `image_url`,
`input_audio`); `role: "tool"` messages carry tool results (`tool_call_id`); assistant
`tool_calls[]` (`id`, `function.name`, `function.arguments` as a JSON string) stay in clear;
`tools[]` are `{"type": "function", "function": {name, description, parameters}}`. Response
`choices[].message`. Stream: `data:` chunks with `choices[].delta` (content, tool_calls by
`index` with argument fragments), then `data: [DONE]`.

Responses: request `instructions` and `input` (a string or items: messages with `content` parts
`input_text`/`output_text`/`input_image`/`input_file`, `function_call` (in clear),
`function_call_output` with `output`, `reasoning` with `summary[].text`); `tools[]` are
`{"type": "function", name, description, parameters}`. Response `output[]` items of the same kinds.
Stream: typed events (`response.created`, `response.output_text.delta`,
`response.function_call_arguments.delta`, `response.output_item.done`, ...) ending with
`response.completed` (or `.incomplete` / `.failed`), which holds the whole response.
"""

from __future__ import annotations

import json

from journal.models.refs import Referencer
from journal.models.shapes import ToolCall, ToolDef, ToolResult
from journal.sse import json_events

NAME = "openai"
HOSTS = frozenset({"api.openai.com"})
PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/realtime")
"""`/v1/realtime` is the Realtime API's WebSocket; `/v1/responses` is also the Responses API's
WebSocket mode (a GET that upgrades): each message is an entry (journal/models/websocket.py)."""
_PART_TEXT_KEYS = ("text", "refusal")


def match(host: str, path: str) -> bool:
    return host in HOSTS and path in PATHS


def is_model_path(path: str) -> bool:
    """Whether a path on an OpenAI-compatible server is a model call (the rest are ordinary calls)."""
    return path.rstrip("/").endswith(("/chat/completions", "/responses", "/completions", "/realtime"))


def _part(part: object, r: Referencer) -> object:
    if isinstance(part, str):
        return r.text(part)
    if not isinstance(part, dict):
        return part
    out = dict(part)
    if out.get("type") in ("function_call", "custom_tool_call"):
        return out
    for key in _PART_TEXT_KEYS:
        if isinstance(out.get(key), str):
            out[key] = r.text(out[key])
    if isinstance(out.get("image_url"), dict) and str(out["image_url"].get("url", "")).startswith("data:"):
        out["image_url"] = dict(out["image_url"], url=r.text(out["image_url"]["url"]))
    elif isinstance(out.get("image_url"), str) and out["image_url"].startswith("data:"):
        out["image_url"] = r.text(out["image_url"])
    for key, inner in (("input_audio", "data"), ("file", "file_data")):
        if isinstance(out.get(key), dict) and isinstance(out[key].get(inner), str):
            out[key] = dict(out[key], **{inner: r.text(out[key][inner])})
    if isinstance(out.get("file_data"), str):
        out["file_data"] = r.text(out["file_data"])
    return out


def _content(content: object, r: Referencer) -> object:
    if isinstance(content, str):
        return r.text(content)
    if isinstance(content, list):
        return [_part(p, r) for p in content]
    return content


def _message(m: object, r: Referencer) -> object:
    if not isinstance(m, dict):
        return m
    out = dict(m)
    for key in ("content", "refusal", "reasoning_content", "reasoning"):
        if key in out and not (key == "reasoning" and isinstance(out[key], dict)):
            out[key] = _content(out[key], r)
    return out


def _item(item: object, r: Referencer) -> object:
    """A Responses input or output item."""
    if isinstance(item, str):
        return r.text(item)
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call", "web_search_call", "file_search_call", "computer_call"):
        return item
    out = dict(item)
    if kind in ("function_call_output", "custom_tool_call_output", "computer_call_output"):
        if "output" in out:
            out["output"] = _content(out["output"], r)
        return out
    if kind == "reasoning":
        for key in ("summary", "content"):
            if isinstance(out.get(key), list):
                out[key] = [_part(p, r) for p in out[key]]
        if isinstance(out.get("encrypted_content"), str):
            out["encrypted_content"] = r.text(out["encrypted_content"])
        return out
    if "content" in out:
        out["content"] = _content(out["content"], r)
    return out


def reference_request(body: dict, r: Referencer) -> dict:
    out = dict(body)
    if isinstance(out.get("messages"), list):  # Chat Completions
        out["messages"] = [_message(m, r) for m in out["messages"]]
    if isinstance(out.get("prompt"), str | list):  # legacy completions
        out["prompt"] = _content(out["prompt"], r)
    if isinstance(out.get("instructions"), str):
        out["instructions"] = r.text(out["instructions"])
    if isinstance(out.get("input"), str):
        out["input"] = r.text(out["input"])
    elif isinstance(out.get("input"), list):
        out["input"] = [_item(i, r) for i in out["input"]]
    return out


def _choice(choice: object, r: Referencer) -> object:
    if not isinstance(choice, dict):
        return choice
    out = dict(choice)
    for key in ("message", "delta"):
        if key in out:
            out[key] = _message(out[key], r)
    if isinstance(out.get("text"), str):  # legacy completions
        out["text"] = r.text(out["text"])
    return out


def reference_response(body: dict, r: Referencer) -> dict:
    out = dict(body)
    if isinstance(out.get("choices"), list):
        out["choices"] = [_choice(c, r) for c in out["choices"]]
    if isinstance(out.get("output"), list):
        out["output"] = [_item(i, r) for i in out["output"]]
    if isinstance(out.get("instructions"), str):
        out["instructions"] = r.text(out["instructions"])
    if isinstance(out.get("output_text"), str):
        out["output_text"] = r.text(out["output_text"])
    return out


def assemble_stream(raw: bytes) -> dict | None:
    events = json_events(raw)
    if not events:
        return None
    if any(str(e.get("type", "")).startswith("response.") for e in events):
        return _assemble_responses(events)
    return _assemble_chat(events)


def _assemble_responses(events: list[dict]) -> dict | None:
    final: dict | None = None
    items: dict[int, dict] = {}
    for ev in events:
        kind = ev.get("type")
        if kind in ("response.created", "response.in_progress", "response.completed", "response.incomplete",
                    "response.failed") and isinstance(ev.get("response"), dict):
            final = dict(ev["response"])
        elif kind == "response.output_item.done" and isinstance(ev.get("item"), dict):
            items[ev.get("output_index", len(items))] = ev["item"]
        elif kind == "error":
            final = dict(final or {}, error=ev.get("error", ev))
    if final is None:
        return {"object": "response", "output": [items[i] for i in sorted(items)]} if items else None
    if not final.get("output") and items:
        final["output"] = [items[i] for i in sorted(items)]
    return final


def _assemble_chat(events: list[dict]) -> dict | None:
    base: dict = {}
    choices: dict[int, dict] = {}
    calls: dict[int, dict[int, dict]] = {}
    for ev in events:
        for key in ("id", "created", "model", "system_fingerprint", "service_tier", "usage"):
            if ev.get(key) is not None:
                base[key] = ev[key]
        for c in ev.get("choices") or ():
            if not isinstance(c, dict):
                continue
            i = c.get("index", 0)
            choice = choices.setdefault(i, {"index": i, "message": {"role": "assistant", "content": None},
                                            "finish_reason": None})
            delta = got if isinstance(got := c.get("delta"), dict) else {}
            msg = choice["message"]
            if delta.get("role"):
                msg["role"] = delta["role"]
            for key in ("content", "refusal", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    msg[key] = (msg.get(key) or "") + delta[key]
            for tc in delta.get("tool_calls") or ():
                if not isinstance(tc, dict):
                    continue
                slot = calls.setdefault(i, {}).setdefault(
                    tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                if tc.get("type"):
                    slot["type"] = tc["type"]
                fn = got if isinstance(got := tc.get("function"), dict) else {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
            if c.get("finish_reason"):
                choice["finish_reason"] = c["finish_reason"]
    if not choices and not base:
        return None
    for i, by_index in calls.items():
        choices[i]["message"]["tool_calls"] = [by_index[k] for k in sorted(by_index)]
    return {**base, "object": "chat.completion", "choices": [choices[i] for i in sorted(choices)]}


def _arguments(value: object) -> object:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def tool_calls(response: object) -> list[ToolCall]:
    out: list[ToolCall] = []
    if not isinstance(response, dict):
        return out
    inner = response.get("response")
    if response.get("type") in ("response.done", "response.completed") and isinstance(inner, dict):
        response = inner  # a Realtime / Responses WebSocket event holding the whole response
    for c in response.get("choices") or ():
        msg = c.get("message") if isinstance(c, dict) else None
        for tc in (msg or {}).get("tool_calls") or () if isinstance(msg, dict) else ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                out.append(ToolCall(tc.get("id"), fn["name"], _arguments(fn.get("arguments"))))
    for item in response.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "function_call" and isinstance(item.get("name"), str):
            out.append(ToolCall(item.get("call_id"), item["name"], _arguments(item.get("arguments"))))
    return out


def tool_results(request: object) -> list[ToolResult]:
    out: list[ToolResult] = []
    if not isinstance(request, dict):
        return out
    for m in request.get("messages") or ():
        if isinstance(m, dict) and m.get("role") == "tool":
            content = m.get("content")
            parts = [p.get("text", p) if isinstance(p, dict) else p for p in content] if isinstance(
                content, list) else [content]
            out.append(ToolResult(m.get("tool_call_id"), m.get("name"), parts))
    items = request.get("input")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            parts = [p.get("text", p) if isinstance(p, dict) else p for p in output] if isinstance(
                output, list) else [output]
            out.append(ToolResult(item.get("call_id"), None, parts))
    return out


def tools(request: object) -> list[ToolDef]:
    out: list[ToolDef] = []
    if not isinstance(request, dict):
        return out
    for t in request.get("tools") or ():
        if not isinstance(t, dict):
            continue
        fn = got if isinstance(got := t.get("function"), dict) else t
        if isinstance(fn.get("name"), str):
            out.append(ToolDef(fn["name"], fn.get("description"), fn.get("parameters")))
    return out
