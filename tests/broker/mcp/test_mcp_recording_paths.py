"""The shim's faster recording paths make the same entries as the plain one.

- `CallJournal.prepare_early` (the request's share of the entry made while the call is upstream)
  gives the same fields as `Recorder.prepare` on the whole call at the end;
- `EntryWriter` hands entries to the writer's flusher (`submit`), never appending on the event loop;
  those that queue together are written together, each the entry the single path would have written
  (a value only text can hold falls back to text as before), in one chain;
- a journal that cannot write fails each waiting call with its error (fail closed).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from broker.mcp.messages import parse_line
from broker.mcp.recording import INLINE_LIMIT, CallJournal, Identity
from journal.record import Recorder
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalError

TS = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REQUESTS = [
    {"name": "echo", "arguments": {"text": "hello"}},
    {"name": "login", "arguments": {"user": "a", "password": "hunter2", "token": "ghp_" + "a" * 36}},
    {"name": "say", "arguments": {"text": "Bearer abcdefghijklmnopqrstuvwxyz0123456789"}},
    {"name": "big", "arguments": {"blob": "x" * 20000}},  # spilled to a blob (threshold below)
    {"name": "nested", "arguments": {"a": [{"b": [1, 2.5, None, True, {"c": "é\u2028"}]}]}},
    None,  # a request without params
    "Bearer abcdefghijklmnopqrstuvwxyz0123456789",  # params that are not an object: made on their own
]
RESPONSE = {"content": [{"type": "text", "text": "ok token=abc"}], "isError": False,
            "structuredContent": {"access_token": "s3cret", "n": 1}}


def _journal(tmp_path: Path, **kwargs) -> CallJournal:
    recorder = Recorder(tmp_path / "vault", spill_threshold=4096, **kwargs)
    return CallJournal(recorder, Identity("s1", "agent-1", "unknown"), url="stdio:server --api-key=k",
                       fallback="server")


def _lines(i: int, params: object) -> tuple[bytes, bytes]:
    req: dict = {"jsonrpc": "2.0", "id": i, "method": "tools/call"}
    if params is not None:
        req["params"] = params
    resp = {"jsonrpc": "2.0", "id": i, "result": RESPONSE}
    return orjson.dumps(req) + b"\n", orjson.dumps(resp) + b"\n"


@pytest.mark.parametrize("params", REQUESTS)
def test_early_request_share_makes_the_same_fields(tmp_path: Path, params: object) -> None:
    journal = _journal(tmp_path)
    req, resp = _lines(1, params)
    answer = parse_line(resp).messages[0]
    plain = journal.start(parse_line(req).messages[0], req)
    early = journal.start(parse_line(req).messages[0], req)
    journal.prepare_early(early)
    assert early.early is not None and plain.early is None
    args = (200, answer, None, None, [("content-type", "application/json")], None, None, TS)
    want = journal._fields(plain, *args, as_text=False)
    got = journal._fields(early, *args, as_text=False)
    assert got == want
    assert orjson.dumps(got) == orjson.dumps(want)  # the same key order too
    if isinstance(params, dict) and params["name"] == "login":
        text = json.dumps(got)
        assert "hunter2" not in text and "ghp_" not in text and "s3cret" not in text


def test_early_share_is_skipped_where_the_end_must_decide(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    big = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"t":"' + \
        b"y" * (INLINE_LIMIT + 1) + b'"}}}\n'
    call = journal.start(parse_line(big).messages[0], big)
    journal.prepare_early(call)
    assert call.early is None  # large: made in the worker thread at the end
    loose = b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":{}}\n'
    call = journal.start(parse_line(loose).messages[0], loose)
    journal.prepare_early(call)
    assert call.early is None  # not strict JSON: kept as text at the end
    journal.skip_when_broker_recorded = True
    req, _ = _lines(2, REQUESTS[0])
    call = journal.start(parse_line(req).messages[0], req)
    journal.prepare_early(call)
    assert call.early is None  # --through-broker may leave no entry: no blob ahead of it


def _start(journal: CallJournal, pairs: list[tuple[bytes, bytes]]) -> list:
    calls = []
    for req, _ in pairs:
        call = journal.start(parse_line(req).messages[0], req)
        journal.prepare_early(call)
        calls.append(call)
    return calls


async def _finish_together(journal: CallJournal, pairs: list[tuple[bytes, bytes]], calls: list | None = None) -> list:
    calls = calls or _start(journal, pairs)
    return await asyncio.gather(*(
        journal.finish(call, status=200, response=parse_line(resp).messages[0], size=len(resp))
        for call, (_, resp) in zip(calls, pairs, strict=True)
    ), return_exceptions=True)


class GatedSync:
    """os.fdatasync with its first call held until the test lets it go (so the rest queue up); it
    notes which threads synced."""

    def __init__(self, real) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.threads: set[str] = set()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(30)
        self.real(fd)


def test_entries_queued_together_are_written_together(tmp_path: Path, monkeypatch) -> None:
    journal = _journal(tmp_path)
    gate = GatedSync(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", gate)
    pairs = [_lines(i, p) for i, p in enumerate(REQUESTS, start=1)]
    deep = (b'{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"deep","arguments":{"x":'
            + b"[" * 900 + b"]" * 900 + b"}}}\n")  # deeper than the writer's encoder: only text can hold it
    pairs.insert(3, (deep, _lines(99, None)[1]))

    async def run() -> list:
        calls = _start(journal, pairs)
        first = asyncio.ensure_future(_finish_together(journal, pairs[:1], calls[:1]))
        await asyncio.to_thread(gate.entered.wait, 30)  # the first entry's fsync is under way
        rest = asyncio.ensure_future(_finish_together(journal, pairs[1:], calls[1:]))
        await asyncio.sleep(0.05)  # every other entry is queued behind it
        gate.release.set()
        return await first + await rest

    results = asyncio.run(run())
    assert all(isinstance(r, dict) for r in results), results
    assert gate.calls < len(pairs)  # the queued entries shared fsyncs
    assert threading.main_thread().name not in gate.threads  # never on the event loop
    assert journal.entries.submitted >= len(pairs) - 3 and journal.open_calls == 0
    text = [r for r in results if "unparsed" in r["mcp"]]
    assert len(text) == 1 and "body_error" in text[0]["request"]  # refused by submit: text, as alone
    assert sorted(r["seq"] for r in results) == list(range(1, len(pairs) + 1))
    assert journal.recorded == len(pairs) and journal.failures == 0
    report = verify_session(Vault(tmp_path / "vault"), "s1")
    assert report.intact, report.detail
    # Each entry is what the single path (one call alone, nothing prepared early) makes of the same call.
    for n, ((req, resp), entry) in enumerate(zip(pairs, results, strict=True)):
        alone = _journal(tmp_path / f"alone-{n}")
        call = alone.start(parse_line(req).messages[0], req)
        want = asyncio.run(alone.finish(call, status=200, response=parse_line(resp).messages[0]))
        for key in ("mcp", "request", "response", "effect", "connector", "principal", "prompt_ref"):
            assert entry[key] == want[key], key


def test_concurrent_answers_each_get_their_entry_in_one_chain(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    pairs = [_lines(i, {"name": "echo", "arguments": {"text": f"t{i}"}}) for i in range(1, 41)]

    async def run() -> list:
        out = []
        for _ in range(5):
            out += await _finish_together(journal, pairs[len(out): len(out) + 8])
        return out

    results = asyncio.run(run())
    assert sorted(r["mcp"]["params"]["arguments"]["text"] for r in results) == sorted(f"t{i}" for i in range(1, 41))
    assert sorted(r["seq"] for r in results) == list(range(1, 41))
    assert verify_session(Vault(tmp_path / "vault"), "s1").intact


def test_a_journal_that_cannot_write_fails_every_waiting_call(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    journal.recorder.writer.close()
    pairs = [_lines(i, REQUESTS[0]) for i in range(1, 4)]
    results = asyncio.run(_finish_together(journal, pairs))
    assert all(isinstance(r, JournalError) for r in results), results
    assert journal.failures == 3 and journal.recorded == 0


def test_one_call_at_a_time_is_never_synced_on_the_event_loop(tmp_path: Path, monkeypatch) -> None:
    journal = _journal(tmp_path)
    gate = GatedSync(os.fdatasync)
    gate.entered.set()  # no hold: only note the threads
    monkeypatch.setattr(os, "fdatasync", gate)
    pairs = [_lines(i, REQUESTS[0]) for i in range(1, 5)]

    async def run() -> list:
        out = []
        for pair in pairs:
            out += await _finish_together(journal, [pair])
        return out

    results = asyncio.run(run())
    assert [r["seq"] for r in results] == [1, 2, 3, 4]
    assert gate.calls == 4 and threading.main_thread().name not in gate.threads
    assert verify_session(Vault(tmp_path / "vault"), "s1").intact
