"""Issue 23 corpus: every credential sample in every carrier, recorded, then every file scanned.

At the Recorder level (fast): >= 200 generated samples over >= 40 shapes, each in headers, query, JSON at
depth and escaped in a JSON string, form, multipart, text, gzip / zlib / raw deflate / br / zstd bodies,
SSE, MCP arguments and results. Every file the vault holds afterwards is read and searched for each
secret as written raw, URL-encoded, JSON-escaped and in base64 at three alignments: none may be found.
The other way, ordinary API values (ids, hashes, UUIDs, base64 images) must survive: >= 99% of them.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from urllib.parse import quote, quote_plus

import brotli
import pytest
from backports import zstd

from journal.call import Call
from journal.record import Recorder
from tests.support.secret_samples import KEYWORD_NAMES, keyword_samples, ordinary_values, samples, written_forms

BASE = dict(session="s23", agent="corpus", principal="p", connector="test", capture="broker", effect="read")


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def _call(rec: Recorder, *, url: str = "https://api.example.com/v1/items", req_headers=(), req_body=b"",
          resp_headers=(), resp_body=b"", mcp=None) -> None:
    """One recorded call (the one place that knows the Recorder's call signature)."""
    rec.record(Call.make(**BASE, method="POST", url=url, request_headers=list(req_headers), request_body=req_body,
                         status=200, response_headers=list(resp_headers), response_body=resp_body, mcp=mcp))


def _carriers(text: str) -> list[dict]:
    """A standalone credential text in every place it can ride."""
    jt = {"a": {"b": [{"c": f"note: {text} end"}]}}
    boundary = "b23"
    multipart = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.txt\"\r\n"
                 f"Content-Type: text/plain\r\n\r\n{text}\r\n--{boundary}--\r\n").encode()
    sse_whole = f"event: message\ndata: {json.dumps({'text': text})}\n\n".encode()
    j = json.dumps(jt).encode()
    ctj = [("Content-Type", "application/json")]
    # A header cannot hold a line break: multi-line texts (PEM, INI) ride everywhere else.
    header = [] if "\n" in text else [dict(req_headers=[("X-Note", f"see {text}")])]
    return [
        *header,
        dict(url="https://api.example.com/v1/items?q=" + quote(text, safe="") + "&page=2"),
        dict(req_headers=ctj, req_body=j),
        dict(resp_headers=ctj, resp_body=json.dumps({"result": json.dumps(jt)}).encode()),
        dict(req_headers=[("Content-Type", "application/x-www-form-urlencoded")],
             req_body=("channel=C1&text=" + quote_plus(text)).encode()),
        dict(req_headers=[("Content-Type", f"multipart/form-data; boundary={boundary}")], req_body=multipart),
        dict(resp_headers=[("Content-Type", "text/plain")], resp_body=f"Here it is:\n{text}\nbye".encode()),
        dict(resp_headers=[*ctj, ("Content-Encoding", "gzip")], resp_body=gzip.compress(j)),
        dict(resp_headers=[*ctj, ("Content-Encoding", "deflate")], resp_body=zlib.compress(j)),
        dict(resp_headers=[("Content-Type", "text/plain"), ("Content-Encoding", "deflate")],
             resp_body=_raw_deflate(text.encode())),
        dict(resp_headers=[*ctj, ("Content-Encoding", "br")], resp_body=brotli.compress(j)),
        dict(resp_headers=[*ctj, ("Content-Encoding", "zstd")], resp_body=zstd.compress(j)),
        dict(resp_headers=[("Content-Type", "text/event-stream")], resp_body=sse_whole),
        dict(resp_headers=[("Content-Type", "application/octet-stream")], resp_body=text.encode()),
        dict(mcp={"method": "tools/call", "params": {"name": "save", "arguments": {"content": text}},
                  "result": {"content": [{"type": "text", "text": json.dumps({"saved": text})}]}}),
    ]


