"""A session as a VCR.py cassette (YAML, `version: 1`, `interactions`), so a test can play it back.

Playback needs every byte, so spilled bodies are always inlined from the blob store. What changes
from the record, so that a client reading the cassette sees a consistent message:

- the body is the decoded body (the recorder decodes content-encodings), so `Content-Encoding`,
  `Content-Length` and `Transfer-Encoding` are dropped and a `Content-Length` matching the body is
  set (unless the body did not decode when recorded: then it is kept as received, with its header);
- a JSON body comes back in its canonical form (the record holds the value, not the wire bytes);
- a call that got no answer (`response.status` null) becomes `502` with the recorded error as its
  body, what an agent behind the broker was answered;
- entries that were no HTTP exchange (MCP over stdio) have no interaction: the header comment and
  the top-level `connector_broker` key (which vcrpy ignores) list them.

A body spilled whole to a blob over BIG_BODY is written as `!!binary` a chunk at a time (`BigBodies`): memory
holds a piece of it, whatever its size.

Redacted values stay as recorded (`[never captured]`), in URLs and headers alike. Each interaction
carries a `journal` key (session, seq, hash), which vcrpy ignores.
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Iterable, Iterator
from http import HTTPStatus

import yaml

from journal.export.fixture import EntryTally, chain_verdict, counted_entries, iter_session_entries
from journal.export.har import is_http_url
from journal.export.recorded_body import body_bytes, body_kind, header, http_request_view, iter_blob
from journal.export.streamed_json import JsonSpool
from journal.reader import open_vault
from journal.vault import Vault
from journal.verify import verify_session

CASSETTE_FORMAT_VERSION = 1
_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def _headers(pairs: list, *, keep_framing: bool) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in (p for p in pairs or () if isinstance(p, list) and len(p) == 2):
        if not keep_framing and str(name).lower() in _FRAMING:
            continue
        out.setdefault(str(name), []).append(str(value))
    return out


def _yaml_body(data: bytes) -> str | bytes:
    """Text as a YAML string (readable), other bytes as bytes (YAML `!!binary`)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


BIG_BODY = 1 << 20
"""A body spilled whole to a blob bigger than this is written as `!!binary` (base64 in lines of 76, which can be
written a chunk at a time), text or not: `cassette_chunks` never holds it whole (`BigBodies`)."""


class BigBodies:
    """Whole-body blobs over BIG_BODY of one cassette, written a chunk at a time (issue 26: memory holds a chunk).

    `value` reads the blob through once (its SHA-256 checked before anything is written, its size counted) and
    gives a small placeholder in the body's place: bytes whose base64 is one line no recorded body can hold
    (a nonce made for this cassette). The emitter writes it as the one line of a `!!binary |` block; `expand`
    replaces that line with the blob's base64 lines at its indentation, read again a chunk at a time: the
    bytes `yaml.dump` writes for the whole body as bytes (`base64.encodebytes`, 57 bytes a line)."""

    _PIECE = 57 * 2048  # bytes read and written at a time: 2,048 whole base64 lines

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self._nonce = secrets.token_bytes(12)
        self._refs: dict[bytes, dict] = {}  # a placeholder's base64 line -> its blob reference
        self._count = 0
        self._carry = b""

    def value(self, ref: dict) -> tuple[bytes, int]:
        """(placeholder, the blob's size) for a whole-body blob reference (BlobUnavailable: missing, or not the
        bytes its name says)."""
        size = sum(len(chunk) for chunk in iter_blob(self.vault, ref))
        self._count += 1
        placeholder = b"\x00vcr:" + self._nonce + self._count.to_bytes(8, "big") + bytes.fromhex(ref["sha256"])
        self._refs[base64.b64encode(placeholder)] = ref  # 57 bytes: one base64 line of 76
        return placeholder, size

    def expand(self, chunk: bytes, final: bool = False) -> Iterator[bytes]:
        """The emitter's output with each placeholder line written out as its blob's lines; whole lines only, the
        rest kept for the next call (`final`: everything)."""
        data = self._carry + chunk
        cut = len(data) if final else data.rfind(b"\n") + 1
        self._carry, data = data[cut:], data[:cut]
        done = 0
        while self._refs:
            hits = [(at, key) for key in self._refs if (at := data.find(key, done)) >= 0]
            if not hits:
                break
            at, key = min(hits)
            line = data.rfind(b"\n", 0, at) + 1
            indent, end = data[line:at], at + len(key)
            if indent.strip(b" ") or data[end : end + 1] != b"\n":
                raise AssertionError("a body placeholder not on a line of its own")
            yield data[done:line]
            yield from self._lines(self._refs.pop(key), indent)
            done = end + 1
        if done < len(data):
            yield data[done:]

    def _lines(self, ref: dict, indent: bytes) -> Iterator[bytes]:
        """The blob's base64 as `base64.encodebytes` cuts it, each line after `indent`, a piece at a time."""
        carry = b""
        for chunk in iter_blob(self.vault, ref, self._PIECE):
            carry += chunk
            cut = len(carry) - len(carry) % 57
            if cut:
                yield self._indented(carry[:cut], indent)
                carry = carry[cut:]
        if carry:
            yield self._indented(carry, indent)

    @staticmethod
    def _indented(data: bytes, indent: bytes) -> bytes:
        lines = base64.encodebytes(data).splitlines(keepends=True)
        return b"".join(indent + line for line in lines)


