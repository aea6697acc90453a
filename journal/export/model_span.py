"""What a model-call entry (docs/contract.md section 6) says in GenAI semantic-convention terms.

The OpenTelemetry export writes a model call as a GenAI client span (`{gen_ai.operation.name}
{gen_ai.request.model}`, kind CLIENT) and the OCSF export fills its `ai_model` from the same reading,
so both take it from here. Only what the recorded bodies hold in clear is read: the model, ids, finish
reasons and token counts (texts are references under prompt capture, and stay so).
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import parse_qsl, urlsplit

from journal.models.linking import model_api_of

PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "gemini": "gcp.gemini"}
"""Our model API name -> `gen_ai.provider.name` (the registry's well-known values)."""
_GEMINI_MODEL = re.compile(r"/models/([^/:]+)")


class ModelCall(NamedTuple):
    api: str
    provider: str
    operation: str
    request_model: str | None
    attributes: dict


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _finish_reasons(api: str, body: dict) -> list[str]:
    if api == "anthropic":
        reason = _str(body.get("stop_reason"))
        return [reason] if reason else []
    if api == "gemini":
        candidates = body.get("candidates")
        return [r for c in candidates if (r := _str(_dict(c).get("finishReason")))] if isinstance(candidates, list) \
            else []
    choices = body.get("choices")
    if isinstance(choices, list):
        return [r for c in choices if (r := _str(_dict(c).get("finish_reason")))]
    status = _str(body.get("status"))  # the Responses API
    return [status] if status else []


def _usage(api: str, body: dict) -> tuple[int | None, int | None]:
    if api == "gemini":
        meta = _dict(body.get("usageMetadata"))
        return _int(meta.get("promptTokenCount")), _int(meta.get("candidatesTokenCount"))
    usage = _dict(body.get("usage"))
    if "prompt_tokens" in usage:
        return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    return _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))


def model_call(entry: dict) -> ModelCall | None:
    """The GenAI reading of a model-call entry, or None when the entry is no model call."""
    api = model_api_of(entry)
    request = entry.get("request") or {}
    if api is None or "prompt_capture" not in request:
        return None
    req_body, resp_body = _dict(request.get("body")), _dict((entry.get("response") or {}).get("body"))
    url = str(request.get("url") or "")
    if api == "gemini":
        found = _GEMINI_MODEL.search(urlsplit(url).path)
        model = found.group(1) if found else None
        response_model, response_id = _str(resp_body.get("modelVersion")), _str(resp_body.get("responseId"))
        operation = "generate_content"
    else:
        model = _str(req_body.get("model"))
        response_model, response_id = _str(resp_body.get("model")), _str(resp_body.get("id"))
        operation = "chat"
    if model is None and isinstance(request.get("websocket"), dict):  # Realtime: the model is in the URL
        model = next((v for k, v in _query(url) if k == "model"), None)
    input_tokens, output_tokens = _usage(api, resp_body)
    attributes = {
        "gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDERS[api],
        "gen_ai.request.model": model, "gen_ai.response.model": response_model, "gen_ai.response.id": response_id,
        "gen_ai.response.finish_reasons": _finish_reasons(api, resp_body) or None,
        "gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.request.max_tokens": _int(req_body.get("max_tokens")),
    }
    return ModelCall(api, PROVIDERS[api], operation, model, attributes)


def _query(url: str) -> list[tuple[str, str]]:
    try:
        return parse_qsl(urlsplit(url).query)
    except ValueError:
        return []
