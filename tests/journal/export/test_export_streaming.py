"""Exports stream (issue 26): every format is written a piece at a time from entries read one by one, gives
the bytes the whole document would, and `broker verify-export` reads a big export a value at a time."""

from __future__ import annotations

import io
import random
import tracemalloc

import orjson
import pytest

import journal.export.json_walk as json_walk
from journal.export import fixture, har, ocsf, otel, vcr
from journal.export.verify_export import verify_export
from journal.vault import Vault
from tests.support.export_factories import (
    ALL_KINDS,
    chained_session,
    generated_session,
    http_fields,
)

ALL = ALL_KINDS
INDENT = orjson.OPT_INDENT_2


def _ws_message(n: int, handshake: str, message: int, direction: str) -> dict:
    e = http_fields(n, "wss://api.example.com/socket")
    e["request"] = {"method": "WEBSOCKET", "url": "wss://api.example.com/socket", "headers": [],
                    "body": {"say": message} if direction == "client_to_server" else None,
                    "websocket": {"handshake": handshake, "direction": direction, "kind": "text", "message": message}}
    e["response"] = {"status": None, "headers": [],
                     "body": {"heard": message} if direction == "server_to_client" else None}
    return e


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    """Two WebSocket connections whose messages interleave with each other and with plain calls, a non-HTTP
    entry among them, and an unparseable line: every piece of cross-entry state the HAR export keeps."""
    root = tmp_path_factory.mktemp("ws")
    session = "ws-interleaved"
    fields: list[dict] = [http_fields(1)]
    chained_session(root, session, [*fields, http_fields(2, status=101)])  # to learn the handshake's hash
    first = orjson.loads(Vault.open_existing(root).session_path(session).read_bytes().splitlines()[1])["hash"]
    fields.append(http_fields(2, status=101))
    fields.append(_ws_message(3, first, 1, "client_to_server"))
    fields.append(http_fields(4))
    stdio = http_fields(5)
    stdio.update(capture="gateway", request={"method": "tools/call", "url": "stdio:notes", "headers": [], "body": {}})
    fields.append(stdio)
    fields.append(_ws_message(6, first, 2, "server_to_client"))
    fields.append(http_fields(7))
    chained_session(root, session, fields)
    return root, session


def _with_line(root, session: str, line: bytes) -> None:
    path = Vault.open_existing(root).session_path(session)
    path.write_bytes(path.read_bytes() + line)


# -- the bytes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("session", ALL)
def test_streamed_bytes_are_the_whole_documents_bytes(vault, session):
    """Each streamed export is exactly what serializing its whole document gives (what the exports wrote
    before they streamed: `orjson.dumps(doc, OPT_INDENT_2)`, `yaml.dump(cassette)`, a line per event)."""
    for inline in (False, True):
        data = b"".join(har.har_chunks(vault, session, inline_blobs=inline))
        assert data == orjson.dumps(orjson.loads(data), option=INDENT) + b"\n"
    for content in (False, True):
        data = b"".join(otel.otlp_chunks(vault, session, content=content))
        assert data == orjson.dumps(orjson.loads(data), option=INDENT) + b"\n"
    data = b"".join(fixture.fixture_chunks(vault, session))
    assert data == fixture.fixture_bytes(orjson.loads(data))
    assert b"".join(vcr.cassette_chunks(vault, session)) == vcr.cassette_yaml(vcr.build_cassette(vault, session))
    lines = b"".join(ocsf.ocsf_chunks(vault, session)).splitlines()
    assert [orjson.loads(x) for x in lines] == list(ocsf.iter_ocsf(vault, session))
    assert all(x == orjson.dumps(orjson.loads(x)) for x in lines)


