"""The addon's side of write-ahead records (journal/write_ahead.py): a write's record is durable before
the `request` hook lets it go upstream, its entry names the record, a read makes none, and a record
that cannot be written keeps the write from the platform under `block`."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import taddons, tflow

import broker.proxy.addon as cj
from journal.reader import iter_entries
from journal.vault import Vault
from journal.write_ahead import WRITE_AHEAD_DIR
from journal.writer import JournalError

SEND = "https://gmail.googleapis.com/gmail/v1/users/me/messages/send"
LABELS = "https://gmail.googleapis.com/gmail/v1/users/me/labels"
CANARY = "ya29.HOOKcanary0HOOKcanary0HOOKcanary0"


def _flow(method: str, url: str, body: bytes = b"") -> http.HTTPFlow:
    f = tflow.tflow()
    f.request = http.Request.make(method, url, body, [
        (b"Host", b"gmail.googleapis.com"), (b"Authorization", f"Bearer {CANARY}".encode()),
        (b"Content-Type", b"application/json")])
    f.client_conn.sni = "gmail.googleapis.com"  # tflow's own SNI ("address") would make it misdirected
    return f


def _records(vault) -> list[dict]:
    return [orjson.loads(line) for p in (vault / WRITE_AHEAD_DIR).glob("*.wal") for line in p.read_bytes().splitlines()]


def test_a_write_is_recorded_ahead_before_it_goes_upstream_and_its_entry_names_the_record(tmp_path):
    vault = tmp_path / "vault"
    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(vault), broker_recorder="inline", broker_session="hooks")
        f = _flow("POST", SEND, b'{"raw": "aGk"}')
        addon.requestheaders(f)
        ahead = addon.request(f)
        assert ahead is not None and _records(vault) == []  # nothing goes upstream before this is awaited
        asyncio.run(ahead)
        (record,) = _records(vault)
        assert f.response is None  # on its way upstream now
        assert record["fields"]["effect"] == "write" and record["fields"]["request"]["body"] == {"raw": "aGk"}
        assert CANARY not in orjson.dumps(record).decode()
        f.response = http.Response.make(200, b"{}", [(b"Content-Type", b"application/json")])
        addon.responseheaders(f)
        asyncio.run(addon.response(f))
        g = _flow("GET", LABELS)
        addon.requestheaders(g)
        assert addon.request(g) is None  # a read makes no record
        asyncio.run(addon.done())
    (entry,) = iter_entries(Vault(vault), "hooks")  # the record had its entry: the stop added none
    assert entry["request"]["write_ahead"] == record["id"]
    assert not list((vault / WRITE_AHEAD_DIR).glob("*.wal"))  # and removed the log


def test_a_write_whose_record_cannot_be_written_never_goes_upstream(tmp_path, monkeypatch):
    vault = tmp_path / "vault"
    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(vault), broker_recorder="inline", broker_session="hooks")

        def full(*_a, **_k):
            raise JournalError("cannot write the write-ahead log: No space left on device")

        assert addon.wal is not None
        monkeypatch.setattr(addon.wal, "write", full)
        f = _flow("POST", SEND, b'{"raw": "aGk"}')
        addon.requestheaders(f)
        ahead = addon.request(f)
        assert ahead is not None
        asyncio.run(ahead)
        assert f.response is not None and f.response.status_code == 502  # answered here, not forwarded
        assert "write-ahead" in f.response.text and addon.inflight == 0


def test_the_ack_deadline_must_be_above_zero(tmp_path):
    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match="above 0"):
            tctx.configure(addon, vault=str(tmp_path / "vault"), broker_ack_deadline=0.0)


def test_a_model_call_makes_no_record_its_texts_would_be_in(tmp_path):
    """A model call is recorded as a read with its texts referenced (prompt capture); a write-ahead
    record of it would hold the prompt in clear, so none is made."""
    vault = tmp_path / "vault"
    addon = cj.ConnectorJournal()
    task = "Triage my inbox and post a summary"
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(vault), broker_recorder="inline", broker_session="hooks",
                       broker_prompts="refs")
        f = tflow.tflow()
        f.request = http.Request.make(
            "POST", "https://api.anthropic.com/v1/messages",
            orjson.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": task}]}),
            [(b"Host", b"api.anthropic.com"), (b"Content-Type", b"application/json")])
        f.client_conn.sni = "api.anthropic.com"
        addon.requestheaders(f)
        assert addon.request(f) is None and f.response is None  # on its way, no record awaited
        asyncio.run(addon.done())
    assert _records(vault) == []


def test_each_call_is_classified_once_and_its_entry_says_what_the_rules_say(tmp_path, monkeypatch):
    """The event loop classifies a call to decide on a write-ahead record; the recorder takes that result
    with the call instead of classifying it again. The entries are as a fresh classification makes them."""
    from journal.record import Recorder

    seen: list[str] = []
    classify = Recorder.classify

    def counting(self, method, url, *args, **kwargs):
        seen.append(f"{method} {url}")
        return classify(self, method, url, *args, **kwargs)

    monkeypatch.setattr(Recorder, "classify", counting)
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
            f.response = http.Response.make(200, b"{}", [(b"Content-Type", b"application/json")])
            addon.responseheaders(f)
            asyncio.run(addon.response(f))
        asyncio.run(addon.done())
        assert seen == [f"POST {SEND}", f"GET {LABELS}"]
        fresh = Recorder(str(vault))
        entries = list(iter_entries(Vault(vault), "once"))
        assert [(e["connector"], e["effect"], e["request"]["effect_basis"]) for e in entries] == [
            classify(fresh, "POST", SEND, [("Content-Type", "application/json")], b'{"raw": "aGk"}', "unknown"),
            classify(fresh, "GET", LABELS, [("Content-Type", "application/json")], None, "unknown"),
        ]
        fresh.close()
