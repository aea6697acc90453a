"""Calls handed to the recording service as the addon frames them, with prompt capture: a model call
(Anthropic Messages) and the gmail calls around it. tests/e2e/test_prompts.py, the PostgreSQL readers'
tests and the inspector's scenes (tests/support/inspector_scenes.py) record sessions with them."""

from __future__ import annotations

import gzip
import json
from typing import Any

import msgspec

from broker.proxy.service import Service
from broker.proxy.wire import Completion, RequestAhead, frame, split_to_service
from journal.call import Call

SECRET_TEXTS = ["the private task text", "a secret system prompt", "tool said: 42 unread",
                "thinking hard about it", "iVBORw0KGgoAAAANSUhEUg=="]


def call_with_prompts(m: dict) -> Call:
    """The Call the addon hands over for these fields (prompt capture's `prompts`/`model_api` included)."""
    prompts, model_api = m.pop("prompts", None), m.pop("model_api", None)
    call = Call.make(**m)
    call.prompts, call.model_api = prompts, model_api
    return call


def send_framed(svc: Service, *messages) -> list:
    """Messages handed to the service as they travel: framed, then read back from the bytes."""
    return svc.handle(split_to_service(bytearray(b"".join(frame(m) for m in messages)))[0])


def request_ahead(n: int, call: Call) -> RequestAhead:
    """The request half of call `n`, as the addon sends it before the upstream answers."""
    return RequestAhead(n, msgspec.structs.replace(call, response=None))


def completion_of(n: int, call: Call) -> Completion:
    """The answer half of call `n`, which completes its `request_ahead`."""
    assert call.response is not None
    return Completion(n, call.response, call.ts, call.mcp)


def anthropic_call(session: str, mode: str, n: int, *, tool: tuple[str, dict] | None, results=(),
                   gzipped: bool = False) -> Call:
    """An Anthropic Messages call of seq `n` with prompt capture `mode`: its texts are SECRET_TEXTS, its
    answer asks for `tool` (name, input) when given, and `results` are (tool_use id, text) already answered."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": SECRET_TEXTS[0]}]
    for call_id, text in results:
        messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "t", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}]}]
    content: list[dict[str, Any]] = [{"type": "text", "text": SECRET_TEXTS[3]}]
    if tool:
        content.append({"type": "tool_use", "id": f"toolu_{n}", "name": tool[0], "input": tool[1]})
    resp = json.dumps({"type": "message", "role": "assistant", "content": content}).encode()
    return call_with_prompts({
        "session": session, "agent": "a", "principal": None, "connector": "anthropic", "method": "POST",
        "url": "https://api.anthropic.com/v1/messages",
        "request_headers": ((b"x-api-key", b"sk-ant-api03-secret-key"), (b"Content-Type", b"application/json")),
        "request_body": json.dumps({"model": "m", "system": SECRET_TEXTS[1], "messages": messages}).encode(),
        "status": 200, "response_headers": ((b"Content-Type", b"application/json"),)
        + (((b"Content-Encoding", b"gzip"),) if gzipped else ()),
        "response_body": gzip.compress(resp) if gzipped else resp, "error": None, "ts": 1790000000.0 + n,
        "mcp": None, "prompts": mode, "model_api": "anthropic",
    })


def gmail_call(session: str, n: int, mode: str | None = "refs") -> Call:
    """A gmail read of seq `n`, with prompt capture `mode` (None: off)."""
    m: dict[str, Any] = {"session": session, "agent": "a", "principal": None, "connector": "gmail", "method": "GET",
         "url": f"https://gmail.googleapis.com/gmail/v1/users/me/messages?n={n}",
         "request_headers": ((b"Authorization", b"Bearer ya29.x"),), "request_body": None, "status": 200,
         "response_headers": ((b"Content-Type", b"application/json"),), "response_body": b'{"messages": []}',
         "error": None, "ts": 1790000000.5 + n, "mcp": None}
    if mode:
        m["prompts"] = mode
    return call_with_prompts(m)
