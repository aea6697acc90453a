"""Model calls (prompt capture): recognise the model APIs, reference their texts, read their tool calls.

One module per API (`anthropic`, `openai` for Chat Completions and Responses, `gemini`), each with
`match(host, path)`, `reference_request` / `reference_response` (texts to references, tool calls in
clear), `assemble_stream` (a streamed response as the non-streamed one), `tool_calls`,
`tool_results` and `tools` (read back from a recorded entry). `capture` builds model entries'
bodies, `linking` ties connector calls to the model call that asked for them (`prompt_ref`),
`refs` makes the references. docs/prompts.md describes the rules.
"""

from __future__ import annotations

from types import ModuleType

from journal.connectors import Registry
from journal.connectors._http import normalise_host, normalise_path
from journal.models import anthropic, gemini, openai

APIS: dict[str, ModuleType] = {m.NAME: m for m in (anthropic, openai, gemini)}
MODES = ("off", "refs", "full")


def api_module(name: str) -> ModuleType:
    return APIS[name]


def _is_model_path(api: str, path: str) -> bool:
    if api == "openai":
        return openai.is_model_path(path)
    if api == "gemini":
        return gemini.is_model_path(path)
    return path.rstrip("/").endswith("/messages")


def route_call(registry: Registry, connector: str | None, host: str, path: str) -> tuple[str | None, str | None]:
    """How a capture point treats a call: (connector, model API).

    `connector` is what `registry.match` said. A built-in model API host and path, or a path that is
    a model call on a connector the connectors file marks with `model_api`, gives (name, api). A
    connector with `model_api` on another path (a model list, say) is an ordinary call:
    (connector, None). Anything else is returned unchanged with api None.
    """
    if connector is not None:
        api = registry.model_api(connector)
        if api is None:
            return connector, None
        return connector, api if _is_model_path(api, normalise_path(path)) else None
    h = normalise_host(host)
    if h in anthropic.HOSTS or h in openai.HOSTS or h in gemini.HOSTS:
        p = normalise_path(path)
        for module in (anthropic, openai, gemini):
            if module.match(h, p):
                return module.NAME, module.NAME
    return None, None


__all__ = ["APIS", "MODES", "api_module", "route_call"]