def test_websocket_messages_wait_for_their_handshake(interleaved):
    """Messages that come after later entries still land in their handshake's entry, in order; the
    entries after the handshake keep their places; a non-HTTP entry is listed; an unparsed line too."""
    root, session = interleaved
    _with_line(root, session, b"not json\n")
    data = b"".join(har.har_chunks(root, session))
    assert data == orjson.dumps(orjson.loads(data), option=INDENT) + b"\n"
    log = orjson.loads(data)["log"]
    assert [e["_journal"]["seq"] for e in log["entries"]] == [1, 2, 4, 5, 7]
    assert [m["_journal"]["seq"] for m in log["entries"][1]["_webSocketMessages"]] == [3, 6]
    assert [m["type"] for m in log["entries"][1]["_webSocketMessages"]] == ["send", "receive"]
    assert [o["seq"] for o in log["_nonHttpEntries"]] == [5]
    assert log["_unparsedLines"] == [8]
    assert log["_sessionHead"]["entries"] == 7
    assert log["comment"].startswith(f"session {session}: 7 entries, chain ")


# -- streaming --------------------------------------------------------------------------------------


class _Counted:
    """An entry source that counts what it has handed out, standing in for iter_session_entries."""

    def __init__(self, real) -> None:
        self.real, self.drawn = real, 0

    def __call__(self, *args, **kwargs):
        for e in self.real(*args, **kwargs):
            self.drawn += 1
            yield e


WRITERS = {
    "har": (har, lambda root, s: har.har_chunks(root, s)),
    "otel": (otel, lambda root, s: otel.otlp_chunks(root, s)),
    "ocsf": (ocsf, lambda root, s: ocsf.ocsf_chunks(root, s)),
    "vcr": (vcr, lambda root, s: vcr.cassette_chunks(root, s)),
    "fixture": (fixture, lambda root, s: fixture.fixture_chunks(root, s)),
}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_an_export_writes_before_its_last_entry_is_read(tmp_path, monkeypatch, fmt):
    """The writer hands out the first entry's bytes while most entries are still unread (passes that only
    count or verify come first; the pass that writes draws an entry, then writes it)."""
    module, chunks = WRITERS[fmt]
    session = generated_session(tmp_path, 400)
    counted = _Counted(fixture.iter_session_entries)
    monkeypatch.setattr(module, "iter_session_entries", counted)
    monkeypatch.setattr(fixture, "iter_session_entries", counted)  # the passes that read again what was counted
    marker = b"https://api.example.com/items/1" if fmt != "ocsf" else b'"sequence":1,'
    drawn_when_written = None
    total = 0
    for piece in chunks(tmp_path, session):
        total += len(piece)
        if drawn_when_written is None and marker in piece:
            drawn_when_written = counted.drawn
    assert drawn_when_written is not None
    passes = counted.drawn // 400
    assert drawn_when_written < (passes - 1) * 400 + 400 // 2, (drawn_when_written, counted.drawn)


def test_export_memory_stays_far_below_the_export(tmp_path):
    """Peak memory allocated while exporting (and verifying the export) is a small fraction of the
    bytes exported: it holds an entry, not the session (a ratio of sizes, not a timing)."""
    session = generated_session(tmp_path, 3000)
    for name, chunks in (("har", har.har_chunks), ("otel", otel.otlp_chunks)):
        out = tmp_path / f"export.{name}"
        tracemalloc.start()
        try:
            with open(out, "wb") as f:
                for piece in chunks(tmp_path, session):
                    f.write(piece)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        size = out.stat().st_size
        assert size > 5_000_000
        assert peak < size / 4, (name, peak, size)  # the whole document held took several times its size
        tracemalloc.start()
        try:
            verdict = verify_export(out)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert verdict.ok and verdict.events == 3000
        assert peak < size / 4, (name, "verify-export", peak, size)


def test_a_session_growing_between_passes_is_exported_as_counted(tmp_path, monkeypatch):
    """A session still being written gains an entry after the pass that counted it: the events written
    next stop at what was counted, so the export agrees with itself and verify-export passes it."""
    chained_session(tmp_path, "growing", [http_fields(i) for i in range(1, 11)])
    path = Vault.open_existing(tmp_path).session_path("growing")
    short = path.read_bytes()
    chained_session(tmp_path, "growing", [http_fields(i) for i in range(1, 12)])
    longer = path.read_bytes()
    path.write_bytes(short)
    real = fixture.iter_session_entries

    def grows(*args, **kwargs):
        yield from real(*args, **kwargs)
        path.write_bytes(longer)  # appended once the first pass has read to the end

    monkeypatch.setattr(ocsf, "iter_session_entries", grows)
    out = tmp_path / "s.jsonl"
    out.write_bytes(b"".join(ocsf.ocsf_chunks(tmp_path, "growing")))
    events = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert len(events) == 10 and {e["unmapped"]["broker"]["session_entries"] for e in events} == {10}
    assert verify_export(out).ok


