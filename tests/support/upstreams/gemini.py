"""Fake Gemini API: ``generativelanguage.googleapis.com/v1beta/models/{m}:generateContent`` and
``:streamGenerateContent`` (SSE with ``?alt=sse``, else one JSON array of chunks).

Why: Gemini's parts (``text``, ``functionCall``, ``functionResponse``), its API key in
``x-goog-api-key`` or ``?key=``, and its two stream forms must be captured as the API sends them.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from .common import Request, Response, Route, error_response, json_response, route
from .modelscript import ModelState, words

HOSTS = frozenset({"generativelanguage.googleapis.com"})


def _results_shown(body: dict[str, Any]) -> int:
    n = 0
    for c in body.get("contents") or ():
        for p in (c.get("parts") or ()) if isinstance(c, dict) else ():
            if isinstance(p, dict) and ("functionResponse" in p or "function_response" in p):
                n += 1
    return n


def generate(state: ModelState):
    def handler(req: Request, m: re.Match[str]) -> Response:
        if not (req.header("x-goog-api-key") or req.query.get("key")):
            return error_response("google", 403, "Method doesn't allow unregistered callers.", "forbidden")
        model, method = m.group(1), m.group(2)
        body = req.json_object()
        turn_no, turn = state.turn_for(_results_shown(body))
        stream = method == "streamGenerateContent"
        state.note("gemini", turn_no, stream)
        delay = state.delay(req.headers)
        parts: list[dict[str, Any]] = []
        if turn.get("text"):
            parts.append({"text": turn["text"]})
        for call in turn.get("tool_calls") or ():
            parts.append({"functionCall": {"name": call["name"], "args": call["arguments"]}})
        meta = {"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
                "modelVersion": model, "responseId": uuid.uuid4().hex[:22]}
        if not stream:
            return json_response({"candidates": [{"content": {"role": "model", "parts": parts},
                                                  "finishReason": "STOP", "index": 0}], **meta}, flavor="google")
        chunks: list[dict[str, Any]] = []
        for piece in words(turn.get("text") or ""):
            chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
                           **meta})
        for part in parts:
            if "functionCall" in part:
                chunks.append({"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}], **meta})
        chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP",
                                       "index": 0}], **meta})
        sse = req.query.get("alt") == "sse"

        def gen() -> Iterator[bytes]:
            for n, chunk in enumerate(chunks):
                if n:
                    time.sleep(delay)
                text = json.dumps(chunk, separators=(",", ":"))
                if sse:
                    yield f"data: {text}\r\n\r\n".encode()
                else:
                    yield (b"[" if n == 0 else b",\r\n") + text.encode() + (b"]" if n == len(chunks) - 1 else b"")

        ctype = "text/event-stream" if sse else "application/json; charset=UTF-8"
        return Response(status=200, body=gen(), content_type=ctype, length=None)

    return handler


def routes(state: ModelState) -> list[Route]:
    return [route("POST", HOSTS, r"/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent)",
                  generate(state), "google")]
