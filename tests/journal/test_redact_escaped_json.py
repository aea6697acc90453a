"""JSON bodies whose strings hide a credential behind `\\uXXXX` escapes of ASCII characters (review6).

The byte rules read a body as written; a reader of the entry gets the JSON value, escapes resolved. An
agent writing `\\u0067hp_...` (or `https\\u003a//user:pass@`, `TOKEN\\u003d...`) got the credential
into the vault in the clear: `request.body` is the parsed value. Through the Recorder, as `broker run`
records a call (record_body), and through BodyCapture (a streamed body held whole)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from journal.blobstore import BlobStore
from journal.bodies import BodyCapture
from journal.call import Call, Identity, Request, Response
from journal.record import Recorder

TOKEN = "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lm"
PAT = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"

ESCAPED = {
    "prefix": '{"text":"\\u0067hp_' + PAT[4:] + '"}',
    "all of the prefix": '{"text":"' + "".join(f"\\u{ord(c):04x}" for c in PAT[:4]) + PAT[4:] + '"}',
    "userinfo colon": '{"url":"https\\u003a//deploy:' + TOKEN + '@git.example.com/x"}',
    "assignment": '{"cmd":"export GITHUB_TOKEN\\u003d' + TOKEN + '"}',
    "quoted in a string": '{"log":"{\\"password\\u0022: \\"' + TOKEN + '\\"}"}',
}


def _recorded_body(tmp_path: Path, body: bytes) -> object:
    rec = Recorder(tmp_path / "vault")
    call = Call(Identity("s", "a", "p"), "github",
                Request("POST", "https://api.github.com/x", [("content-type", "application/json")], body, None),
                Response(200, [("content-type", "application/json")], b"{}", None, None, "upstream"))
    entry = rec.record(call)
    assert entry is not None
    return entry["request"]["body"]


@pytest.mark.parametrize("shape", sorted(ESCAPED))
def test_escaped_credentials_are_redacted_as_read(tmp_path: Path, shape: str) -> None:
    """Fails on main for every shape."""
    body = ESCAPED[shape].encode()
    assert json.loads(body)  # valid JSON, the credential in it once read
    got = json.dumps(_recorded_body(tmp_path, body))
    assert TOKEN not in got and PAT[4:] not in got, got


@pytest.mark.parametrize("shape", sorted(ESCAPED))
def test_a_streamed_body_held_whole_is_redacted_the_same(tmp_path: Path, shape: str) -> None:
    cap = BodyCapture(BlobStore(tmp_path / "blobs"), "application/json")
    data = ESCAPED[shape].encode()
    for i in range(0, len(data), 7):
        cap.feed(data[i : i + 7])
    value, _ = cap.finish()
    got = json.dumps(value)
    assert TOKEN not in got and PAT[4:] not in got, got


def test_bodies_without_credentials_keep_their_bytes(tmp_path: Path) -> None:
    """An escape alone changes nothing (Go writes <, > and & as \\u003c, \\u003e, \\u0026)."""
    body = b'{"html":"\\u003cb\\u003e\\u0026","n":1}'
    assert _recorded_body(tmp_path, body) == {"html": "<b>&", "n": 1}


@pytest.mark.xfail(strict=True, reason="the byte rules take `Bearer` for the token when an escaped blank follows "
                   "it, so the token after it is no longer read as one; and a JSON body over the parse limit "
                   "(8 MiB), spilled to a blob, is not read at all")
def test_an_escaped_blank_after_the_scheme(tmp_path: Path) -> None:
    body = ('{"h":"Authorization: Bearer\\u0020' + TOKEN + '"}').encode()
    assert TOKEN not in json.dumps(_recorded_body(tmp_path, body))


@pytest.mark.parametrize("template", ['{"text":"%s","text":"ok"}', '{"text":"ok","text":"%s","text":"ok"}',
                                      '[{"a":{"text":"%s","text":"ok"}}]'], ids=["first", "middle", "nested"])
def test_a_duplicate_key_does_not_hide_an_escaped_credential_from_the_last_wins_reading(template):
    """`{"text":"\\u0067hp_...","text":"ok"}`: Python's json (last value wins) reads "ok" and saw nothing to
    redact, so the body was kept as written, while a reader keeping the first value (Go's encoding/json
    keeps the last too, but many streaming parsers and jq's `first` do not) gets the token back."""
    from journal.redact import redact_escaped_json

    body = (template % ("\\u0067hp_" + PAT[4:])).encode()
    out = redact_escaped_json(body)
    assert PAT[4:].encode() not in out
    assert json.loads(out) == json.loads(template % "ok")
