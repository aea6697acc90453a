"""The recording service (broker.proxy.service) and the proxy's link to it (broker.proxy.link)."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import socket
import threading
import time

import msgspec
import orjson
import pytest

import broker.proxy.link as recorder_link
from broker.proxy.link import Recorded, RecorderLink
from broker.proxy.service import Service, call_fields, serve
from broker.proxy.wire import Completion, Forget, RequestAhead, WholeCall, frame, split_to_proxy, split_to_service
from journal.blobstore import is_ref_object
from journal.call import Call, Prepared
from journal.reader import iter_entries
from journal.record import Recorder, principal_fingerprint
from journal.store.memory_store import MemoryWriter
from journal.vault import Vault
from journal.verify import verify_lines, verify_session
from journal.writer import JournalError

CANARY = "ya29.SERVICEcanary0SERVICEcanary0SERVICE"


def material(n: int = 0, **over) -> Call:
    """A whole call as the addon hands it over: raw header fields, bodies as on the wire."""
    body = gzip.compress(json.dumps({"labels": [{"id": f"L{n}", "name": "Inbox"}]}).encode())
    m = {
        "session": "svc", "agent": "agent-s", "principal": None, "connector": "gmail", "method": "GET",
        "url": f"https://gmail.googleapis.com/gmail/v1/users/me/labels?n={n}",
        "request_headers": ((b"Host", b"gmail.googleapis.com"), (b"Authorization", f"Bearer {CANARY}".encode()),
                            (b"X-Odd", b"caf\xe9")),
        "request_body": None, "status": 200,
        "response_headers": ((b"Content-Type", b"application/json"), (b"Content-Encoding", b"gzip")),
        "response_body": body, "error": None, "ts": 1790000000.25 + n, "mcp": None,
    }
    m.update(over)
    return Call.make(**m)


def slack_token_exchange() -> Call:
    return material(connector="slack", method="POST", url="https://slack.com/api/oauth.v2.access",
                    request_body=b"code=abc&client_secret=shh", response_body=b'{"ok":true,"access_token":"xoxb-1"}')


def over_the_wire(*messages) -> list:
    """Messages as the service receives them: framed by the proxy, read back from the bytes."""
    decoded, used = split_to_service(bytearray(b"".join(frame(m) for m in messages)))
    assert used == sum(len(frame(m)) for m in messages)
    return decoded


def ahead(call: Call) -> Call:
    """The request half of a call, as the addon sends it ahead while the call is upstream."""
    return msgspec.structs.replace(call, response=None)


def _halves(call: Call, call_id: int) -> tuple[RequestAhead, Completion]:
    """The two messages of a call whose request half went ahead."""
    return RequestAhead(call_id, ahead(call)), Completion(call_id, call.response, call.ts, call.mcp)


def test_call_fields_decodes_headers_fingerprints_and_classifies(tmp_path):
    rec = Recorder(tmp_path)
    f = call_fields(rec, material())
    assert f["principal"] == principal_fingerprint([("Authorization", f"Bearer {CANARY}")], "")
    assert dict(f["request"]["headers"])["X-Odd"] == "café"  # not UTF-8: read as Latin-1, nothing lost
    assert dict(f["request"]["headers"])["Authorization"] == "[never captured]"
    assert f["response"]["body"] == {"labels": [{"id": "L0", "name": "Inbox"}]}
    assert (f["effect"], f["ts"]) == ("read", "2026-09-21T14:13:20.250Z")
    slack = material(connector="slack", method="POST", url="https://slack.com/api/conversations.history",
                     request_body=b"channel=C1",
                     request_headers=((b"Content-Type", b"application/x-www-form-urlencoded"),))
    assert call_fields(rec, slack)["effect"] == "read"  # by method name, not by HTTP method
    unknown = material(connector="unknown", method="DELETE", url="https://example.org/x")
    assert (call_fields(rec, unknown)["connector"], call_fields(rec, unknown)["effect"]) == ("unknown", "write")
    assert call_fields(rec, material(principal="alice@example.com"))["principal"] == "alice@example.com"
    assert call_fields(rec, slack_token_exchange()) is None
    rec.close()


def test_record_batch_answers_every_call_in_order():
    journal = MemoryWriter()
    rec = Recorder(journal)
    calls = [(1, material(1)), (2, slack_token_exchange()), (3, material(3, method=None)), (4, material(4))]
    acks = Service(rec).handle(over_the_wire(*(WholeCall(call_id, m) for call_id, m in calls)))
    assert [(a.id, a.outcome) for a in acks] == [(1, "ok"), (2, "skip"), (3, "noted"), (4, "ok")]
    assert [(a.detail, a.effect) for a in acks if a.outcome == "ok"] == [(1, "read"), (3, "read")]
    assert "entry 2 says so" in acks[2].detail
    rec.close()
    assert verify_lines("svc", journal.lines_after("svc")).entries == 3
    failed = journal.entries("svc")[1]
    assert failed["response"]["status"] == 502 and failed["response"]["answered_by"] == "capture"
    assert "could not be recorded" in failed["response"]["error"] and failed["request"]["body"] is None
    assert CANARY not in json.dumps(failed)


def test_serve_records_frames_from_a_socket_until_it_closes(tmp_path):
    rec = Recorder(tmp_path)
    ours, theirs = socket.socketpair()
    t = threading.Thread(target=serve, args=(theirs, rec))
    t.start()
    big = material(7, response_body=b"x" * (3 << 20), response_headers=((b"Content-Type", b"text/plain"),))
    ours.sendall(b"".join(frame(WholeCall(i, material(i))) for i in range(5)) + frame(WholeCall(99, big)))
    ours.shutdown(socket.SHUT_WR)
    t.join(30)  # serve returns at the end of input, having answered everything
    assert not t.is_alive()
    theirs.close()
    buf = bytearray()
    while chunk := ours.recv(65536):
        buf += chunk
    batches, used = split_to_proxy(buf)
    assert used == len(buf)
    acks = [a for batch in batches for a in batch]
    assert sorted(a.id for a in acks) == [0, 1, 2, 3, 4, 99] and {a.outcome for a in acks} == {"ok"}
    rec.close()
    entries = list(iter_entries(Vault(tmp_path), "svc"))
    spilled = entries[-1]["response"]["body"]  # 3 MiB spilled to a blob by the service
    assert is_ref_object(spilled) and spilled["size"] == 3 << 20


def _run(coro):
    return asyncio.run(coro)


async def _hung_up(link: RecorderLink) -> None:
    """Wait until the link has seen its service's end of the socket close."""
    deadline = time.monotonic() + 10
    while link._transport is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert link._transport is None


