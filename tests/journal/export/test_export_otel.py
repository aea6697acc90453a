"""OpenTelemetry export: OTLP/JSON read back with the opentelemetry-proto definitions."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from broker.cli import cli
from journal.call import Call
from journal.export.otel import build_otlp, otlp_protobuf, parse_traceparent
from journal.record import Recorder
from tests.support.export_factories import BIG, MCP_TRACEPARENT, SECRET, SESSION, TRACEPARENT, record_export_session


def read_back(otlp_json: dict) -> ExportTraceServiceRequest:
    """OTLP/JSON -> protobuf as the OTLP spec defines it: ids are hex in JSON, bytes in protobuf."""
    def fix(v):
        if isinstance(v, dict):
            return {k: base64.b64encode(bytes.fromhex(x)).decode() if k in ("traceId", "spanId", "parentSpanId")
                    else fix(x) for k, x in v.items()}
        return [fix(x) for x in v] if isinstance(v, list) else v
    return json_format.Parse(json.dumps(fix(otlp_json)), ExportTraceServiceRequest())


def attrs(span) -> dict:
    return {a.key: json_format.MessageToDict(a.value) for a in span.attributes}


def value(span, key):
    v = attrs(span).get(key)
    return None if v is None else next(iter(v.values()))


@pytest.fixture
def vault(tmp_path):
    record_export_session(tmp_path)
    return tmp_path


def test_otlp_json_reads_back_with_the_proto_definitions(vault, tmp_path):
    out = tmp_path / "spans.json"
    assert cli.main(["export", SESSION, "--vault", str(vault), "--format", "otel", "--out", str(out)],
                    standalone_mode=False) == 0
    req = read_back(json.loads(out.read_bytes()))
    assert otlp_protobuf(json.loads(out.read_bytes())) == req.SerializeToString()
    (rs,) = req.resource_spans
    assert value(rs.resource, "service.name") == "connector-broker"
    spans = rs.scope_spans[0].spans
    root, *entries = spans
    assert root.name == f"session {SESSION}" and len(entries) == 8
    assert len({s.trace_id for s in spans}) == 1 and len(root.trace_id) == 16  # the session is one trace
    assert all(s.parent_span_id == root.span_id for s in entries)
    get = entries[0]
    assert get.name == "GET" and get.kind == Span.SPAN_KIND_CLIENT
    assert value(get, "http.request.method") == "GET" and value(get, "http.response.status_code") == "200"
    assert value(get, "url.full").endswith("access_token=[never%20captured]")
    assert value(get, "server.address") == "gmail.googleapis.com" and value(get, "server.port") == "443"
    assert value(get, "broker.entry.seq") == "1" and get.span_id.hex() == value(get, "broker.entry.hash")[:16]
    assert value(get, "gen_ai.conversation.id") == SESSION
    unanswered = entries[5]
    assert value(unanswered, "error.type") == "no_response" and unanswered.status.code == 2
    assert unanswered.status.message == "upstream timed out"
    stdio, http_mcp = entries[6], entries[7]
    for tool in (stdio, http_mcp):  # MCP client spans (the MCP conventions), with the execute_tool attributes
        assert tool.name == "tools/call search_notes" and tool.kind == Span.SPAN_KIND_CLIENT
        assert value(tool, "gen_ai.operation.name") == "execute_tool"
        assert value(tool, "mcp.method.name") == "tools/call" and value(tool, "jsonrpc.request.id") == "7"
    assert value(stdio, "network.transport") == "pipe" and value(http_mcp, "network.transport") == "tcp"


def test_content_is_off_by_default_and_referenced(vault):
    otlp = build_otlp(vault, SESSION)
    text = json.dumps(otlp)
    assert SECRET not in text and BIG not in text and "found" not in text and "removeLabelIds" not in text
    spans = read_back(otlp).resource_spans[0].scope_spans[0].spans
    whole = spans[5]  # seq 5: a body spilled whole
    assert value(whole, "broker.response.body.ref").startswith("blobs/sha256/")
    assert len(value(whole, "broker.response.body.sha256")) == 64
    assert "gen_ai.tool.call.arguments" not in attrs(spans[7])
    with_content = read_back(build_otlp(vault, SESSION, content=True)).resource_spans[0].scope_spans[0].spans
    assert json.loads(value(with_content[7], "gen_ai.tool.call.arguments")) == {"q": "x"}
    assert "found" in value(with_content[7], "gen_ai.tool.call.result")
    assert json.loads(value(with_content[2], "broker.request.body")) == {"removeLabelIds": ["UNREAD"]}


def test_two_agent_traces_are_linked(vault):
    spans = read_back(build_otlp(vault, SESSION)).resource_spans[0].scope_spans[0].spans
    http_ctx, mcp_ctx = parse_traceparent(TRACEPARENT), parse_traceparent(MCP_TRACEPARENT)
    (link,) = spans[1].links
    assert (link.trace_id.hex(), link.span_id.hex()) == http_ctx[:2]
    assert value(link, "broker.trace_context.source") == "http.header"
    (link,) = spans[7].links
    assert (link.trace_id.hex(), link.span_id.hex()) == mcp_ctx[:2]
    assert value(link, "broker.trace_context.source") == "mcp.params._meta"


def test_one_agent_trace_is_joined(tmp_path):
    rec = Recorder(tmp_path)
    for i, tp in enumerate([TRACEPARENT, None]):
        rec.record(Call.make(
            session="joined", agent="a", principal="p", connector="gmail", capture="broker", effect="read",
            method="GET", url=f"https://gmail.googleapis.com/gmail/v1/users/me/messages/m{i}",
            request_headers=[("traceparent", tp)] if tp else [], request_body=None, status=200,
            response_headers=[], response_body=None,
        ))
    rec.close()
    root, traced, untraced = read_back(build_otlp(tmp_path, "joined")).resource_spans[0].scope_spans[0].spans
    agent_trace, agent_span, _ = parse_traceparent(TRACEPARENT)
    assert {root.trace_id.hex(), traced.trace_id.hex(), untraced.trace_id.hex()} == {agent_trace}
    assert traced.parent_span_id.hex() == agent_span and not traced.links
    assert untraced.parent_span_id == root.span_id


@pytest.mark.parametrize("bad", ["", "00-xyz", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                 "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                                 "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"])
def test_invalid_traceparent_is_ignored(bad):
    assert parse_traceparent(bad) is None
