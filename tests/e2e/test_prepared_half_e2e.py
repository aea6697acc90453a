"""The addon with its recording service process (`broker_recorder=process`): a write's request half,
made once for its write-ahead record, reaches the service as a `prepared_request` without the request
body, and its entry is the record's request with the record's id; a read goes as before (`request`)."""

from __future__ import annotations

import asyncio
import json

import orjson
from mitmproxy import http
from mitmproxy.test import taddons

import broker.proxy.addon as cj
import broker.proxy.link as recorder_link
from broker.proxy.wire import PreparedAhead
from journal.reader import iter_entries
from journal.vault import Vault
from journal.verify import verify_session
from journal.write_ahead import ID_KEY, WRITE_AHEAD_DIR
from tests.broker.proxy.test_write_ahead_hooks import CANARY, LABELS, SEND, _flow


def test_a_write_goes_to_the_service_prepared_and_its_entry_is_its_record(tmp_path, monkeypatch):
    sent: list[tuple[str, object]] = []
    encoded = recorder_link._encoded

    def watching(message):
        sent.append((type(message).__struct_config__.tag, message))
        return encoded(message)

    monkeypatch.setattr(recorder_link, "_encoded", watching)
    vault = tmp_path / "vault"
    addon = cj.ConnectorJournal()
    records: list[dict] = []

    async def main() -> None:
        assert addon.link is not None
        await addon.link.connect()
        for method, url, body in (("POST", SEND, b'{"raw": "aGk", "token": "ya29.bodycanary"}'), ("GET", LABELS, b"")):
            f = _flow(method, url, body)
            addon.requestheaders(f)
            ahead = addon.request(f)
            if ahead is not None:
                await ahead
            f.response = http.Response.make(200, b'{"id": "m1"}', [(b"Content-Type", b"application/json")])
            addon.responseheaders(f)
            records[:] = [orjson.loads(line) for p in (vault / WRITE_AHEAD_DIR).glob("*.wal")
                          for line in p.read_bytes().splitlines()]
            await addon.response(f)
        await addon.done()

    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(vault), broker_recorder="process", broker_session="svc")
        asyncio.run(main())
    assert [kind for kind, _ in sent] == ["prepared_request", "response", "request", "response"]
    prepared = sent[0][1]
    assert isinstance(prepared, PreparedAhead) and prepared.call.request.body is None
    (record,) = records
    write, read = iter_entries(Vault(vault), "svc")
    assert write["request"] == {**record["fields"]["request"], ID_KEY: record["id"]}
    assert write["request"]["body"] == {"raw": "aGk", "token": "[never captured]"}
    assert (write["effect"], read["effect"]) == ("write", "read")
    assert CANARY not in json.dumps([write, read]) and "ya29.bodycanary" not in json.dumps([write, read])
    assert verify_session(Vault(vault), "svc").intact