def test_link_records_through_a_service_process_and_drains_on_close(tmp_path):
    vault = tmp_path / "vault"

    async def main():
        link = RecorderLink(str(vault), 1 << 20)
        await link.connect()
        first = await link.record(material(0))
        assert isinstance(first, Recorded) and first[:2] == (1, "read")  # the entry's seq and effect
        assert first.hash is not None and len(first.hash) == 64  # and its hash (checked against the file below)
        hashes.append(first.hash)
        assert await link.record(slack_token_exchange()) is False
        # calls in flight when the proxy stops are still recorded and acknowledged
        pending = [asyncio.ensure_future(link.record(material(i))) for i in range(1, 41)]
        await asyncio.sleep(0)
        await link.aclose()
        assert all(await asyncio.gather(*pending))
        assert link.proc is None

    hashes: list[str] = []
    _run(main())
    r = verify_session(Vault(vault), "svc")
    assert r.intact and r.entries == 41
    lines = [orjson.loads(line) for line in Vault(vault).session_path("svc").read_bytes().splitlines()]
    assert [e["hash"] for e in lines if e.get("seq") == 1] == hashes
    for path in vault.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


def test_link_reports_a_dead_service_and_starts_a_new_one(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder_link, "RESTART_INTERVAL", 0.0)
    vault = tmp_path / "vault"

    async def main():
        link = RecorderLink(str(vault), 1 << 20)
        await link.connect()
        assert await link.record(material(0))
        os.kill(link.proc.pid, signal.SIGKILL)
        await _hung_up(link)
        assert await link.record(material(1))  # a new service, continuing the chain
        await link.aclose()

    _run(main())
    r = verify_session(Vault(vault), "svc")
    assert r.intact and r.entries == 2