def interaction(entry: dict, vault: Vault, big: BigBodies | None = None) -> dict:
    """One journal entry (an HTTP exchange) as a VCR.py interaction. `big`: whole-body blobs over BIG_BODY
    stand as its placeholders (cassette_chunks); without it they are read whole, as bytes all the same."""
    method, url, req_headers, req_body, req_ctype = http_request_view(entry)
    req_raw = entry["request"].get("content_encoding_error") is not None
    req_value, req_size = _body(req_body, req_ctype, vault, big)
    rheaders = _headers(req_headers, keep_framing=req_raw)
    if req_size and not req_raw:
        rheaders["Content-Length"] = [str(req_size)]
    resp = entry["response"]
    status = resp.get("status")
    resp_raw = resp.get("content_encoding_error") is not None
    if isinstance(status, int):
        value, size = _body(resp.get("body"), header(resp.get("headers") or [], "content-type"), vault, big)
        headers = _headers(resp.get("headers") or [], keep_framing=resp_raw)
    else:
        status = 502
        data = f"{resp.get('error') or 'no answer'}\n".encode()
        value, size = _yaml_body(data), len(data)
        headers = {"Content-Type": ["text/plain; charset=utf-8"]}
    if not resp_raw:
        headers["Content-Length"] = [str(size)]
    try:
        message = HTTPStatus(status).phrase
    except ValueError:
        message = ""
    return {
        "request": {"method": method, "uri": url, "body": req_value if req_size else None, "headers": rheaders},
        "response": {"status": {"code": status, "message": message}, "headers": headers,
                     "body": {"string": value}},
        "journal": {"session": entry.get("session"), "seq": entry.get("seq"), "hash": entry.get("hash")},
    }


def _body(body: object, content_type: str | None, vault: Vault, big: BigBodies | None) -> tuple[str | bytes, int]:
    """(the YAML value, the byte count) of a recorded body; a whole-body blob over BIG_BODY is bytes, or its
    placeholder with `big`."""
    if body_kind(body, content_type) == "blob" and isinstance(body, dict) and isinstance(body.get("size"), int) \
            and body["size"] > BIG_BODY:
        if big is not None:
            return big.value(body)
        data = body_bytes(body, content_type, vault)
        return data, len(data)
    data = body_bytes(body, content_type, vault)
    return _yaml_body(data), len(data)


def _non_http(entry: dict) -> dict | None:
    url = (entry.get("request") or {}).get("url")
    return None if is_http_url(url) else {"seq": entry.get("seq"), "method": entry["request"].get("method"), "url": url}


class _Sink:
    """Where the YAML emitter writes; taken from after each interaction."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _mark() -> str:
    """Where a streamed sequence goes in the cassette's template: a string no recorded value holds."""
    return f"\x00mark:{secrets.token_hex(12)}"


def _head(session: str, entries: int, chain: str, non_http: Iterable[dict]) -> Iterator[bytes]:
    """The comment lines above the cassette's YAML."""
    yield f"# VCR.py cassette of session {session!r}: {entries} entries, chain {chain}.\n".encode()
    for o in non_http:
        yield f"# seq {o['seq']} ({o['method']} {o['url']}) is no HTTP exchange: no interaction.\n".encode()


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter: ~10x faster, same YAML
_OPTIONS: dict = {"sort_keys": False, "allow_unicode": True, "width": 1 << 16}


