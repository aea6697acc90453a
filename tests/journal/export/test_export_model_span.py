"""The GenAI reading of a model-call entry, per API (journal/export/model_span.py)."""

from __future__ import annotations

import pytest

from journal.export.model_span import model_call


def _entry(connector: str, url: str, req: dict, resp: dict, **request_extra) -> dict:
    return {"connector": connector, "request": {"url": url, "body": req, "prompt_capture": "refs", **request_extra},
            "response": {"status": 200, "body": resp}}


@pytest.mark.parametrize(("entry", "expected"), [
    (_entry("anthropic", "https://api.anthropic.com/v1/messages", {"model": "claude-x", "max_tokens": 9},
            {"id": "msg_1", "model": "claude-x-1", "stop_reason": "tool_use",
             "usage": {"input_tokens": 5, "output_tokens": 2}}),
     {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-x",
      "gen_ai.response.model": "claude-x-1", "gen_ai.response.id": "msg_1",
      "gen_ai.response.finish_reasons": ["tool_use"], "gen_ai.usage.input_tokens": 5,
      "gen_ai.usage.output_tokens": 2, "gen_ai.request.max_tokens": 9}),
    (_entry("gemini", "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent",
            {"contents": []}, {"responseId": "r1", "modelVersion": "gemini-2.5-pro-001",
                               "candidates": [{"finishReason": "STOP"}],
                               "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 1}}),
     {"gen_ai.operation.name": "generate_content", "gen_ai.provider.name": "gcp.gemini",
      "gen_ai.request.model": "gemini-2.5-pro", "gen_ai.response.model": "gemini-2.5-pro-001",
      "gen_ai.response.id": "r1", "gen_ai.response.finish_reasons": ["STOP"], "gen_ai.usage.input_tokens": 7,
      "gen_ai.usage.output_tokens": 1, "gen_ai.request.max_tokens": None}),
    (_entry("openai", "https://api.openai.com/v1/responses", {"model": "gpt-5"},
            {"id": "resp_1", "model": "gpt-5-2025", "status": "completed",
             "usage": {"input_tokens": 3, "output_tokens": 4}}),
     {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-5",
      "gen_ai.response.model": "gpt-5-2025", "gen_ai.response.id": "resp_1",
      "gen_ai.response.finish_reasons": ["completed"], "gen_ai.usage.input_tokens": 3,
      "gen_ai.usage.output_tokens": 4, "gen_ai.request.max_tokens": None}),
])
def test_each_api(entry, expected):
    call = model_call(entry)
    assert call is not None and call.attributes == expected


def test_realtime_model_from_the_url_and_hostile_bodies():
    ws = _entry("openai", "https://api.openai.com/v1/realtime?model=gpt-realtime", {"type": "x"}, {},
                websocket={"direction": "client_to_server"})
    call = model_call(ws)
    assert call is not None and call.request_model == "gpt-realtime"
    hostile = _entry("openai", "https://api.openai.com/v1/chat/completions", ["not", "a", "dict"],  # type: ignore[arg-type]
                     {"choices": "x", "usage": {"prompt_tokens": "many"}, "model": 5})
    call = model_call(hostile)
    assert call is not None and call.request_model is None and call.attributes["gen_ai.usage.input_tokens"] is None
    assert model_call({"connector": "gmail", "request": {"url": "https://x", "prompt_capture": "refs"}}) is None