def test_link_fails_waiting_calls_when_the_service_dies(tmp_path):
    vault = tmp_path / "vault"

    async def main():
        link = RecorderLink(str(vault), 1 << 20)
        await link.connect()
        os.kill(link.proc.pid, signal.SIGSTOP)  # it can take the call but never answer
        call = asyncio.ensure_future(link.record(material(0)))
        await asyncio.sleep(0.2)
        assert not call.done()
        os.kill(link.proc.pid, signal.SIGKILL)
        with pytest.raises(JournalError, match="recording service"):
            await asyncio.wait_for(call, 10)
        await link.aclose()

    _run(main())


def test_prepared_bodies_travel_to_the_service(tmp_path):
    rec = Recorder(tmp_path)
    ref = rec.blobs.put_bytes(b"streamed body")
    acks = Service(rec).handle(over_the_wire(
        WholeCall(1, material(1, response_body=Prepared(ref, {"encoding": "spilled"})))))
    assert acks[0].outcome == "ok", acks
    (e,) = iter_entries(Vault(tmp_path), "svc")
    assert e["response"]["body"] == ref
    rec.close()


def test_a_request_half_sent_ahead_is_prepared_before_its_response_arrives(tmp_path):
    svc = Service(Recorder(tmp_path))
    req, resp = _halves(material(1), 7)
    assert svc.handle(over_the_wire(req)) == []  # nothing to acknowledge yet
    svc.prepare_pending()
    assert not svc.raw and 7 in svc.halves  # prepared while the call is upstream
    (ack,) = svc.handle(over_the_wire(resp))
    assert (ack.id, ack.outcome) == (7, "ok") and not svc.halves
    whole = call_fields(Recorder(tmp_path / "other"), material(1))
    (e,) = iter_entries(Vault(tmp_path), "svc")
    assert {k: e[k] for k in whole} == whole  # the same entry as from the whole call at once
    # request and response in one batch: the request half is prepared on demand
    req.id = resp.id = 8
    (ack,) = svc.handle(over_the_wire(req, resp))
    assert (ack.id, ack.outcome) == (8, "ok")
    svc.prepare_pending()
    assert not svc.halves and not svc.raw  # nothing kept once the call is recorded


def test_request_halves_forgotten_missing_or_token_exchanges(tmp_path):
    rec = Recorder(tmp_path)
    svc = Service(rec)
    req, resp = _halves(material(1), 1)
    svc.handle(over_the_wire(req, Forget(1)))
    svc.prepare_pending()
    assert not svc.halves and not svc.raw
    (ack,) = svc.handle(over_the_wire(resp))  # forgotten (or sent to a service that restarted)
    assert ack.outcome == "error" and "not here" in ack.detail
    (ack,) = svc.handle(over_the_wire(*_halves(slack_token_exchange(), 2)))
    assert ack.outcome == "skip"
    # a response that looks like a token grant from an endpoint that is not a token exchange is
    # recorded (an agent reading a credentials file leaves a trace), with the credential redacted
    looks = material(3, url="https://auth.example.org/o/exchange", connector="unknown", method="POST",
                     request_body=b"x" * (3 << 20), request_headers=((b"Content-Type", b"text/plain"),),
                     response_headers=((b"Content-Type", b"application/json"),),
                     response_body=b'{"access_token": "at-SECRET-1", "token_type": "Bearer", "expires_in": 3600}')
    breq, bresp = _halves(looks, 3)
    svc.handle(over_the_wire(breq))
    svc.prepare_pending()
    (ack,) = svc.handle(over_the_wire(bresp))
    assert ack.outcome == "ok"
    rec.close()
    (entry,) = iter_entries(Vault(tmp_path), "svc")
    assert entry["response"]["body"]["access_token"] == "[never captured]"
    assert b"at-SECRET-1" not in b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_link_sends_request_halves_ahead_and_falls_back_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder_link, "RESTART_INTERVAL", 0.0)
    vault = tmp_path / "vault"

    async def main():
        link = RecorderLink(str(vault), 1 << 20)
        await link.connect()
        call = material(0)
        sent = link.send_request(ahead(call))
        assert sent is not None
        assert await link.finish(sent, call)
        call1 = material(1)
        sent = link.send_request(ahead(call1))
        os.kill(link.proc.pid, signal.SIGKILL)  # the request half dies with this service
        await _hung_up(link)
        assert await link.finish(sent, call1)  # sent whole to the new service
        link.forget(sent)  # harmless for a handle of a service that is gone
        await link.aclose()

    _run(main())
    r = verify_session(Vault(vault), "svc")
    assert r.intact and r.entries == 2