class _YamlEvents:
    """Values as the events `yaml.dump` emits for them (its representer, resolver and serializer rules,
    without anchors: an interaction shares no object with another), so a document can be emitted a value at a
    time. The representer forgets each value once represented (it keeps every object otherwise)."""

    def __init__(self) -> None:
        self.representer = yaml.SafeDumper(None, **_OPTIONS)  # type: ignore[arg-type]

    def of(self, value: object, marks: dict[str, Iterator[object]] | None = None) -> Iterator[yaml.Event]:
        node = self.representer.represent_data(value)
        self.representer.represented_objects = {}
        self.representer.object_keeper = []
        yield from self._node(node, marks or {})

    def _node(self, node: yaml.Node, marks: dict[str, Iterator[object]]) -> Iterator[yaml.Event]:
        resolve = self.representer.resolve
        if isinstance(node, yaml.ScalarNode):
            implicit = (node.tag == resolve(yaml.ScalarNode, node.value, (True, False)),
                        node.tag == resolve(yaml.ScalarNode, node.value, (False, True)))
            yield yaml.ScalarEvent(None, node.tag, implicit, node.value, style=node.style)
        elif isinstance(node, yaml.SequenceNode):
            implicit = node.tag == resolve(yaml.SequenceNode, node.value, True)
            yield yaml.SequenceStartEvent(None, node.tag, implicit, flow_style=node.flow_style)
            for item in node.value:
                if isinstance(item, yaml.ScalarNode) and item.value in marks:
                    for value in marks[item.value]:
                        yield from self.of(value)
                else:
                    yield from self._node(item, marks)
            yield yaml.SequenceEndEvent()
        else:
            implicit = node.tag == resolve(yaml.MappingNode, node.value, True)
            yield yaml.MappingStartEvent(None, node.tag, implicit, flow_style=node.flow_style)
            for key_node, value_node in node.value:
                yield from self._node(key_node, marks)
                yield from self._node(value_node, marks)
            yield yaml.MappingEndEvent()


def cassette_chunks(vault_root: Vault | str | os.PathLike, session: str) -> Iterator[bytes]:
    """The cassette of one session as YAML (see the module docstring and `cassette_yaml`), a piece at a time:
    the same bytes as `cassette_yaml(build_cassette(...))`. Three streaming passes: the chain is verified;
    the entries that are no HTTP exchange are listed (the head comment names them, on disk until written);
    then each interaction is emitted as its entry is read (its blobs inlined, one entry's at a time)."""
    vault = open_vault(vault_root)
    report = verify_session(vault, session).as_dict()
    tally = EntryTally()
    with JsonSpool() as other:
        for e in iter_session_entries(vault, session, tally=tally, verified=report):
            if (item := _non_http(e)) is not None:
                other.add(item)
        yield from _head(session, tally.entries, chain_verdict(report), other)  # type: ignore[arg-type]
        interactions, non_http = _mark(), _mark()
        template = {
            "version": CASSETTE_FORMAT_VERSION, "interactions": [interactions],
            "connector_broker": {"session": session, "entries": tally.entries, "chain": chain_verdict(report),
                                 "non_http_entries": [non_http]},
        }
        big = BigBodies(vault)
        items = (interaction(e, vault, big) for e in counted_entries(vault, session, tally, report)
                 if _non_http(e) is None)
        sink = _Sink()
        dumper = _DUMPER(sink, encoding="utf-8", **_OPTIONS)
        try:
            dumper.emit(yaml.StreamStartEvent(encoding="utf-8"))
            dumper.emit(yaml.DocumentStartEvent(explicit=False))
            events = _YamlEvents()
            for n, event in enumerate(events.of(template, {interactions: items, non_http: iter(other)})):
                dumper.emit(event)
                if n % 64 == 0 and sink.parts:
                    yield from big.expand(sink.take())
            dumper.emit(yaml.DocumentEndEvent(explicit=False))
            dumper.emit(yaml.StreamEndEvent())
        finally:
            dumper.dispose()
        yield from big.expand(sink.take(), final=True)


def build_cassette(vault_root: Vault | str | os.PathLike, session: str) -> dict:
    """The cassette of one session, as the dict vcrpy's YAML serializer writes (see the module docstring;
    held whole: `cassette_chunks` writes a big one)."""
    vault = open_vault(vault_root)
    report = verify_session(vault, session).as_dict()
    tally = EntryTally()
    interactions, other = [], []
    for e in iter_session_entries(vault, session, tally=tally, verified=report):
        if (item := _non_http(e)) is None:
            interactions.append(interaction(e, vault))
        else:
            other.append(item)
    return {
        "version": CASSETTE_FORMAT_VERSION,
        "interactions": interactions,
        "connector_broker": {
            "session": session, "entries": tally.entries, "chain": chain_verdict(report), "non_http_entries": other,
        },
    }


def cassette_yaml(cassette: dict) -> bytes:
    """The cassette as YAML (safe tags only: vcrpy's loader refuses python/object ones), with a comment head."""
    meta = cassette["connector_broker"]
    head = b"".join(_head(meta["session"], meta["entries"], meta["chain"], meta["non_http_entries"]))
    return head + yaml.dump(cassette, Dumper=_DUMPER, **_OPTIONS).encode("utf-8")
