"""Credentials in MCP tool arguments and results, spelled as agents and MCP client configs write them
(review6): an `env` dict of prefixed names (`GITHUB_TOKEN`, `OPENAI_API_KEY`: an MCP client's server
config), headers dicts, URL userinfo. Through the real shim (stdio, the raw server, whose `echo`
tool answers with `arguments.text`): no credential may reach a vault file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from journal.redact import redact_body, redact_json_value
from tests.support.mcp_servers.harness import RawShim, assert_intact, entries

pytestmark = pytest.mark.e2e

# No catalogue prefix (ghp_, sk-, xoxb-): only the name says these are credentials.
TOKENS = {name: f"Qz{i}x" + "Wv8Tr6Yp4Ks2Mn0Bd7Lf5Hj3" for i, name in enumerate([
    "GITHUB_TOKEN", "OPENAI_API_KEY", "SLACK_BOT_TOKEN", "ANTHROPIC_API_KEY", "NPM_TOKEN", "HF_TOKEN",
    "STRIPE_SECRET_KEY", "DB_PASSWORD", "spring.datasource.password", "my-service-token",
])}
OTHER = "Pk9Lm8Nj7Hb6Gv5Fc4Dx3Sz2Aq1"


def _arguments() -> dict:
    return {
        "env": dict(TOKENS),
        "headers": {"Authorization": f"Bearer {OTHER}a", "X-Api-Key": f"{OTHER}b"},
        "url": f"https://deploy:{OTHER}c@git.example.com/repo.git",
        "text": json.dumps({"mcpServers": {"github": {"command": "npx", "env": dict(TOKENS)}}}),
    }


def _secrets() -> list[str]:
    return [*TOKENS.values(), f"{OTHER}a", f"{OTHER}b", f"{OTHER}c"]


@pytest.mark.parametrize("token", sorted(TOKENS))
def test_prefixed_credential_names_as_json_keys(token: str) -> None:
    """The one rule, both spellings: parsed (the shim's arguments) and bytes (a body through the proxy).
    Prefixed names leaked on main (all but DB_PASSWORD)."""
    value = TOKENS[token]
    assert value not in json.dumps(redact_json_value({"env": {token: value}}))
    assert value.encode() not in redact_body(json.dumps({"env": {token: value}}).encode(), "application/json")
    escaped = json.dumps({"env": {token.replace("_", "\\u005f"): value}}).replace("\\\\u005f", "\\u005f")
    assert value.encode() not in redact_body(escaped.encode(), "application/json")


def test_cursors_are_not_credentials() -> None:
    """Only separated words prefix a name: camelCase `nextPageToken` (a Google cursor) stays."""
    body = {"nextPageToken": "CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA0ZjM5ZmoSAggB",
            "syncToken": "CPDAlvWDx70CEPDAlvWDx70CGAU="}
    assert redact_json_value(body) == body
    assert redact_body(json.dumps(body).encode(), "application/json") == json.dumps(body).encode()


def test_credentials_in_tool_arguments_and_results_never_reach_the_vault(tmp_path: Path) -> None:
    """env dicts of prefixed names (on main every one but DB_PASSWORD was kept), in the arguments and in
    the JSON text the result echoes."""
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "echo", "arguments": _arguments()}})
        answer = shim.recv_json()
        assert TOKENS["GITHUB_TOKEN"] in answer["result"]["content"][0]["text"]  # the client got it all
        assert shim.close() == 0
    finally:
        shim.kill()
    (entry,) = entries(shim.vault)
    assert entry["request"]["body"]["name"] == "echo"
    written = b"".join(p.read_bytes() for p in shim.vault.rglob("*") if p.is_file())
    kept = [s for s in _secrets() if s.encode() in written]
    assert not kept, f"credentials kept in the vault: {kept}"
    assert_intact(shim.vault)


@pytest.mark.xfail(strict=True, reason="not read as credentials yet: a flag and its value as separate array "
                   "items (argv in a JSON array), camelCase prefixes (openaiApiKey), `curl -u user:pass`")
def test_credentials_only_their_context_names() -> None:
    value = "Hg5Jk6Lm7Nb8Vc9Xz0Aq1Sw2"
    for shape in ({"args": ["--token", value]}, {"openaiApiKey": value}, {"cmd": ["curl", "-u", f"u:{value}"]}):
        assert value not in json.dumps(redact_json_value(shape)), shape


def test_credentials_in_the_clients_answer_to_an_elicitation_never_reach_the_vault(tmp_path: Path) -> None:
    """The server asks the user (elicitation/create); the answer the client sends back holds credentials
    (a form that asked for an API key): its entry, and the tool result quoting it, keep none."""
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "elicit")
        ask = shim.recv_json()
        assert ask["method"] == "elicitation/create"
        shim.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {
            "OPENAI_API_KEY": TOKENS["OPENAI_API_KEY"], "password": f"{OTHER}a",
            "note": f"export GITHUB_TOKEN={TOKENS['GITHUB_TOKEN']}"}}})
        done = shim.recv_json()
        assert TOKENS["OPENAI_API_KEY"] in done["result"]["content"][0]["text"]
        assert shim.close() == 0
    finally:
        shim.kill()
    got = entries(shim.vault, asks=True)
    assert {e["request"]["method"] for e in got} == {"tools/call", "elicitation/create"}
    written = b"".join(p.read_bytes() for p in shim.vault.rglob("*") if p.is_file())
    kept = [s for s in (TOKENS["OPENAI_API_KEY"], f"{OTHER}a", TOKENS["GITHUB_TOKEN"]) if s.encode() in written]
    assert not kept, f"credentials kept in the vault: {kept}"
    assert_intact(shim.vault)


def test_an_escaped_credential_in_a_line_recorded_as_text(tmp_path: Path) -> None:
    """A request line the journal cannot hold exactly (an id beyond 2^53) is kept as its text: a
    credential behind a JSON escape (\\u0067hp_...) in it was kept too (fails on main)."""
    pat = "ghp_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.send(b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":{"name":"echo",'
                  b'"arguments":{"text":"\\u0067hp_' + pat[4:].encode() + b'"}}}\n')
        assert shim.recv_json()["result"]["content"][0]["text"] == pat
        assert shim.close() == 0
    finally:
        shim.kill()
    (entry,) = entries(shim.vault)
    assert "unparsed" in entry["mcp"]
    written = b"".join(p.read_bytes() for p in shim.vault.rglob("*") if p.is_file())
    assert pat[4:].encode() not in written
    assert_intact(shim.vault)
