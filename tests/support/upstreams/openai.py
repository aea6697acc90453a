"""Fake OpenAI API: ``POST api.openai.com/v1/chat/completions`` and ``/v1/responses``, JSON or SSE.

Why: Chat Completions streams tool calls as argument fragments by index and ends with ``[DONE]``;
the Responses API streams typed events ending with ``response.completed``. Prompt capture must
assemble both as the API sends them.
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

HOSTS = frozenset({"api.openai.com", "localhost"})  # localhost: like a local vLLM / Ollama / LiteLLM


def _unauthorised() -> Response:
    return json_response({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                    "param": None, "code": "invalid_api_key"}}, 401)


def _sse_data(data: Any) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _calls(turn_no: int, turn: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f"call_{turn_no:02d}{i:02d}fake", c["name"], json.dumps(c["arguments"]))
            for i, c in enumerate(turn.get("tool_calls") or ())]


def chat(state: ModelState):
    def handler(req: Request, _m: re.Match[str]) -> Response:
        if not req.bearer():
            return _unauthorised()
        body = req.json_object()
        if not isinstance(body.get("messages"), list):
            raise HttpError(400, "messages is required")
        shown = sum(1 for m in body["messages"] if isinstance(m, dict) and m.get("role") == "tool")
        turn_no, turn = state.turn_for(shown)
        stream = bool(body.get("stream"))
        state.note("openai.chat", turn_no, stream)
        delay = state.delay(req.headers)
        calls = _calls(turn_no, turn)
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:20]}", "created": int(time.time()), "model": body.get("model")}
        finish = "tool_calls" if calls else "stop"
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": turn.get("text"), "refusal": None}
            if calls:
                message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                         for i, n, a in calls]
            return json_response({**base, "object": "chat.completion", "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            return _sse_data({**base, "object": "chat.completion.chunk",
                              "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})

        def gen() -> Iterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            for piece in words(turn.get("text") or ""):
                time.sleep(delay)
                yield chunk({"content": piece})
            for k, (cid, name, args) in enumerate(calls):
                time.sleep(delay)
                yield chunk({"tool_calls": [{"index": k, "id": cid, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]})
                for j in range(0, len(args), 10):
                    yield chunk({"tool_calls": [{"index": k, "function": {"arguments": args[j:j + 10]}}]})
            yield chunk({}, finish)
            yield b"data: [DONE]\n\n"

        return Response(status=200, body=gen(), content_type="text/event-stream; charset=utf-8", length=None)

    return handler


def _output(turn_no: int, turn: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if turn.get("text"):
        out.append({"type": "message", "id": f"msg_{turn_no:02d}fake", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": turn["text"], "annotations": []}]})
    for cid, name, args in _calls(turn_no, turn):
        out.append({"type": "function_call", "id": f"fc_{cid[5:]}", "call_id": cid, "name": name,
                    "arguments": args, "status": "completed"})
    return out


def responses(state: ModelState):
    def handler(req: Request, _m: re.Match[str]) -> Response:
        if not req.bearer():
            return _unauthorised()
        body = req.json_object()
        items = body.get("input")
        shown = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output") if isinstance(
            items, list) else 0
        turn_no, turn = state.turn_for(shown)
        stream = bool(body.get("stream"))
        state.note("openai.responses", turn_no, stream)
        delay = state.delay(req.headers)
        output = _output(turn_no, turn)
        resp = {"id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": body.get("model"), "output": output,
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}
        if not stream:
            return json_response(resp)
        seq = iter(range(1 << 30))

        def ev(kind: str, **data: Any) -> bytes:
            payload = {"type": kind, "sequence_number": next(seq), **data}
            return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

        def gen() -> Iterator[bytes]:
            yield ev("response.created", response=dict(resp, status="in_progress", output=[]))
            for n, item in enumerate(output):
                time.sleep(delay)
                if item["type"] == "message":
                    yield ev("response.output_item.added", output_index=n, item=dict(item, content=[],
                                                                                     status="in_progress"))
                    text = item["content"][0]["text"]
                    yield ev("response.content_part.added", item_id=item["id"], output_index=n, content_index=0,
                             part={"type": "output_text", "text": "", "annotations": []})
                    for piece in words(text):
                        yield ev("response.output_text.delta", item_id=item["id"], output_index=n, content_index=0,
                                 delta=piece)
                    yield ev("response.output_text.done", item_id=item["id"], output_index=n, content_index=0,
                             text=text)
                    yield ev("response.content_part.done", item_id=item["id"], output_index=n, content_index=0,
                             part=item["content"][0])
                else:
                    yield ev("response.output_item.added", output_index=n, item=dict(item, arguments="",
                                                                                     status="in_progress"))
                    args = item["arguments"]
                    for j in range(0, len(args), 10):
                        yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=n,
                                 delta=args[j:j + 10])
                    yield ev("response.function_call_arguments.done", item_id=item["id"], output_index=n,
                             arguments=args)
                yield ev("response.output_item.done", output_index=n, item=item)
            yield ev("response.completed", response=resp)

        return Response(status=200, body=gen(), content_type="text/event-stream; charset=utf-8", length=None)

    return handler


def routes(state: ModelState) -> list[Route]:
    return [
        route("POST", HOSTS, r"/v1/chat/completions", chat(state), "generic"),
        route("POST", HOSTS, r"/v1/responses", responses(state), "generic"),
    ]
