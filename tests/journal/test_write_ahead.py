"""Write-ahead records (journal/write_ahead.py): the request half of a write is durable before the write
goes upstream, and the next start turns every record left without its entry into an entry.

Crashes are simulated by closing a log without recording the call (a process killed with -9 leaves the
same files, and its locks go with it)."""

from __future__ import annotations

import orjson
import pytest

from journal.call import Call
from journal.reader import iter_entries
from journal.record import Recorder
from journal.vault import Vault
from journal.verify import verify_session
from journal.write_ahead import ID_KEY, WRITE_AHEAD_DIR, recover, write_ahead_log_for

SEND = "https://gmail.googleapis.com/gmail/v1/users/me/messages/send"
CANARY = "ya29.WALcanary0WALcanary0WALcanary0WAL"
BODY_SECRET = "sk-ant-api03-WALbodycanaryWALbodycanaryWALbodycanary0000"


def _send(n: int = 1, body: bytes | None = None) -> Call:
    return Call.make(
        session="wal", agent="agent-w", principal=None, connector="gmail", method="POST", url=f"{SEND}?n={n}",
        request_headers=((b"Host", b"gmail.googleapis.com"), (b"Authorization", f"Bearer {CANARY}".encode()),
                         (b"Content-Type", b"application/json")),
        request_body=body if body is not None else orjson.dumps({"raw": "aGk", "api_key": BODY_SECRET}),
    )


@pytest.fixture
def recorder(tmp_path):
    r = Recorder(tmp_path / "vault")
    yield r
    r.close()


def _disk(root) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_write_record_is_durable_on_return_and_holds_nothing_secret(recorder, tmp_path):
    wal = write_ahead_log_for(recorder)
    assert wal is not None
    half = recorder.prepare_request(_send())
    assert half is not None and half.fields["effect"] == "write"
    record_id = wal.write(half)
    files = list((tmp_path / "vault" / WRITE_AHEAD_DIR).iterdir())
    assert len(files) == 1
    (record,) = [orjson.loads(line) for line in files[0].read_bytes().splitlines()]
    assert record["id"] == record_id
    assert record["fields"]["request"]["url"] == f"{SEND}?n=1"
    disk = _disk(tmp_path / "vault")
    assert CANARY.encode() not in disk and BODY_SECRET.encode() not in disk
    wal.close()


def test_the_next_start_turns_a_record_without_its_entry_into_an_entry_saying_the_outcome_is_unknown(
        recorder, tmp_path):
    wal = write_ahead_log_for(recorder)
    assert wal is not None
    record_id = wal.write(recorder.prepare_request(_send()))
    wal.close()  # the broker died while the write was upstream: no entry
    assert not Vault(tmp_path / "vault").session_path("wal").exists()
    written = recover(recorder)
    (entry,) = list(iter_entries(Vault(tmp_path / "vault"), "wal"))
    assert written == [entry]
    assert entry["effect"] == "write" and entry["connector"] == "gmail"
    assert entry["request"][ID_KEY] == record_id
    assert entry["request"]["method"] == "POST" and entry["request"]["url"] == f"{SEND}?n=1"
    assert entry["response"]["answered_by"] == "none" and entry["response"]["status"] is None
    assert "outcome is unknown" in entry["response"]["error"]
    assert verify_session(Vault(tmp_path / "vault"), "wal").intact
    assert recover(recorder) == []  # once only
    assert list((tmp_path / "vault" / WRITE_AHEAD_DIR).iterdir()) == []


def test_a_record_whose_entry_is_on_disk_makes_no_second_entry(recorder, tmp_path):
    wal = write_ahead_log_for(recorder)
    assert wal is not None
    call = _send()
    record_id = wal.write(recorder.prepare_request(call))
    done = Call.make(
        session="wal", agent="agent-w", principal=None, connector="gmail", method="POST", url=f"{SEND}?n=1",
        request_headers=call.request.headers, request_body=call.request.body, status=200,
        response_body=b"{}", request_extra={ID_KEY: record_id},
    )
    recorder.record(done)
    wal.write(recorder.prepare_request(_send(2)))  # this one died upstream
    wal.close()
    written = recover(recorder)
    assert [e["request"]["url"] for e in written] == [f"{SEND}?n=2"]
    got = list(iter_entries(Vault(tmp_path / "vault"), "wal"))
    assert [e["response"]["answered_by"] for e in got] == ["upstream", "none"]


def test_a_live_log_is_never_recovered_by_another_process(recorder, tmp_path):
    wal = write_ahead_log_for(recorder)
    assert wal is not None
    wal.write(recorder.prepare_request(_send()))
    other = Recorder(tmp_path / "vault")  # a second broker on the same vault, starting now
    try:
        assert recover(other) == []  # the first one holds its log: its write may still be upstream
    finally:
        other.close()
    wal.close()
    assert len(recover(recorder)) == 1


def test_a_streamed_body_is_marked_pending_and_the_recovered_entry_says_its_body_is_not_recorded(
        recorder, tmp_path):
    wal = write_ahead_log_for(recorder)
    assert wal is not None
    head = _send(body=b"")
    wal.write(recorder.prepare_request(head), body_pending=True)
    wal.close()
    (entry,) = recover(recorder)
    assert entry["request"]["body"] is None
    assert "body" in entry["response"]["error"] and "not recorded" in entry["response"]["error"]


def test_a_torn_last_record_from_a_crash_mid_write_is_skipped_not_fatal(recorder, tmp_path):
    wal = write_ahead_log_for(recorder)
    assert wal is not None
    wal.write(recorder.prepare_request(_send()))
    path = next((tmp_path / "vault" / WRITE_AHEAD_DIR).iterdir())
    wal.close()
    with open(path, "ab") as f:
        f.write(b'{"id": "torn')  # never acknowledged: its call never went upstream
    assert len(recover(recorder)) == 1


def test_a_database_store_has_no_write_ahead_log(tmp_path):
    class NoFiles:  # any writer that is not a file vault's (journal/store/README.md: a documented limitation)
        blobs = None

        def close(self) -> None:
            pass

        def append_many(self, batch):
            raise AssertionError

    r = Recorder.__new__(Recorder)
    r.writer = NoFiles()  # type: ignore[assignment]
    assert write_ahead_log_for(r) is None