def test_service_answers_unknown_kinds_skips_malformed_messages_and_bounds_its_state(tmp_path, monkeypatch):
    rec = Recorder(tmp_path)
    svc = Service(rec)
    def raw(obj: object) -> bytes:
        payload = msgspec.msgpack.encode(obj)
        return len(payload).to_bytes(4, "big") + payload

    # a call whose Call does not decode (no connector, a session that is not text) is acknowledged
    # with an error, with an entry saying so when its identity can be read
    bad_call = {"identity": {"session": "svc", "agent": "a", "principal": "al"}, "request": {"method": "GET",
                "url": "https://gmail.googleapis.com/x", "headers": [[b"Authorization", CANARY.encode()]]}}
    no_identity = {"identity": {"session": 5, "agent": "a"}, "connector": "gmail", "request": {}}
    wire = b"".join([raw(["bogus", 1, {}]), raw("not a message"), raw([None, "x"]), b"\0\0\0\2\xc1\xc1",
                     raw(["call", 3, bad_call]), raw(["call", 4, no_identity]), frame(WholeCall(2, material(2)))])
    messages, used = split_to_service(bytearray(wire))
    assert used == len(wire)
    acks = svc.handle(messages)
    assert [(a.id, a.outcome) for a in acks] == [(1, "error"), (3, "noted"), (4, "error"), (2, "ok")]
    assert "could not be read" in acks[0].detail
    monkeypatch.setattr(Service, "MAX_HALVES", 2)
    svc.handle(over_the_wire(*(_halves(material(3), i)[0] for i in (10, 11, 12))))
    svc.prepare_pending()
    assert list(svc.halves) == [11, 12]  # the oldest dropped; its response gets an error, not a hang
    (ack,) = svc.handle(over_the_wire(_halves(material(3), 10)[1]))
    assert ack.outcome == "error"
    rec.close()
    noted = next(e for e in iter_entries(Vault(tmp_path), "svc") if e["response"]["status"] == 502)
    assert "could not be recorded" in noted["response"]["error"] and noted["principal"] == "al"
    assert CANARY not in json.dumps(noted)


def test_the_wire_keeps_bytes_bytes_and_costs_no_more_than_the_call(tmp_path):
    """A frame holds the Call's bodies as MessagePack bin (no base64, no pickle): a 1 MiB body adds
    1 MiB and a few bytes; and a read-back Call records the same entry as the one sent."""
    body = bytes(range(256)) * 4096
    call = material(5, response_body=body, response_headers=((b"Content-Type", b"application/octet-stream"),))
    data = frame(WholeCall(5, call))
    assert len(body) < len(data) < len(body) + 2048
    (got,) = over_the_wire(WholeCall(5, call))
    assert isinstance(got.call.response.body, bytes) and got.call.response.body == body
    assert call_fields(Recorder(tmp_path / "a"), got.call) == call_fields(Recorder(tmp_path / "b"), call)


def test_link_reports_a_service_that_cannot_start_and_does_not_spin(tmp_path, monkeypatch):
    starts = []
    real_popen = recorder_link.subprocess.Popen

    def counting_popen(*a, **k):
        starts.append(a[0])
        return real_popen(*a, **k)

    monkeypatch.setattr(recorder_link.subprocess, "Popen", counting_popen)
    monkeypatch.setattr(recorder_link, "RESTART_INTERVAL", 60.0)  # however slow the machine, no second start
    (tmp_path / "file").write_text("not a vault")

    async def main():
        link = RecorderLink(str(tmp_path / "file"), 1 << 20)  # the service exits at once: one clear line
        with pytest.raises(JournalError, match=r"recording service exited \(code 2\)"):
            await link.record(material(0))
        with pytest.raises(JournalError, match="exited"):  # within the restart interval: no new process
            await link.record(material(1))
        assert len(starts) == 1
        await link.aclose()
        monkeypatch.setattr(recorder_link.sys, "executable", str(tmp_path / "no-such-python"))
        gone = RecorderLink(str(tmp_path / "vault"), 1 << 20)
        with pytest.raises(JournalError, match="cannot start the recording service"):
            await gone.record(material(0))

    _run(main())