# -- tampering --------------------------------------------------------------------------------------


def test_a_tampered_session_is_flagged_as_before(tmp_path):
    session = generated_session(tmp_path, 20)
    path = Vault.open_existing(tmp_path).session_path(session)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[9] = lines[9].replace(b'"status":200', b'"status":201')
    path.write_bytes(b"".join(lines))
    log = orjson.loads(b"".join(har.har_chunks(tmp_path, session)))["log"]
    assert not log["_chain"]["intact"] and log["_chain"]["broken_at_seq"] == 10
    assert "broken at seq 10" in log["comment"]
    root = orjson.loads(b"".join(otel.otlp_chunks(tmp_path, session)))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert root["status"]["message"].startswith("chain broken at seq 10")
    assert b"chain broken at seq 10" in b"".join(vcr.cassette_chunks(tmp_path, session)).splitlines()[0]


# -- verify-export of a big export ------------------------------------------------------------------


@pytest.mark.parametrize("whole", [1 << 20, 60])
def test_verify_export_walks_inside_big_entries(interleaved, tmp_path, monkeypatch, whole):
    """With entries bigger than what is parsed whole, the walk goes inside them (a WebSocket connection's
    messages one at a time) and finds what a whole parse finds: intact, and a dropped message."""
    monkeypatch.setattr(json_walk, "_WHOLE", whole)
    monkeypatch.setattr(json_walk, "_READ", 64)
    root, session = interleaved
    doc = orjson.loads(b"".join(har.har_chunks(root, session)))
    out = tmp_path / "s.har"
    out.write_bytes(orjson.dumps(doc, option=INDENT))
    verdict = verify_export(out)
    assert verdict.ok and verdict.events == 7, verdict
    del doc["log"]["entries"][1]["_webSocketMessages"][0]
    out.write_bytes(orjson.dumps(doc))
    assert "seq 4: dropped: seq 3 missing" in str(verify_export(out).problem)
    spans = b"".join(otel.otlp_chunks(root, session))
    out.write_bytes(spans)
    assert verify_export(out).ok


DOCS = [b'{"a": [1, 2, {"b": "x\\"]}"}], "c": null}', b"[]", b"{}", b' [ 1 , "a\\\\" , [ ] ] ', b'"s"', b"12",
        b"[1,,2]", b'{"a" 1}', b"[1 2]", b'{"a":1,}', b"[", b'{"a": "open}', b"[1]x", b"[1] [2]", b'{"a":tru}',
        orjson.dumps({"log": {"entries": [{"x": "y" * 50, "n": [1, {"\u00e9": "\\n"}]}] * 5}}, option=INDENT)]


def _walked(data: bytes) -> object:
    walk = json_walk.JsonWalk(io.BytesIO(data))

    def value() -> object:
        if walk.peek() == b"[":
            return [value() for _ in walk.elements()]
        if walk.peek() == b"{":
            return {k: value() for k in walk.members()}
        return walk.value()

    try:
        got = value()
        return got if walk.at_end() else "refused"
    except json_walk.NotJson:
        return "refused"


def test_the_walk_accepts_what_orjson_accepts(monkeypatch):
    """Walked a few bytes at a time, through damaged copies too, the walk reads the value orjson reads and
    refuses what orjson refuses."""
    monkeypatch.setattr(json_walk, "_READ", 5)
    rng = random.Random(7)
    cases = list(DOCS)
    for _ in range(1500):
        d = bytearray(rng.choice(DOCS))
        for _ in range(rng.randrange(1, 3)):
            i = rng.randrange(len(d))
            d[i:i + 1] = bytes([rng.choice(b'{}[]",: a1\\')])
        cases.append(bytes(d))
    for data in cases:
        try:
            want: object = orjson.loads(data)
        except orjson.JSONDecodeError:
            want = "refused"
        assert _walked(data) == want, data


