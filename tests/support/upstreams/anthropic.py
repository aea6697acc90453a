"""Fake Anthropic Messages API: ``POST api.anthropic.com/v1/messages``, JSON or SSE (``"stream": true``).

Why: prompt capture must read Anthropic's content blocks, tool_use / tool_result and its typed stream
events (message_start, content_block_*, message_delta, message_stop) exactly as the API sends them.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from .common import HttpError, Request, Response, Route, json_response, route
from .modelscript import ModelState, words

HOSTS = frozenset({"api.anthropic.com"})


def _results_shown(body: dict[str, Any]) -> int:
    n = 0
    for m in body.get("messages") or ():
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def _blocks(turn_no: int, turn: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.get("text"):
        blocks.append({"type": "text", "text": turn["text"]})
    for i, call in enumerate(turn.get("tool_calls") or ()):
        blocks.append({"type": "tool_use", "id": f"toolu_{turn_no:02d}{i:02d}fake", "name": call["name"],
                       "input": call["arguments"]})
    return blocks


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def messages(state: ModelState):
    def handler(req: Request, _m: re.Match[str]) -> Response:
        if not (req.header("x-api-key") or req.bearer()):  # newer SDKs send the key as a bearer token
            return json_response({"type": "error", "error": {"type": "authentication_error",
                                                             "message": "x-api-key header is required"}}, 401)
        body = req.json_object()
        if not isinstance(body.get("messages"), list) or not body.get("model"):
            raise HttpError(400, "messages and model are required")
        turn_no, turn = state.turn_for(_results_shown(body))
        stream = bool(body.get("stream"))
        state.note("anthropic", turn_no, stream)
        delay = state.delay(req.headers)
        blocks = _blocks(turn_no, turn)
        stop = "tool_use" if turn.get("tool_calls") else "end_turn"
        message = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                   "model": body["model"], "content": blocks, "stop_reason": stop, "stop_sequence": None,
                   "usage": {"input_tokens": 10 * len(body["messages"]), "output_tokens": 7 * len(blocks)}}
        if not stream:
            return json_response(message)

        def gen() -> Iterator[bytes]:
            start = dict(message, content=[], stop_reason=None, usage={"input_tokens": 10, "output_tokens": 1})
            yield _sse("message_start", {"type": "message_start", "message": start})
            yield _sse("ping", {"type": "ping"})
            for i, block in enumerate(blocks):
                time.sleep(delay)
                if block["type"] == "text":
                    yield _sse("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "text", "text": ""}})
                    for piece in words(block["text"]):
                        yield _sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                           "delta": {"type": "text_delta", "text": piece}})
                else:
                    yield _sse("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": dict(block, input={})})
                    args = json.dumps(block["input"])
                    for k in range(0, len(args), 12):
                        yield _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                            "type": "input_json_delta", "partial_json": args[k:k + 12]}})
                yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
            yield _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": message["usage"]["output_tokens"]}})
            yield _sse("message_stop", {"type": "message_stop"})

        return Response(status=200, body=gen(), content_type="text/event-stream; charset=utf-8",
                        headers=[("Cache-Control", "no-cache")], length=None)

    return handler


def routes(state: ModelState) -> list[Route]:
    return [route("POST", HOSTS, r"/v1/messages", messages(state), "generic")]
