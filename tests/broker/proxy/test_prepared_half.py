"""A write's request half prepared once (issue 30): the proxy makes it for its write-ahead record
(`Recorder.prepare_request`) and hands its fields to the recording service (`PreparedAhead`), which takes
them instead of preparing the request again. What is recorded must be exactly what the service's own
preparation records: the entries pinned in data/recorded_entries.json, the write-ahead id, prompt capture's
prompt_ref; a half the service must make itself (a model call's) is refused, not taken."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import orjson
import pytest
from mitmproxy import http
from mitmproxy.test import taddons

import broker.proxy.addon as cj
from broker.proxy.link import RecorderLink
from broker.proxy.service import Service
from broker.proxy.wire import Completion, PreparedAhead, RequestAhead, frame, split_to_service
from journal.call import Call
from journal.reader import iter_entries
from journal.record import Recorder
from journal.vault import Vault
from journal.write_ahead import ID_KEY, WRITE_AHEAD_DIR
from tests.broker.proxy.test_recorded_entries import EXPECTED, SECRETS, calls
from tests.broker.proxy.test_recorded_entries import fixed_key as fixed_key  # the fixture, shared
from tests.broker.proxy.test_write_ahead_hooks import CANARY, LABELS, SEND, _flow
from tests.support.prompt_calls import anthropic_call, call_with_prompts

WRITE_ID = "0123456789abcdef0123456789abcdef"


class _Transport(asyncio.Transport):
    """The service's side of the socket, seen from the proxy: keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def write(self, data) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False


def _sent_ahead(call: Call, prepared: dict | None, call_id: int = 1) -> list:
    """What reaches the service when the proxy's link hands over `call`'s request half (`send_request`) as
    call `call_id`."""

    async def send() -> bytes:
        link = RecorderLink("unused", 1 << 20)
        link._transport = transport = _Transport()
        link._generation, link._next_id = 1, call_id - 1
        assert link.send_request(call, prepared) == (1, call_id)
        assert link._outbox is not None and not transport.data  # queued: it leaves after this turn of the loop
        link._outbox.flush()
        return bytes(transport.data)

    messages, used = split_to_service(bytearray(asyncio.run(send())))
    assert used > 0
    return messages


def _without_response(call: Call, **over) -> Call:
    """The request half of a call as the addon builds it (`_request_call`): no response, no ts."""
    return msgspec.structs.replace(call, response=None, ts=None, **over)


def _record(svc: Service, call_id: int, ahead: list, call: Call) -> str:
    """Hand the service a request half sent ahead, then the response half; the acknowledgement's outcome."""
    assert svc.handle(ahead) == []
    svc.prepare_pending()
    assert call.response is not None
    (ack,) = svc.handle(split_to_service(bytearray(frame(Completion(call_id, call.response, call.ts, call.mcp))))[0])
    return ack.outcome


def _entries(vault: Path, session: str) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}
            for e in iter_entries(Vault(vault), session)]


def test_halves_prepared_by_the_proxy_record_the_pinned_entries(tmp_path: Path, fixed_key: None) -> None:
    """Every pinned call (reads and writes, secrets in headers, query, bodies), its half made by the proxy's
    recorder and sent as the link sends it: the same entries as the service's own preparation made."""
    vault = tmp_path / "vault"
    proxy, service = Recorder(vault, durable=False), Recorder(vault, durable=False)
    svc = Service(service)
    try:
        for i, call in enumerate(calls(), 1):
            half = _without_response(call)
            prepared = proxy.prepare_request(half)
            assert prepared is not None
            ahead = _sent_ahead(half, prepared.fields, i)
            (message,) = ahead
            assert isinstance(message, PreparedAhead) and message.call.request.body is None  # the body stays here
            assert _record(svc, i, ahead, call) == "ok"
    finally:
        proxy.close()
        service.close()
    got = json.loads(json.dumps(_entries(vault, "s1")))
    expected = json.loads(EXPECTED.read_text())[0::2]  # the entries of halves sent ahead (the others: whole)
    assert got == expected
    for secret in SECRETS:
        assert secret not in json.dumps(got)


def _gmail_send(session: str, mode: str | None) -> Call:
    """A write (Gmail send) with prompt capture `mode`, as the addon hands it over."""
    return call_with_prompts({
        "session": session, "agent": "a", "principal": None, "connector": "gmail", "method": "POST", "url": SEND,
        "request_headers": ((b"Authorization", f"Bearer {CANARY}".encode()), (b"Content-Type", b"application/json")),
        "request_body": b'{"raw": "aGk", "access_token": "ya29.bodycanary"}', "status": 200,
        "response_headers": ((b"Content-Type", b"application/json"),), "response_body": b'{"id": "m1"}',
        "error": None, "ts": 1790000002.5, "mcp": None, "prompts": mode,
        "request_extra": None,
    })


