"""A session as an HTTP Archive (HAR 1.2), for Chrome DevTools, mitmproxy and other HAR readers.

Each entry whose call was an HTTP exchange (an http(s) URL) becomes one HAR entry, in seq order:
redacted values exactly as recorded, bodies as text (JSON bodies in their canonical form; bytes as
base64). Nothing is cut: a spilled body, or a spilled string inside a JSON body, is either inlined
from the blob store (`inline_blobs=True`, i.e. `--inline-blobs`) or named by the custom fields
`_blob` (a whole body: `{sha256, size, ref}`, `text` empty) and `_blobs` (strings inside a JSON body:
`[{path, sha256, size, ref}]`, `path` a JSON Pointer; the text holds the reference objects), with a
`comment` saying so. Every `content` has a `text` (empty for no body: HAR readers such as haralyzer
index it). An entry that was no HTTP exchange is still an entry, on a synthetic request (an MCP call
over stdio is `POST mcp+stdio://<connector>/<method>` with the JSON-RPC request as its body and the
JSON-RPC response as its content; `_journal.url` keeps the recorded URL) and is also listed in
`log._nonHttpEntries`. The messages of a WebSocket are listed in `_webSocketMessages` of their
handshake's entry (as Chrome and mitmproxy write them), not as entries of their own. Each entry and
message carries its `seq`, `hash` and `prev` in `_journal`, so `broker verify-export` can check the
chain in the file. Field mapping: docs/exports.md.
"""

from __future__ import annotations

import base64
import importlib.metadata
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from urllib.parse import parse_qsl, quote, urlsplit

import orjson

from journal.blobstore import is_ref_object
from journal.bodies import is_binary_type, is_json_type
from journal.canonical import canonical_bytes
from journal.entry import parse_ts
from journal.export.blob_text import BlobInliner
from journal.export.fixture import EntryTally, chain_verdict, iter_session_entries
from journal.export.recorded_body import (
    base64_bytes,
    header,
    http_request_view,
    inline_json,
    is_base64_body,
    read_blob,
    spilled_refs,
)
from journal.export.streamed_json import ArrayMark, Chunks, JsonSpool, streamed_document
from journal.reader import open_vault
from journal.vault import Vault
from journal.verify import verify_session

HAR_VERSION = "1.2"
CREATOR = "connector-broker"


def _version() -> str:
    try:
        return importlib.metadata.version("connector-broker")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def is_http_url(url: object) -> bool:
    return isinstance(url, str) and url.split(":", 1)[0].lower() in ("http", "https")


_HOST_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_HOST_PORT = re.compile(r"([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})")


def har_url(entry: dict) -> str:
    """The URL a HAR reader is given for an entry: the recorded one when it is http(s); else a synthetic
    one that every HAR reader parses (docs/exports.md, "Entries that were no HTTP exchange"):
    `mcp+stdio://<connector>/<method>` for an MCP call over stdio, `https://host:port/` for a refused
    CONNECT (recorded as `host:port`), `broker+other://<connector>/` for anything else."""
    req = entry.get("request") or {}
    url = req.get("url")
    if is_http_url(url):
        return str(url)
    connector = str(entry.get("connector") or "")
    host = connector if _HOST_LABEL.fullmatch(connector) else "unnamed"
    if entry.get("capture") == "gateway" and isinstance(url, str) and url.startswith("stdio:"):
        mcp = entry.get("mcp")
        method = mcp.get("method") if isinstance(mcp, dict) else None
        method = method if isinstance(method, str) else str(req.get("method"))
        return f"mcp+stdio://{host}/{quote(method, safe='/')}"
    if req.get("method") == "CONNECT" and isinstance(url, str) and (m := _HOST_PORT.fullmatch(url)):
        return f"https://{m.group(1)}:{m.group(2)}/"
    return f"broker+other://{host}/"


def _mime_type(body: object, content_type: str | None, text: str, inline_blobs: bool | BlobInliner = False) -> str:
    """HAR `mimeType` of a body: the declared Content-Type, except a JSON type on a text that is not JSON
    (a body recorded as text because it did not parse strictly, or a blob spilled whole as it streamed,
    inlined): `text/plain`, so readers that parse JSON-typed text (har2requests) are not handed what is
    not JSON. The declared type stays in the headers."""
    if isinstance(inline_blobs, BlobInliner) and (keep := inline_blobs.keeps_type(text)) is not None:
        return content_type or "" if keep else "text/plain; charset=utf-8"  # a blob inlined as it streams
    if text and is_json_type(content_type) and (isinstance(body, str) or is_ref_object(body)):
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError:
            return "text/plain; charset=utf-8"
    return content_type or ""