def _keyword_carriers(name: str, value: str) -> list[dict]:
    """A credential known by its name, in every place a name can ride."""
    ctj = [("Content-Type", "application/json")]
    obj = {"config": {"items": [{name: value, "region": "eu"}]}}
    return [
        dict(req_headers=ctj, req_body=json.dumps(obj).encode()),
        dict(resp_headers=ctj, resp_body=json.dumps({"text": json.dumps(obj)}).encode()),
        dict(url=f"https://api.example.com/v1/items?{quote(name)}={quote(value)}&page=2"),
        dict(req_headers=[("Content-Type", "application/x-www-form-urlencoded")],
             req_body=f"user=bob&{quote_plus(name)}={quote_plus(value)}".encode()),
        dict(req_headers=[("Content-Type", "multipart/form-data; boundary=k23")],
             req_body=f'--k23\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n--k23--\r\n'.encode()),
        dict(resp_headers=[("Content-Type", "text/plain")], resp_body=f"[profile]\n{name} = {value}\n".encode()),
        dict(resp_headers=[("Content-Type", "application/xml")], resp_body=f"<R><{name}>{value}</{name}></R>".encode()),
        dict(mcp={"method": "tools/call", "params": {"name": "cfg", "arguments": {name: value}},
                  "result": {"structuredContent": {name: value}}}),
    ]


def _files(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()]


def _found(files: list[bytes], needles: list[tuple[str, str]]) -> list[tuple[str, str]]:
    big = b"\n".join(files)
    return [(shape, needle) for shape, needle in needles if any(f in big for f in written_forms(needle))]


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str, str]]:
    return samples(per_shape=4)


def test_corpus_is_big_enough(corpus) -> None:
    assert len(corpus) >= 200
    assert len({shape for shape, _t, _n in corpus} | set(KEYWORD_NAMES)) >= 40


def test_no_sample_reaches_disk_in_any_carrier(tmp_path: Path, corpus) -> None:
    rec = Recorder(tmp_path / "vault", durable=False)
    needles: list[tuple[str, str]] = []
    for shape, text, needle in corpus:
        for kw in _carriers(text):
            _call(rec, **kw)
        needles.append((shape, needle))
    for name, value in keyword_samples():
        for kw in _keyword_carriers(name, value):
            _call(rec, **kw)
        needles.append((f"key {name}", value))
    rec.close()
    files = _files(tmp_path / "vault")
    assert files
    assert _found(files, needles) == []


def test_the_scan_finds_what_is_not_redacted(tmp_path: Path) -> None:
    """The scanner itself: a needle that is not a credential shape is found in every written form."""
    rec = Recorder(tmp_path / "vault", durable=False)
    for kw in _carriers("plain words NotASecretAtAll123"):
        _call(rec, **kw)
    rec.close()
    assert _found(_files(tmp_path / "vault"), [("plain", "NotASecretAtAll123")]) == [("plain", "NotASecretAtAll123")]


def test_ordinary_traffic_keeps_its_values(tmp_path: Path) -> None:
    values = ordinary_values()
    keys = ("id", "threadId", "etag", "data", "fileId", "nextPageToken", "historyId", "messageId", "name", "ts")
    body = {"items": [{keys[i % len(keys)]: v} for i, v in enumerate(values)]}
    text = "\n".join(f"{keys[i % len(keys)]} {v}" for i, v in enumerate(values)).encode()
    rec = Recorder(tmp_path / "vault", durable=False)
    _call(rec, resp_headers=[("Content-Type", "application/json")], resp_body=json.dumps(body).encode())
    _call(rec, resp_headers=[("Content-Type", "text/plain")], resp_body=text)
    _call(rec, url="https://api.example.com/v1/x?" + "&".join(f"v{i}={quote(v, safe='')}" for i, v in
                                                              enumerate(values[:60])))
    rec.close()
    stored = b"\n".join(_files(tmp_path / "vault"))
    kept = [v for v in values if json.dumps(v)[1:-1].encode() in stored]
    rate = 1 - len(kept) / len(values)
    print(f"false-positive rate over {len(values)} ordinary values: {rate:.2%}")
    assert len(kept) >= 0.99 * len(values), sorted(set(values) - set(kept))[:5]
