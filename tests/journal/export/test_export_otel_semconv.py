"""The OTel export against the published semantic conventions: every attribute name we emit is in the
registry (the `opentelemetry-semantic-conventions` package, stable and incubating, not deprecated) or is
ours under `broker.`; MCP calls are MCP client spans, model calls GenAI client spans; every spilled
blob is referenced from its span."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import opentelemetry.semconv._incubating.attributes as incubating
import opentelemetry.semconv.attributes as stable
import pytest

from journal.export.otel import build_otlp
from tests.journal.export.test_export_otel import read_back, value
from tests.support.export_factories import (
    ALL_KINDS,
    KINDS_MCP_HTTP,
    KINDS_MODEL,
    KINDS_STDIO,
    KINDS_WS,
    MCP_SESSION_ID,
)

ALL = ALL_KINDS
CLIENT, INTERNAL = 3, 1


MOVED = "Moved to the [OpenTelemetry GenAI semantic conventions repository]"
"""How the package marks the GenAI and MCP names that moved to their own conventions repository (where
they are current, status Development): moved, not replaced, so they count as current here."""


def registry() -> tuple[set[str], set[str]]:
    """(names, deprecated names) of every attribute constant the package publishes. A constant's
    deprecation is the docstring after it ("Deprecated: ..."), so the modules are read as source; a
    name that only moved to the GenAI conventions repository (`MOVED`) is not deprecated."""
    names: set[str] = set()
    current: set[str] = set()  # defined somewhere without a deprecation (the incubating module repeats
    # each stable name, marked "Deprecated in favor of stable ...": the stable one is current)
    for package in (stable, incubating):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            tree = ast.parse(Path(module.__file__ or "").read_text())
            body = tree.body
            for i, node in enumerate(body):
                target = node.target if isinstance(node, ast.AnnAssign) else (
                    node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
                if not isinstance(target, ast.Name) or not target.id.isupper():
                    continue
                value_node = node.value
                if not (isinstance(value_node, ast.Constant) and isinstance(value_node.value, str)):
                    continue
                names.add(value_node.value)
                doc = body[i + 1] if i + 1 < len(body) else None
                text = str(doc.value.value).strip() if isinstance(doc, ast.Expr) and isinstance(
                    doc.value, ast.Constant) else ""
                if not text.startswith("Deprecated") or text.startswith(f"Deprecated: {MOVED}"):
                    current.add(value_node.value)
    return names, names - current


def spans_of(vault, session, content=False):
    return read_back(build_otlp(vault, session, content=content)).resource_spans[0].scope_spans[0].spans


def test_registry_is_the_published_one():
    names, deprecated = registry()
    for name in ("mcp.method.name", "mcp.session.id", "mcp.protocol.version", "jsonrpc.request.id",
                 "gen_ai.tool.name", "gen_ai.operation.name", "http.request.method", "error.type"):
        assert name in names and name not in deprecated
    assert "gen_ai.system" in deprecated  # the reading of deprecations works


@pytest.mark.parametrize("content", [False, True])
def test_every_attribute_is_in_the_registry_or_ours(vault, content):
    names, deprecated = registry()
    emitted: set[str] = set()
    for session in ALL:
        otlp = build_otlp(vault, session, content=content)
        for rs in otlp["resourceSpans"]:
            emitted |= {a["key"] for a in rs["resource"]["attributes"]}
            for span in rs["scopeSpans"][0]["spans"]:
                emitted |= {a["key"] for a in span["attributes"]}
                emitted |= {a["key"] for link in span.get("links", []) for a in link["attributes"]}
    ours = {n for n in emitted if n.startswith("broker.")}
    assert ours and all(n.split(".")[1] for n in ours)
    unknown = sorted(emitted - ours - names)
    assert unknown == [], f"not in the semantic-conventions registry and not under broker.: {unknown}"
    assert sorted((emitted - ours) & deprecated) == []
    assert {n for n in ours if n.split(".", 1)[1] in names} == set()  # never a registry name under our prefix


def test_mcp_calls_are_mcp_client_spans(vault):
    _, ok, tool_error, jsonrpc_error, unanswered, read = spans_of(vault, KINDS_STDIO)
    assert ok.name == "tools/call search_notes" and ok.kind == CLIENT
    assert value(ok, "mcp.method.name") == "tools/call" and value(ok, "gen_ai.tool.name") == "search_notes"
    assert value(ok, "gen_ai.operation.name") == "execute_tool" and value(ok, "jsonrpc.request.id") == "1"
    assert value(ok, "network.transport") == "pipe" and value(ok, "mcp.session.id") is None
    assert value(tool_error, "error.type") == "tool_error" and tool_error.status.code == 2
    assert value(jsonrpc_error, "error.type") == "-32602"
    assert value(jsonrpc_error, "rpc.response.status_code") == "-32602"
    assert jsonrpc_error.status.message == "Unknown tool"
    assert value(unanswered, "error.type") == "no_response" and unanswered.status.message == "the server exited"
    assert read.name == "resources/read" and value(read, "mcp.resource.uri") == "note://n1"
    assert value(read, "gen_ai.operation.name") is None
    _, prompt = spans_of(vault, KINDS_MCP_HTTP)
    assert prompt.name == "prompts/get get_prompt_text" and prompt.kind == CLIENT
    assert value(prompt, "gen_ai.prompt.name") == "get_prompt_text"
    assert value(prompt, "mcp.protocol.version") == "2025-11-25"
    # the recorder keeps Mcp-Session-Id as a keyed fingerprint (a session id is a capability): that is the span's
    session_id = str(value(prompt, "mcp.session.id"))
    assert session_id.startswith("fp:") and MCP_SESSION_ID not in session_id
    assert value(prompt, "network.transport") == "tcp" and value(prompt, "server.port") == "9"
    assert value(prompt, "jsonrpc.request.id") == "p1"


def test_mcp_session_id_when_the_entry_holds_it_in_clear():
    from journal.export.otel import mcp_session_id

    entry = {"request": {"headers": [["Mcp-Session-Id", MCP_SESSION_ID]]}}
    assert mcp_session_id(entry) == MCP_SESSION_ID
    assert mcp_session_id({"request": {"headers": [["Mcp-Session-Id", "[never captured]"]]}}) is None


def test_protocol_version_from_the_2026_meta(tmp_path):
    from journal.call import Call
    from journal.record import JsonValue, Recorder

    rec = Recorder(tmp_path)
    params = {"name": "t", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    rec.record(Call.make(session="s", agent="a", principal="p", connector="notes", capture="gateway", effect="read",
                         method="tools/call", url="stdio:srv", request_body=JsonValue(params), status=200,
                         response_body=JsonValue({"jsonrpc": "2.0", "id": 1, "result": {}}),
                         mcp={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
    rec.close()
    _, span = spans_of(tmp_path, "s")
    assert value(span, "mcp.protocol.version") == "2026-07-28"


def test_model_calls_are_genai_client_spans(vault):
    _, call = spans_of(vault, KINDS_MODEL)
    assert call.name == "chat gpt-4o" and call.kind == CLIENT
    assert value(call, "gen_ai.operation.name") == "chat" and value(call, "gen_ai.provider.name") == "openai"
    assert value(call, "gen_ai.request.model") == "gpt-4o"
    assert value(call, "gen_ai.response.model") == "gpt-4o-2024-08-06"
    assert value(call, "gen_ai.response.id") == "chatcmpl-1"
    assert value(call, "gen_ai.usage.input_tokens") == "12" and value(call, "gen_ai.usage.output_tokens") == "3"
    assert value(call, "gen_ai.request.max_tokens") == "50"
    reasons = value(call, "gen_ai.response.finish_reasons")
    assert [next(iter(v.values())) for v in reasons["values"]] == ["tool_calls"]
    assert value(call, "server.address") == "api.openai.com"


def test_every_spilled_blob_is_referenced(vault):
    from journal.blobstore import is_ref_object
    from journal.export.fixture import read_entries
    from journal.export.recorded_body import spilled_refs
    from journal.vault import Vault

    checked = 0
    for session in ALL:
        entries, _ = read_entries(Vault.open_existing(vault), session)
        spans = spans_of(vault, session)[1:]
        for entry, span in zip(entries, spans, strict=True):
            for part in ("request", "response"):
                body = entry[part]["body"]
                refs = [r["ref"] for _, r in spilled_refs(body)]
                if is_ref_object(body):
                    assert value(span, f"broker.{part}.body.ref") == body["ref"]
                elif refs:
                    got = value(span, f"broker.{part}.body.blob_refs")
                    assert [next(iter(v.values())) for v in got["values"]] == refs
                    pointers = value(span, f"broker.{part}.body.blob_pointers")
                    assert [next(iter(v.values())) for v in pointers["values"]] == [p for p, _ in spilled_refs(body)]
                checked += len(refs)
    assert checked >= 4  # a JSON string spilled (attachment), a whole body, an MCP argument, a model text


def test_websocket_messages_are_spans_under_their_handshake(vault):
    _, shake, sent, received, binary = spans_of(vault, KINDS_WS)
    assert shake.name == "GET" and value(shake, "http.response.status_code") == "101"
    assert sent.name == "websocket send" and received.name == "websocket receive" and sent.kind == INTERNAL
    assert value(sent, "broker.websocket.handshake") == value(shake, "broker.entry.hash")
    assert value(binary, "broker.websocket.kind") == "binary"
    assert value(sent, "broker.entry.prev") == value(shake, "broker.entry.hash")


def test_http_method_outside_the_known_set_is_other(tmp_path):
    from journal.call import Call
    from journal.record import Recorder

    rec = Recorder(tmp_path)
    rec.record(Call.make(session="s", agent="a", principal="p", connector="other", method="PROPFIND",
                         url="https://dav.example.com/x", status=207))
    rec.close()
    _, span = spans_of(tmp_path, "s")
    assert value(span, "http.request.method") == "_OTHER" and value(span, "http.request.method_original") == "PROPFIND"
    assert span.name == "HTTP"
