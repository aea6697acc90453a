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

import pytest

import broker.proxy.link as recorder_link
from broker.proxy.link import RecorderLink
from broker.proxy.service import Service, frame, material_fields, serve, split_frames
from journal.blobstore import is_ref_object
from journal.reader import iter_entries
from journal.record import Prepared, Recorder, principal_fingerprint
from journal.store.memory_store import MemoryWriter
from journal.vault import Vault
from journal.verify import verify_lines, verify_session
from journal.writer import JournalError

CANARY = "ya29.SERVICEcanary0SERVICEcanary0SERVICE"


def material(n: int = 0, **over) -> dict:
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
    return m


def slack_token_exchange() -> dict:
    return material(connector="slack", method="POST", url="https://slack.com/api/oauth.v2.access",
                    request_body=b"code=abc&client_secret=shh", response_body=b'{"ok":true,"access_token":"xoxb-1"}')


def test_material_fields_decodes_headers_fingerprints_and_classifies():
    rec = Recorder(MemoryWriter())
    f = material_fields(rec, material())
    assert f["principal"] == principal_fingerprint([("Authorization", f"Bearer {CANARY}")], "")
    assert dict(f["request"]["headers"])["X-Odd"] == "café"  # not UTF-8: read as Latin-1, nothing lost
    assert dict(f["request"]["headers"])["Authorization"] == "[never captured]"
    assert f["response"]["body"] == {"labels": [{"id": "L0", "name": "Inbox"}]}
    assert (f["effect"], f["ts"]) == ("read", "2026-09-21T14:13:20.250Z")
    slack = material(connector="slack", method="POST", url="https://slack.com/api/conversations.history",
                     request_body=b"channel=C1",
                     request_headers=((b"Content-Type", b"application/x-www-form-urlencoded"),))
    assert material_fields(rec, slack)["effect"] == "read"  # by method name, not by HTTP method
    unknown = material(connector="unknown", method="DELETE", url="https://example.org/x")
    assert (material_fields(rec, unknown)["connector"], material_fields(rec, unknown)["effect"]) == ("unknown", "write")
    assert material_fields(rec, material(principal="alice@example.com"))["principal"] == "alice@example.com"
    assert material_fields(rec, slack_token_exchange()) is None
    rec.close()


def test_record_batch_answers_every_call_in_order():
    journal = MemoryWriter()
    rec = Recorder(journal)
    calls = [(1, material(1)), (2, slack_token_exchange()), (3, material(3, method=None)), (4, material(4))]
    acks = Service(rec).handle([("call", call_id, m) for call_id, m in calls])
    assert [(a[0], a[1]) for a in acks] == [(1, "ok"), (2, "skip"), (3, "noted"), (4, "ok")]
    assert [a[2] for a in acks if a[1] == "ok"] == [1, 3]
    assert "entry 2 says so" in acks[2][2]
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
    ours.sendall(b"".join(frame(("call", i, material(i))) for i in range(5)) + frame(("call", 99, big)))
    ours.shutdown(socket.SHUT_WR)
    t.join(30)  # serve returns at the end of input, having answered everything
    assert not t.is_alive()
    theirs.close()
    buf = bytearray()
    while chunk := ours.recv(65536):
        buf += chunk
    batches, used = split_frames(buf)
    assert used == len(buf)
    acks = [a for batch in batches for a in batch]
    assert sorted(a[0] for a in acks) == [0, 1, 2, 3, 4, 99] and {a[1] for a in acks} == {"ok"}
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
        assert await link.record(material(0)) == 1  # the entry's seq
        assert await link.record(slack_token_exchange()) is False
        # calls in flight when the proxy stops are still recorded and acknowledged
        pending = [asyncio.ensure_future(link.record(material(i))) for i in range(1, 41)]
        await asyncio.sleep(0)
        await link.aclose()
        assert all(await asyncio.gather(*pending))
        assert link.proc is None

    _run(main())
    r = verify_session(Vault(vault), "svc")
    assert r.intact and r.entries == 41
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
    acks = Service(rec).handle([("call", 1, material(1, response_body=Prepared(ref, {"encoding": "spilled"})))])
    assert acks[0][1] == "ok", acks
    (e,) = iter_entries(Vault(tmp_path), "svc")
    assert e["response"]["body"] == ref
    rec.close()


