"""The spellings closed on branch redact31 (tests/journal/test_redact_inline.py), sent through the real
capture points: `broker run` (an httpx client through the proxy) and the MCP shim (`broker mcp` on stdio, the
MCP SDK client). Userinfo after any scheme, flags and environment assignments in a command, libpq and
connection-string passwords, header lines quoted in text, a lone carriage return, in a JSON string, a text
body and a request URL. Every file the run wrote and everything it printed is scanned for each secret (raw,
URL-encoded, JSON-escaped, base64 at three alignments)."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from urllib.parse import quote

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

# class -> (secret, the text that carries it)
TEXTS = {
    "redis:// userinfo": ("Hunter2RedisA1", "redis-cli -u redis://default:Hunter2RedisA1@cache:6379"),
    "amqps:// userinfo": ("Hunter2AmqpB2", "amqps://guest:Hunter2AmqpB2@mq.test/vhost"),
    "--password=": ("Hunter2FlagC3", "mysql -h db --password=Hunter2FlagC3 app"),
    "--token VALUE": ("Hunter2FlagD4", "gh --token Hunter2FlagD4 repo list"),
    "docker -e": ("Hunter2DockerE5", "docker run -e DB_PASSWORD=Hunter2DockerE5 postgres"),
    "env NAME=VALUE": ("Hunter2EnvF6", "env GITHUB_TOKEN=Hunter2EnvF6 ./deploy.sh"),
    "export after ;": ("Hunter2ExportG7", "cd /srv; export API_KEY=Hunter2ExportG7; make"),
    "libpq DSN": ("Hunter2DsnH8", "host=db user=app password=Hunter2DsnH8 sslmode=require"),
    ";Password=": ("Hunter2ConnI9", "Server=db;User ID=sa;Password=Hunter2ConnI9;Encrypt=True"),
    "Authorization: Token": ("Hunter2AuthJ10", "curl -H 'Authorization: Token Hunter2AuthJ10' https://a.test/"),
    "Cookie:": ("Hunter2CookieK11", "GET / HTTP/1.1 Cookie: sid=Hunter2CookieK11; theme=dark"),
    "lone CR": ("Hunter2LoneCrL12", "cfg\rapi_key=Hunter2LoneCrL12"),
}
# a lone CR written as the JSON escape, in a JSON body as written (json.dumps would write \r itself)
RAW_JSON = {"JSON \\r": ("Hunter2JsonCrM13", '{"note": "cfg\\rtoken: Hunter2JsonCrM13"}')}
# in a request URL: a parameter holding a URL with userinfo (recorded through redact_url)
URL = {"redis:// in a query parameter": ("Hunter2UrlN14", "")}
URL_QUERY = "dsn=" + quote("redis://default:Hunter2UrlN14@cache:6379", safe="") + "&pageSize=5"


def _leaks(haystack: bytes, classes: dict[str, tuple[str, str]]) -> list[str]:
    return [name for name, (secret, _t) in classes.items() if any(f in haystack for f in written_forms(secret))]


def test_broker_run_records_no_inline_credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "fingerprint.key"))
    with Upstream() as up, BrokerProcess(tmp_path, up) as b:
        ctx = ssl.create_default_context(cafile=b.ca)
        with httpx.Client(proxy=b.proxy_url("s31", "inline"), verify=ctx, timeout=60) as c:
            for _secret, text in TEXTS.values():
                c.post(f"{DRIVE}/files", content=json.dumps({"command": text}).encode(),
                       headers={"Content-Type": "application/json"})
                c.post(f"{DRIVE}/files", content=text.encode(), headers={"Content-Type": "text/plain"})
            for _secret, text in RAW_JSON.values():
                c.post(f"{DRIVE}/files", content=text.encode(), headers={"Content-Type": "application/json"})
            c.get(f"{DRIVE}/files?{URL_QUERY}")
        count = 2 * len(TEXTS) + len(RAW_JSON) + 1
        got = b.entries("s31", count=count)
        assert len(got) == count
        output = bytes(b.output)
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join([*files, output])
    assert _leaks(haystack, {**TEXTS, **RAW_JSON, **URL}) == []
    assert haystack.count(b"[never captured]") + haystack.count(b"[never%20captured]") >= count


def test_shim_records_no_inline_credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MCP arguments and results are parsed JSON: each text reaches the rules as a plain string, raw quotes and
    carriage returns included (a Digest header line, a lone CR)."""
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "fingerprint.key"))
    vault = tmp_path / "vault"
    argv = shim_argv(vault)
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *NOTES_SERVER], cwd=str(REPO))
    line = 'Authorization: Digest username="bob", response="Hunter2DigestO15"'
    digest = {"Digest header line": ("Hunter2DigestO15", line)}
    texts = [t for _s, t in (*TEXTS.values(), *digest.values())]

    async def scenario() -> None:
        with (tmp_path / "shim.log").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=WAIT) as c:
                for i, text in enumerate(texts):
                    assert (await c.call_tool("add_note", {"note_id": f"i{i}", "text": text})).content[0].text == "ok"
                    assert (await c.call_tool("get_note", {"note_id": f"i{i}"})).content[0].text == text

    asyncio.run(scenario())
    assert_intact(vault)
    assert len(entries(vault)) == 2 * len(texts)
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join(files)
    assert _leaks(haystack, {**TEXTS, **digest}) == []
    assert haystack.count(b"[never captured]") >= 2 * len(texts)