def _text_of(data: bytes, content_type: str | None) -> tuple[str, str | None]:
    """(text, encoding) for HAR: UTF-8 text as itself, anything else as base64."""
    if not is_binary_type(content_type):
        try:
            return data.decode("utf-8"), None
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "base64"


def har_body(body: object, content_type: str | None, vault: Vault, inline_blobs: bool | BlobInliner) -> dict:
    """The HAR view of one recorded body: `text`, `encoding`, `size` and the `_blob`/`_blobs` fields.

    `size` is the byte length of the body (for a spilled body not inlined, the blob's: its `text` is
    then empty). `text` is always there, `""` for no body. With a BlobInliner (the streamed export), a
    body spilled whole has a placeholder for its text, which the writer replaces chunk by chunk.
    """
    out: dict = {}
    if body is None:
        out.update(size=0, text="")
        return out
    if is_ref_object(body):
        if isinstance(inline_blobs, BlobInliner):
            text, encoding = inline_blobs.view(body, content_type)  # type: ignore[arg-type]
            out.update(text=text, size=body["size"])  # type: ignore[index]
            if encoding:
                out["encoding"] = encoding
        elif inline_blobs:
            text, encoding = _text_of(read_blob(vault, body), content_type)  # type: ignore[arg-type]
            out.update(text=text, size=body["size"])  # type: ignore[index]
            if encoding:
                out["encoding"] = encoding
        else:
            out.update(size=body["size"], text="", _blob=body)  # type: ignore[index]
            out["comment"] = (
                f"body spilled to the blob store ({body['size']} bytes): see _blob, "  # type: ignore[index]
                "or export with --inline-blobs"
            )
        return out
    if isinstance(body, str):
        out.update(text=body, size=len(body.encode("utf-8", "surrogatepass")))
        return out
    if is_base64_body(body, content_type):
        data = base64_bytes(body)  # type: ignore[arg-type]
        out.update(text=body["base64"], encoding="base64", size=len(data))  # type: ignore[index]
        return out
    refs = spilled_refs(body)
    if refs and inline_blobs:
        data = canonical_bytes(inline_json(body, vault))
    else:
        data = canonical_bytes(body)
        if refs:
            out["_blobs"] = [{"path": p, **r} for p, r in refs]
            out["comment"] = (
                f"{len(refs)} string value(s) spilled to the blob store: see _blobs, or export with --inline-blobs"
            )
    out.update(text=data.decode("utf-8"), size=len(data))
    return out


def _headers(pairs: list) -> list[dict]:
    return [{"name": str(p[0]), "value": str(p[1])} for p in pairs or () if isinstance(p, list) and len(p) == 2]


def _query(url: str) -> list[dict]:
    return [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)]


def _request(entry: dict, vault: Vault, inline_blobs: bool | BlobInliner) -> dict:
    method, _, headers, body, ctype = http_request_view(entry)
    url = har_url(entry)
    har = {
        "method": method, "url": url, "httpVersion": "", "cookies": [], "headers": _headers(headers),
        "queryString": _query(url), "headersSize": -1, "bodySize": -1 if body is not None else 0,
    }
    if body is not None:
        view = har_body(body, ctype, vault, inline_blobs)
        text = view.pop("text", "")
        post = {"mimeType": _mime_type(body, ctype, text, inline_blobs), "text": text}
        if view.pop("encoding", None):
            post["_encoding"] = "base64"  # HAR 1.2 has no encoding for postData
        post.update({k: v for k, v in view.items() if k != "size"})
        har["postData"] = post
    return har


def _response(entry: dict, vault: Vault, inline_blobs: bool | BlobInliner) -> dict:
    resp = entry["response"]
    headers = resp.get("headers") or []
    status = resp.get("status")
    ctype = header(headers, "content-type")
    if entry.get("capture") == "gateway":
        ctype = ctype or "application/json"
    try:
        reason = HTTPStatus(status).phrase if isinstance(status, int) else ""
    except ValueError:
        reason = ""
    view = har_body(resp.get("body"), ctype, vault, inline_blobs)
    content = {"mimeType": _mime_type(resp.get("body"), ctype, view.get("text", ""), inline_blobs), **view}
    har = {
        "status": status if isinstance(status, int) else 0, "statusText": reason, "httpVersion": "",
        "cookies": [], "headers": _headers(headers), "content": content,
        "redirectURL": header(headers, "location") or "", "headersSize": -1, "bodySize": -1,
        "_transferSize": -1,  # Chrome's field; haralyzer's transfer sizes index it
    }
    if resp.get("error") is not None:
        har["_error"] = str(resp["error"])
    if resp.get("answered_by") is not None:
        har["_answeredBy"] = resp["answered_by"]
    return har


