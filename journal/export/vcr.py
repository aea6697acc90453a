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

Redacted values stay as recorded (`[never captured]`), in URLs and headers alike. Each interaction
carries a `journal` key (session, seq, hash), which vcrpy ignores.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from http import HTTPStatus

import yaml

from journal.export.fixture import EntryTally, chain_verdict, counted_entries, iter_session_entries
from journal.export.har import is_http_url
from journal.export.recorded_body import body_bytes, header, http_request_view
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


def interaction(entry: dict, vault: Vault) -> dict:
    """One journal entry (an HTTP exchange) as a VCR.py interaction."""
    method, url, req_headers, req_body, req_ctype = http_request_view(entry)
    req_raw = entry["request"].get("content_encoding_error") is not None
    req_data = body_bytes(req_body, req_ctype, vault)
    rheaders = _headers(req_headers, keep_framing=req_raw)
    if req_data and not req_raw:
        rheaders["Content-Length"] = [str(len(req_data))]
    resp = entry["response"]
    status = resp.get("status")
    resp_raw = resp.get("content_encoding_error") is not None
    if isinstance(status, int):
        data = body_bytes(resp.get("body"), header(resp.get("headers") or [], "content-type"), vault)
        headers = _headers(resp.get("headers") or [], keep_framing=resp_raw)
    else:
        status = 502
        data = f"{resp.get('error') or 'no answer'}\n".encode()
        headers = {"Content-Type": ["text/plain; charset=utf-8"]}
    if not resp_raw:
        headers["Content-Length"] = [str(len(data))]
    try:
        message = HTTPStatus(status).phrase
    except ValueError:
        message = ""
    return {
        "request": {"method": method, "uri": url, "body": _yaml_body(req_data) if req_data else None,
                    "headers": rheaders},
        "response": {"status": {"code": status, "message": message}, "headers": headers,
                     "body": {"string": _yaml_body(data)}},
        "journal": {"session": entry.get("session"), "seq": entry.get("seq"), "hash": entry.get("hash")},
    }


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
        items = (interaction(e, vault) for e in counted_entries(vault, session, tally, report) if _non_http(e) is None)
        sink = _Sink()
        dumper = _DUMPER(sink, encoding="utf-8", **_OPTIONS)
        try:
            dumper.emit(yaml.StreamStartEvent(encoding="utf-8"))
            dumper.emit(yaml.DocumentStartEvent(explicit=False))
            events = _YamlEvents()
            for n, event in enumerate(events.of(template, {interactions: items, non_http: iter(other)})):
                dumper.emit(event)
                if n % 64 == 0 and sink.parts:
                    yield sink.take()
            dumper.emit(yaml.DocumentEndEvent(explicit=False))
            dumper.emit(yaml.StreamEndEvent())
        finally:
            dumper.dispose()
        yield sink.take()


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