def _halves(m: dict) -> tuple[dict, dict]:
    resp_keys = ("status", "response_headers", "response_body", "error", "ts", "mcp")
    return {k: v for k, v in m.items() if k not in resp_keys}, {k: m[k] for k in resp_keys}


def test_a_request_half_sent_ahead_is_prepared_before_its_response_arrives(tmp_path):
    svc = Service(Recorder(tmp_path))
    req, resp = _halves(material(1))
    assert svc.handle([("request", 7, req)]) == []  # nothing to acknowledge yet
    svc.prepare_pending()
    assert not svc.raw and 7 in svc.halves  # prepared while the call is upstream
    (ack,) = svc.handle([("response", 7, resp)])
    assert ack[:2] == (7, "ok") and not svc.halves
    whole = material_fields(Recorder(tmp_path / "other"), material(1))
    (e,) = iter_entries(Vault(tmp_path), "svc")
    assert {k: e[k] for k in whole} == whole  # the same entry as from the whole material at once
    # request and response in one batch: the request half is prepared on demand
    (ack,) = svc.handle([("request", 8, req), ("response", 8, resp)])
    assert ack[:2] == (8, "ok")
    svc.prepare_pending()
    assert not svc.halves and not svc.raw  # nothing kept once the call is recorded


def test_request_halves_forgotten_missing_or_token_exchanges(tmp_path):
    rec = Recorder(tmp_path)
    svc = Service(rec)
    req, resp = _halves(material(1))
    svc.handle([("request", 1, req), ("forget", 1)])
    svc.prepare_pending()
    assert not svc.halves and not svc.raw
    (ack,) = svc.handle([("response", 1, resp)])  # forgotten (or sent to a service that restarted)
    assert ack[1] == "error" and "not here" in ack[2]
    treq, tresp = _halves(slack_token_exchange())
    (ack,) = svc.handle([("request", 2, treq), ("response", 2, tresp)])
    assert ack[1] == "skip"
    # a response that looks like a token grant from an endpoint that is not a token exchange is
    # recorded (an agent reading a credentials file leaves a trace), with the credential redacted
    looks = material(3, url="https://auth.example.org/o/exchange", connector="unknown", method="POST",
                     request_body=b"x" * (3 << 20), request_headers=((b"Content-Type", b"text/plain"),),
                     response_headers=((b"Content-Type", b"application/json"),),
                     response_body=b'{"access_token": "at-SECRET-1", "token_type": "Bearer", "expires_in": 3600}')
    breq, bresp = _halves(looks)
    svc.handle([("request", 3, breq)])
    svc.prepare_pending()
    (ack,) = svc.handle([("response", 3, bresp)])
    assert ack[1] == "ok"
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
        req, resp = _halves(material(0))
        sent = link.send_request(req)
        assert sent is not None
        assert await link.finish(sent, req, resp)
        req1, resp1 = _halves(material(1))
        sent = link.send_request(req1)
        os.kill(link.proc.pid, signal.SIGKILL)  # the request half dies with this service
        await _hung_up(link)
        assert await link.finish(sent, req1, resp1)  # sent whole to the new service
        link.forget(sent)  # harmless for a handle of a service that is gone
        await link.aclose()

    _run(main())
    r = verify_session(Vault(vault), "svc")
    assert r.intact and r.entries == 2


def test_service_answers_unknown_kinds_skips_malformed_messages_and_bounds_its_state(tmp_path, monkeypatch):
    rec = Recorder(tmp_path)
    svc = Service(rec)
    acks = svc.handle([("bogus", 1, {}), "not a tuple", (None, "x"), ("call", 2, material(2))])
    assert [(a[0], a[1]) for a in acks] == [(1, "error"), (2, "ok")]
    assert "unknown frame" in acks[0][2]
    monkeypatch.setattr(Service, "MAX_HALVES", 2)
    req = _halves(material(3))[0]
    svc.handle([("request", i, req) for i in (10, 11, 12)])
    svc.prepare_pending()
    assert list(svc.halves) == [11, 12]  # the oldest dropped; its response gets an error, not a hang
    (ack,) = svc.handle([("response", 10, _halves(material(3))[1])])
    assert ack[1] == "error"
    rec.close()


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