def har_entry(entry: dict, vault: Vault, inline_blobs: bool | BlobInliner = False) -> dict:
    """One journal entry (an HTTP exchange) as a HAR entry."""
    out = {
        "startedDateTime": entry["ts"], "time": 0,
        "request": _request(entry, vault, inline_blobs), "response": _response(entry, vault, inline_blobs),
        "cache": {}, "timings": {"send": 0, "wait": 0, "receive": 0},
        "comment": f"seq {entry['seq']}: {entry['connector']} {entry['effect']} ({entry['capture']} capture); "
                   "startedDateTime is when the response was recorded",
        "_journal": {
            k: entry.get(k) for k in ("session", "seq", "hash", "prev", "agent", "principal", "connector", "effect",
                                      "capture", "prompt_ref")
        },
    }
    if out["request"]["url"] != entry["request"].get("url"):
        out["_journal"]["url"] = entry["request"].get("url")
    if entry.get("mcp") is not None:
        out["_mcp"] = entry["mcp"]
    if entry["request"].get("playback_of") is not None:
        out["_journal"]["playback_of"] = entry["request"]["playback_of"]
    return out


_OPCODES = {"text": 1, "binary": 2, "close": 8, "ping": 9, "pong": 10}


def websocket_message(entry: dict, ws: dict, vault: Vault, inline_blobs: bool | BlobInliner) -> dict:
    """A WebSocket message entry (docs/contract.md section 8) as an item of its handshake's
    `_webSocketMessages`, the shape Chrome DevTools and mitmproxy write: `type` send/receive, `time`
    (epoch seconds), `opcode`, `data`; plus the entry's seq, hash and effect, and `_blob` for a spilled payload."""
    sent = ws.get("direction") == "client_to_server"
    part = entry["request"] if sent else entry["response"]
    kind = ws.get("kind")
    body = har_body(part.get("body"), "application/octet-stream" if kind == "binary" else "application/json",
                    vault, inline_blobs)
    if kind == "close":
        data = f"{ws.get('close_code')} {ws.get('close_reason') or ''}".strip()
    else:
        data = body.get("text", "")
    out: dict = {"type": "send" if sent else "receive", "time": parse_ts(entry["ts"]).timestamp(),
                 "opcode": _OPCODES.get(str(kind), 1), "data": data,
                 "_journal": {"seq": entry.get("seq"), "hash": entry.get("hash"), "prev": entry.get("prev"),
                              "effect": entry.get("effect")}}
    for key in ("_blob", "_blobs"):
        if key in body:
            out[key] = body[key]
    return out


