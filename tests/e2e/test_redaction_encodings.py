"""Secrets written in the encodings the redaction rules read only in their plainest spelling until branch
redact30, sent through the real capture points: `broker run` (an httpx client through the proxy) and the
MCP shim (`broker mcp` on stdio, the MCP SDK client). A line assignment inside a JSON string after a break
written `\\u000a` (blanks, '=' and quotes escaped too), one after a URL-encoded break in a form or in a URL
held by a JSON or text body, and a credential string in JSON held by a JSON string held by a JSON string.
Every file the run wrote and everything it printed is scanned for each secret (raw, URL-encoded,
JSON-escaped, base64 at three alignments): the classes whose secret is found are the failure."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from journal.fingerprint_key import KEY_FILE_ENV
from tests.support.broker_harness import BrokerProcess
from tests.support.mcp_servers.harness import NOTES_SERVER, REPO, WAIT, assert_intact, entries, shim_argv
from tests.support.secret_samples import written_forms
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
DRIVE = "https://www.googleapis.com/drive/v3"
SLACK = "https://slack.com/api"

# class -> (secret, the text that carries it: a JSON document, or a URL-encoded form / URL)
JSON_ESCAPES = {
    "line after \\u000a": ("Hunter2JsonBreakA1", '{"note": "cfg\\u000apassword: Hunter2JsonBreakA1"}'),
    "line after \\u000d\\u000a, \\u0009 blanks": (
        "Hunter2JsonBreakB2", '{"note": "cfg\\u000d\\u000a\\u0009export\\u0009API_KEY\\u003dHunter2JsonBreakB2"}'),
    "quoted value \\\"": ("Hunter2JsonQuoteC3", '{"note": "db:\\n  password: \\"Hunter2JsonQuoteC3\\""}'),
    "JSON in JSON in a JSON string": (
        "Hunter2NestedD4", json.dumps({"a": json.dumps({"b": json.dumps({"password": "Hunter2NestedD4"})})})),
}
# Found as the attacker on the same branch: a credential named by a name/value pair's name, a YAML list item.
PAIRS_AND_ITEMS = {
    "name/value pair (Kubernetes env)": (
        "Hunter2PairH8", '{"env": [{"name": "DB_PASSWORD", "value": "Hunter2PairH8"}, {"name": "A", "value": "b"}]}'),
    "YAML list item": ("Hunter2ItemI9", '{"compose": "environment:\\n  - API_KEY=Hunter2ItemI9\\n"}'),
}
URL_ESCAPES = {
    "form: %0A then '=' as written": ("Hunter2FormRawE5", "x=cfg%0Apassword=Hunter2FormRawE5&y=1"),
    "URL in JSON: %0a line": ("Hunter2UrlJsonF6",
                              '{"link": "https://h.test/a?x=cfg%0apassword%3DHunter2UrlJsonF6&y=1"}'),
    "form sent as text: %0D%0A line": ("Hunter2FormTextG7", "x=cfg%0D%0A%09API_KEY%3AHunter2FormTextG7"),
}


# A request URL whose parameter holds a URL naming a token (a redirect): recorded by the proxy as a URL.
NESTED = {"redirect URL in a query parameter": ("Hunter2NextJ10", "")}
NESTED_QUERY = "next=https%3A%2F%2Fapp.test%2Fcb%3Faccess_token%3DHunter2NextJ10&pageSize=5"


PARSED = {"name/value pair in parsed MCP arguments": ("Hunter2ParsedK11", "")}
PARSED_PAIR = {"name": "GITHUB_TOKEN", "value": "Hunter2ParsedK11"}


def _leaks(haystack: bytes, classes: dict[str, tuple[str, str]]) -> list[str]:
    return [name for name, (secret, _t) in classes.items() if any(f in haystack for f in written_forms(secret))]


def test_broker_run_records_no_secret_written_with_json_or_url_escapes(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "fingerprint.key"))
    with Upstream() as up, BrokerProcess(tmp_path, up) as b:
        ctx = ssl.create_default_context(cafile=b.ca)
        with httpx.Client(proxy=b.proxy_url("s30", "enc"), verify=ctx, timeout=60) as c:
            for _secret, text in (*JSON_ESCAPES.values(), *PAIRS_AND_ITEMS.values()):
                c.post(f"{DRIVE}/files", content=text.encode(), headers={"Content-Type": "application/json"})
            c.get(f"{DRIVE}/files?{NESTED_QUERY}")
            form, link, text_form = (t for _s, t in URL_ESCAPES.values())
            c.post(f"{SLACK}/chat.postMessage", content=form.encode(),
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
            c.post(f"{DRIVE}/files", content=link.encode(), headers={"Content-Type": "application/json"})
            c.post(f"{DRIVE}/files", content=text_form.encode(), headers={"Content-Type": "text/plain"})
        count = len(JSON_ESCAPES) + len(PAIRS_AND_ITEMS) + len(URL_ESCAPES) + 1
        got = b.entries("s30", count=count)
        assert len(got) == count
        output = bytes(b.output)
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join([*files, output])
    assert _leaks(haystack, {**JSON_ESCAPES, **PAIRS_AND_ITEMS, **URL_ESCAPES, **NESTED}) == []
    assert haystack.count(b"[never captured]") + haystack.count(b"[never%20captured]") >= count


def test_shim_records_no_secret_written_with_json_or_url_escapes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """In MCP the arguments and results are parsed JSON: a JSON document or a URL held by one of their
    strings is where these spellings reach the rules as written."""
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "fingerprint.key"))
    vault = tmp_path / "vault"
    argv = shim_argv(vault)
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *NOTES_SERVER], cwd=str(REPO))
    texts = [t for _s, t in (*JSON_ESCAPES.values(), *PAIRS_AND_ITEMS.values(), *URL_ESCAPES.values())]

    async def scenario() -> None:
        with (tmp_path / "shim.log").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=WAIT) as c:
                for i, text in enumerate(texts):
                    assert (await c.call_tool("add_note", {"note_id": f"e{i}", "text": text})).content[0].text == "ok"
                    assert (await c.call_tool("get_note", {"note_id": f"e{i}"})).content[0].text == text
                # a name/value pair as parsed arguments (the server may ignore or refuse the extra one)
                await c.call_tool("add_note", {"note_id": "pair", "text": "t", "env": [PARSED_PAIR]})

    asyncio.run(scenario())
    assert_intact(vault)
    assert len(entries(vault)) == 2 * len(texts) + 1
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join(files)
    assert _leaks(haystack, {**JSON_ESCAPES, **PAIRS_AND_ITEMS, **URL_ESCAPES, **PARSED}) == []
    assert haystack.count(b"[never captured]") + haystack.count(b"[never%20captured]") >= 2 * len(texts) + 1
