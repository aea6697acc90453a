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
from http import HTTPStatus

import yaml

from journal.export.fixture import chain_verdict, read_entries
from journal.export.har import is_http_url
from journal.export.recorded_body import body_bytes, header, http_request_view
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


def build_cassette(vault_root: Vault | str | os.PathLike, session: str) -> dict:
    """The cassette of one session, as the dict vcrpy's YAML serializer writes (see the module docstring)."""
    vault = open_vault(vault_root)
    report = verify_session(vault, session).as_dict()
    entries, _ = read_entries(vault, session)
    interactions, other = [], []
    for e in entries:
        url = (e.get("request") or {}).get("url")
        if is_http_url(url):
            interactions.append(interaction(e, vault))
        else:
            other.append({"seq": e.get("seq"), "method": e["request"].get("method"), "url": url})
    return {
        "version": CASSETTE_FORMAT_VERSION,
        "interactions": interactions,
        "connector_broker": {
            "session": session, "entries": len(entries), "chain": chain_verdict(report), "non_http_entries": other,
        },
    }


def cassette_yaml(cassette: dict) -> bytes:
    """The cassette as YAML (safe tags only: vcrpy's loader refuses python/object ones), with a comment head."""
    meta = cassette["connector_broker"]
    head = [f"# VCR.py cassette of session {meta['session']!r}: {meta['entries']} entries, chain {meta['chain']}."]
    head += [f"# seq {o['seq']} ({o['method']} {o['url']}) is no HTTP exchange: no interaction."
             for o in meta["non_http_entries"]]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter: ~10x faster, same YAML
    body = yaml.dump(cassette, Dumper=dumper, sort_keys=False, allow_unicode=True, width=1 << 16)
    return ("\n".join(head) + "\n" + body).encode("utf-8")
