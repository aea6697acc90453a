"""Model calls over WebSocket (OpenAI Realtime, the Responses WebSocket mode, Gemini Live): each message's
texts referenced, its tool calls in clear.

Why a rule of its own: these APIs send events, not one request and one response, and an event's text
can sit under many keys (`text`, `delta`, `transcript`, `instructions`, a Gemini part's `text`,
audio as base64 `audio` or `inlineData.data`). Every string under such a key becomes a reference
(`journal.models.refs`), as for every model call; what a tool call holds (`name`, `call_id`,
`arguments`, Gemini's `functionCall`) stays in clear: it is the instruction. Order as for every body:
the message is redacted first, then referenced, then large strings left are spilled.
"""

from __future__ import annotations

from msgspec.structs import replace

from journal.bodies import parse_json_strict
from journal.call import Call, Prepared, WebSocketPayload
from journal.models import APIS
from journal.models.refs import Referencer
from journal.redact import redact_body, redact_json_value

TEXT_KEYS = frozenset({
    "text", "delta", "transcript", "instructions", "audio", "data", "input", "content", "output", "prompt",
    "refusal", "system_instruction", "systemInstruction",
})
"""Keys whose string value is prompt or answer text (or audio) in these APIs' events."""
_IN_CLEAR_TYPES = ("function_call", "functionCall")
_ARGUMENT_EVENTS = ("function_call_arguments.delta", "function_call_arguments.done")


def reference_event(value: object, r: Referencer) -> object:
    """An event with every text referenced and tool calls left in clear (see the module docstring)."""
    if isinstance(value, list):
        return [reference_event(v, r) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if isinstance(kind, str) and (kind in _IN_CLEAR_TYPES or kind.endswith(_ARGUMENT_EVENTS)):
        return value  # a tool call (or its arguments as they stream): the instruction, in clear
    out: dict = {}
    for key, v in value.items():
        if key in _IN_CLEAR_TYPES:
            out[key] = v
        elif isinstance(v, str) and key in TEXT_KEYS:
            out[key] = r.text(v)
        else:
            out[key] = reference_event(v, r)
    return out


def _payload(recorder, payload: WebSocketPayload | None, r: Referencer) -> Prepared | None:
    if payload is None or not payload.data:
        return None
    if payload.text:
        ok, value = parse_json_strict(payload.data)
        if ok:
            return Prepared(recorder.json_value(reference_event(redact_json_value(value), r)))
    ctype = "application/json" if payload.text else "application/octet-stream"
    return Prepared(r.raw(redact_body(payload.data, ctype)))


def message_material(recorder, call: Call, *, request: bool) -> Call:
    """A model WebSocket message's call with its payload referenced; the request half also carries
    `prompt_capture`, `model_api` and the effect `read` (a model call reads)."""
    assert call.prompts and call.model_api
    r = Referencer(call.prompts, recorder.blobs)
    if request:
        body = call.request.body
        prepared = _payload(recorder, body if isinstance(body, WebSocketPayload) else None, r)
        extra = {"prompt_capture": call.prompts, "model_api": APIS[call.model_api].NAME}
        value = prepared.value if prepared is not None else None
        return replace(call, effect="read", effect_basis="rule",
                       request=replace(call.request, body=Prepared(value, extra)))
    resp = call.response
    if resp is None or not isinstance(resp.body, WebSocketPayload):
        return call
    return replace(call, response=replace(resp, body=_payload(recorder, resp.body, r)))


def is_message(call: Call) -> bool:
    return isinstance((call.request.extra or {}).get("websocket"), dict)