@pytest.mark.parametrize("mode", [None, "refs"])
def test_the_write_ahead_id_and_prompt_ref_are_the_calls_not_the_prepared_halfs(tmp_path: Path, mode) -> None:
    """The proxy prepares a write's half before its record has an id (and never links prompt_ref, which
    the service does as the call arrives): the entry takes both from the call, as the service's own
    preparation does. The same entries either way, whether prompt capture is on or off."""
    entries = {}
    for how in ("service", "proxy"):
        vault = tmp_path / how
        rec = Recorder(vault)
        svc = Service(rec)
        model = anthropic_call("s", mode or "refs", 1, tool=("gmail_send", {}))
        model_half = _without_response(model)
        assert _record(svc, 1, split_to_service(bytearray(frame(RequestAhead(1, model_half))))[0], model) == "ok"
        write = _gmail_send("s", mode)
        before_id = _without_response(write)  # as `_write_ahead` builds it: no record id yet
        with_id = _without_response(write, request=msgspec.structs.replace(write.request, extra={ID_KEY: WRITE_ID}))
        if how == "proxy":
            half = Recorder(vault).prepare_request(before_id)
            assert half is not None and half.fields["prompt_ref"] is None and ID_KEY not in half.request_extra
            ahead = _sent_ahead(with_id, half.fields, 2)
        else:
            ahead = _sent_ahead(with_id, None, 2)
        assert _record(svc, 2, ahead, write) == "ok"
        rec.close()
        entries[how] = list(iter_entries(Vault(vault), "s"))
    assert entries["proxy"] == entries["service"]
    model_entry, write_entry = entries["proxy"]
    assert write_entry["request"][ID_KEY] == WRITE_ID and write_entry["effect"] == "write"
    assert write_entry["prompt_ref"] == (model_entry["hash"] if mode else None)
    assert write_entry["request"]["body"] == {"raw": "aGk", "access_token": "[never captured]"}
    assert CANARY not in json.dumps(entries) and "ya29.bodycanary" not in json.dumps(entries)


def test_a_prepared_half_of_a_model_call_is_refused_not_taken(tmp_path: Path) -> None:
    """A model call's request is the service's to prepare (its texts referenced, never in clear): a half the
    proxy made of one would hold the prompt, so the call is recorded as not recordable instead."""
    rec = Recorder(tmp_path)
    svc = Service(rec)
    model = anthropic_call("s", "refs", 1, tool=None)
    half = _without_response(model)
    prepared = Recorder(tmp_path).prepare_request(half)  # the texts in clear
    assert prepared is not None
    assert _record(svc, 1, _sent_ahead(half, prepared.fields), model) == "noted"
    rec.close()
    (entry,) = iter_entries(Vault(tmp_path), "s")
    assert "could not be recorded" in entry["response"]["error"] and entry["request"]["body"] is None
    assert "the private task text" not in (tmp_path / "journal" / "s.jsonl").read_text()


def test_fields_the_wire_cannot_carry_send_the_call_for_the_service_to_prepare(tmp_path: Path) -> None:
    """A prepared half that MessagePack cannot encode (an integer past 64 bits) is not lost: the call goes
    as it came (`RequestAhead`, its body included) and the service prepares it."""
    call = _without_response(_gmail_send("s", None))
    (message,) = _sent_ahead(call, {"request": {"body": 2**70}})
    assert isinstance(message, RequestAhead) and message.call.request.body == call.request.body


def _wal_records(vault: Path) -> list[dict]:
    return [orjson.loads(line) for p in (vault / WRITE_AHEAD_DIR).glob("*.wal") for line in p.read_bytes().splitlines()]


def test_the_proxy_recording_inline_prepares_a_writes_request_once(tmp_path: Path, monkeypatch) -> None:
    """Recording in the proxy (`--recorder inline`, or no live service), a write's half made for its
    write-ahead record is its entry's: prepared once, and the entry's request is the record's plus its id."""
    prepared: list[str] = []
    prepare = Recorder.prepare_request

    def counting(self, call):
        prepared.append(call.request.method)
        return prepare(self, call)

    monkeypatch.setattr(Recorder, "prepare_request", counting)
    vault = tmp_path / "vault"
    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(vault), broker_recorder="inline", broker_session="once")
        for method, url, body in (("POST", SEND, b'{"raw": "aGk"}'), ("GET", LABELS, b"")):
            f = _flow(method, url, body)
            addon.requestheaders(f)
            ahead = addon.request(f)
            if ahead is not None:
                asyncio.run(ahead)
            (record,) = _wal_records(vault)  # the write's (a read makes none)
            f.response = http.Response.make(200, b"{}", [(b"Content-Type", b"application/json")])
            addon.responseheaders(f)
            asyncio.run(addon.response(f))
        assert prepared == ["POST", "GET"]  # once each
        asyncio.run(addon.done())
    write, read = iter_entries(Vault(vault), "once")
    assert write["request"] == {**record["fields"]["request"], ID_KEY: record["id"]}
    assert {k: write[k] for k in record["fields"] if k != "request"} == {
        k: v for k, v in record["fields"].items() if k != "request"}
    assert read["effect"] == "read" and CANARY not in json.dumps([write, read])