class WebSocketHold:
    """The HAR entries that wait for WebSocket messages still to come, kept on disk.

    A message is written inside its handshake's entry (`_webSocketMessages`), and may come any number of
    entries later; so from the first handshake on, entries are held back (with their order) and messages
    put beside their handshake, both in a private temporary SQLite database, and written out at the end.
    In memory: one map from handshake hash to its row, one key per WebSocket connection (not per entry
    or message), which is what bounds it."""

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        self.handshakes: dict[str, int] = {}  # a handshake entry's hash -> its row in `held`

    def __contains__(self, handshake: object) -> bool:
        return isinstance(handshake, str) and handshake in self.handshakes

    @property
    def holding(self) -> bool:
        return self._db is not None

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect("")  # "": a private database in a temporary file, gone when closed
            self._db.execute("CREATE TABLE held (row INTEGER PRIMARY KEY, entry BLOB, handshake INTEGER)")
            self._db.execute("CREATE TABLE messages (handshake INTEGER, message BLOB)")
            self._db.execute("CREATE INDEX messages_of ON messages (handshake)")
        return self._db

    def hold(self, entry: dict, handshake: str | None = None) -> None:
        """Keep a HAR entry back; `handshake`: its hash, when messages may join it."""
        db = self._open()
        row = db.execute("INSERT INTO held (entry, handshake) VALUES (?, ?)",
                         (orjson.dumps(entry), 1 if handshake else 0)).lastrowid
        if handshake is not None and row is not None:
            self.handshakes[handshake] = row

    def add_message(self, handshake: str, message: dict) -> None:
        self._open().execute("INSERT INTO messages (handshake, message) VALUES (?, ?)",
                             (self.handshakes[handshake], orjson.dumps(message, option=orjson.OPT_INDENT_2)))

    def release(self) -> Iterator[object]:
        """The held entries in order, each handshake with its messages (streamed: `Chunks`)."""
        if self._db is None:
            return
        last = 0
        while True:  # a page at a time: the cursor is not held open across yields of other queries
            rows = self._db.execute("SELECT row, entry, handshake FROM held WHERE row > ? ORDER BY row LIMIT 256",
                                    (last,)).fetchall()
            if not rows:
                return
            for row, data, handshake in rows:
                last = row
                entry = orjson.loads(data)
                if handshake and self._db.execute("SELECT 1 FROM messages WHERE handshake = ? LIMIT 1",
                                                  (row,)).fetchone():
                    yield Chunks(self._with_messages(entry, row))
                else:
                    yield entry

    def _with_messages(self, entry: dict, row: int) -> Iterator[bytes]:
        mark = ArrayMark("_webSocketMessages")
        entry["_webSocketMessages"] = mark.value  # the last key, as when the messages were appended to it
        yield from streamed_document(lambda: entry, [(mark, self._messages(row))], newline=False)

    def _messages(self, row: int) -> Iterator[Chunks]:
        assert self._db is not None
        last = 0
        while True:
            page = self._db.execute("SELECT rowid, message FROM messages WHERE handshake = ? AND rowid > ? "
                                    "ORDER BY rowid LIMIT 256", (row, last)).fetchall()
            if not page:
                return
            last = page[-1][0]
            for _, message in page:
                yield Chunks([message])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _har_items(entries: Iterable[dict], vault: Vault, inline_blobs: bool | BlobInliner, other: JsonSpool,
               hold: WebSocketHold) -> Iterator[object]:
    """The `log.entries` of a session as its entries stream past (see WebSocketHold for the handshakes)."""
    for e in entries:
        req = e.get("request") or {}
        ws = req.get("websocket")
        if req.get("method") == "WEBSOCKET" and isinstance(ws, dict) and ws.get("handshake") in hold:
            hold.add_message(ws["handshake"], websocket_message(e, ws, vault, inline_blobs))
            continue
        item = har_entry(e, vault, inline_blobs)
        handshake = None
        if is_http_url(req.get("url")):
            if isinstance(e.get("hash"), str) and (e.get("response") or {}).get("status") == 101:
                handshake = e["hash"]
        else:
            other.add({k: req.get(k) if k in ("method", "url") else e.get(k)
                       for k in ("seq", "hash", "capture", "connector", "method", "url")})
        if handshake is not None or hold.holding:
            hold.hold(item, handshake)
        else:
            yield item
    yield from hold.release()


def har_chunks(vault_root: Vault | str | os.PathLike, session: str, *, inline_blobs: bool = False
               ) -> Iterator[bytes]:
    """The HAR 1.2 document of one session (see the module docstring) as the CLI writes it (pretty JSON
    and a newline), a piece at a time: the chain is verified first (a streaming pass), then each entry is
    written as it is read. Memory holds an entry, not the session; a body spilled whole and inlined is
    written a chunk at a time (journal/export/blob_text.py)."""
    vault = open_vault(vault_root)
    inliner = BlobInliner(vault) if inline_blobs else None
    report = verify_session(vault, session).as_dict()
    tally = EntryTally()
    hold = WebSocketHold()
    with JsonSpool() as other, JsonSpool() as unparsed:
        entries, others, lines = ArrayMark("entries"), ArrayMark("_nonHttpEntries"), ArrayMark("_unparsedLines")

        def template() -> dict:
            comment = f"session {session}: {tally.entries} entries, chain {chain_verdict(report)}"
            if len(other):
                comment += (f"; {len(other)} not HTTP exchanges (listed in _nonHttpEntries), each an entry on a "
                            "synthetic URL (mcp+stdio://...)")
            log = {
                "version": HAR_VERSION, "creator": {"name": CREATOR, "version": _version()},
                "entries": entries.value, "comment": comment,
                "_session": session, "_chain": {"verdict": chain_verdict(report), **report},
                "_sessionHead": {"entries": tally.entries, "head": tally.head if tally.entries else None},
                "_nonHttpEntries": others.value, "_unparsedLines": lines.value,
            }
            return {"log": log}

        try:
            yield from streamed_document(template, [
                (entries, _har_items(iter_session_entries(vault, session, unparsed.add, tally, report), vault,
                                     inliner or False, other, hold)),
                (others, other), (lines, unparsed),
            ], expand=inliner.expand if inliner is not None else None)
        finally:
            hold.close()


def build_har(vault_root: Vault | str | os.PathLike, session: str, *, inline_blobs: bool = False) -> dict:
    """The HAR 1.2 document of one session as a value (held whole: `har_chunks` writes a big one)."""
    return orjson.loads(b"".join(har_chunks(vault_root, session, inline_blobs=inline_blobs)))