# -- inlined blobs, a chunk at a time ---------------------------------------------------------------

TEXT = ('é€😀 "quoted" back\\slash\ttab\nline\x01 ' * 40).encode()


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    """Bodies spilled whole of every kind the HAR inlines: UTF-8 text (characters of 2 to 4 bytes, escapes),
    bytes declared binary, bytes declared text that are no UTF-8, JSON-typed text that is no JSON, and a
    spilled request body."""
    from journal.call import Call
    from journal.record import Recorder

    root = tmp_path_factory.mktemp("blobs")
    rec = Recorder(root, spill_threshold=200)
    common = {"session": "blobs", "agent": "bot/1", "principal": "alice@example.com", "capture": "broker",
              "connector": "files", "effect": "read", "status": 200, "request_headers": [], "request_body": None}
    bodies = [("text/plain; charset=utf-8", TEXT), ("application/octet-stream", bytes(range(256)) * 5),
              ("text/plain", b"\xff\xfe not utf-8 " * 30), ("application/json", b"{not json " + b"x" * 400)]
    for n, (ctype, body) in enumerate(bodies):
        rec.record(Call.make(**common, method="GET", url=f"https://files.example.com/{n}",
                             response_headers=[("Content-Type", ctype)], response_body=body))
    rec.record(Call.make(**{**common, "effect": "write", "request_headers": [("Content-Type", "text/plain")],
                            "request_body": TEXT}, method="PUT", url="https://files.example.com/up",
                         response_headers=[], response_body=None))
    rec.close()
    return root


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_inlined_blobs_stream_to_the_same_entries(blobs, monkeypatch, chunk):
    """Read a few bytes at a time (characters cut between chunks, base64 groups cut), each inlined body
    comes out as reading the blob whole gives it: text, encoding, mimeType and size."""
    from journal.blobstore import is_ref_object
    from journal.export import recorded_body

    monkeypatch.setattr(recorded_body, "BLOB_CHUNK", chunk)
    data = b"".join(har.har_chunks(blobs, "blobs", inline_blobs=True))
    assert data == orjson.dumps(orjson.loads(data), option=INDENT) + b"\n"
    streamed = orjson.loads(data)["log"]["entries"]
    recorded = list(fixture.iter_session_entries(Vault.open_existing(blobs), "blobs"))
    spilled = [e for e in recorded if is_ref_object(e["response"]["body"]) or is_ref_object(e["request"]["body"])]
    assert len(spilled) == 5
    vault = Vault.open_existing(blobs)
    assert streamed == [har.har_entry(e, vault, True) for e in recorded]  # the whole-blob reading
    kinds = [(e["response"]["content"].get("encoding"), e["response"]["content"]["mimeType"]) for e in streamed]
    assert kinds[:4] == [(None, "text/plain; charset=utf-8"), ("base64", "application/octet-stream"),
                         ("base64", "text/plain"), (None, "text/plain; charset=utf-8")]
    assert streamed[0]["response"]["content"]["text"].encode() == TEXT
    assert streamed[4]["request"]["postData"]["text"].encode() == TEXT


def test_an_inlined_blob_is_not_held_whole(tmp_path):
    """A body of 24 MB spilled whole and inlined: the export's peak allocation stays a fraction of it."""
    from journal.call import Call
    from journal.record import Recorder

    rec = Recorder(tmp_path, spill_threshold=200)
    body = ("0123456789abcdef" * 4096 + "\n").encode() * 384  # 24 MB of text
    rec.record(Call.make(session="huge", agent="bot/1", principal="alice@example.com", capture="broker",
                         connector="files", effect="read", status=200, method="GET", url="https://files.example.com/h",
                         request_headers=[], request_body=None, response_headers=[("Content-Type", "text/plain")],
                         response_body=body))
    rec.close()
    del body
    tracemalloc.start()
    try:
        size = sum(len(piece) for piece in har.har_chunks(tmp_path, "huge", inline_blobs=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 24_000_000
    assert peak < size / 4, (peak, size)
