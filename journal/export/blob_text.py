"""A spilled body written into a JSON export as text a chunk at a time (HAR `--inline-blobs`: issue 26).

A body spilled whole to the blob store can be any size (a streamed download is spilled as it passes), so
an export that inlines it must not read it whole. `BlobInliner.view` reads the blob through once (checking
its hash, whether it is UTF-8, and whether its text is JSON: what the HAR's `text`, `encoding` and
`mimeType` depend on) and gives a placeholder string for the entry; `BlobInliner.expand` then writes, in
the serialized entry, the blob's text in the placeholder's place, read again a chunk at a time: JSON-escaped
UTF-8 text exactly as orjson escapes a string, or base64. The bytes are those of the entry with the whole
text in it; memory holds a chunk.
"""

from __future__ import annotations

import base64
import codecs
import re
import secrets
from collections.abc import Iterable, Iterator

import orjson

from journal.bodies import is_binary_type, is_json_type
from journal.export.json_walk import JsonWalk, NotJson
from journal.export.recorded_body import iter_blob
from journal.vault import Vault

_ESCAPE = 1 << 16  # characters JSON-escaped at once


class _ChunkReader:
    """A binary file's `read` over an iterator of chunks (for JsonWalk over a text never held whole)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)

    def read(self, _size: int = -1) -> bytes:
        return next(self._chunks, b"")


def _base64(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """base64 of the bytes of `chunks`, in pieces (regrouped into multiples of 3 bytes: a read may be short)."""
    carry = b""
    for chunk in chunks:
        carry += chunk
        cut = len(carry) - len(carry) % 3
        if cut:
            yield base64.b64encode(carry[:cut])
            carry = carry[cut:]
    if carry:
        yield base64.b64encode(carry)


def _utf8(chunks: Iterable[bytes]) -> Iterator[str]:
    """The text of UTF-8 bytes, a chunk at a time (a character cut between chunks waits for the next)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for chunk in chunks:
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


class BlobInliner:
    """Whole-body blobs of one export, inlined a chunk at a time (see the module docstring). The placeholder
    carries a nonce made for this export, so no recorded string can pass for one."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        nonce = secrets.token_hex(12)
        self._prefix = f"\x00blob:{nonce}:"
        self._text = re.compile(re.escape(self._prefix) + r"([0-9a-f]{64}):([0-9]+):(text|base64):([01])")
        self._mark = re.compile(rb'"\\u0000blob:' + nonce.encode() + rb':([0-9a-f]{64}):([0-9]+):(text|base64):[01]"')

    def view(self, ref: dict, content_type: str | None) -> tuple[str, str | None]:
        """(placeholder text, encoding: None or "base64") of a whole-body blob, after reading it through once
        (BlobUnavailable when it is missing or not the bytes its name says: before anything is written)."""
        utf8 = not is_binary_type(content_type)
        decoder = codecs.getincrementaldecoder("utf-8")()
        for chunk in iter_blob(self.vault, ref):
            if utf8:
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError:
                    utf8 = False
        if utf8:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                utf8 = False
        encoding = None if utf8 else "base64"
        keep = not ref["size"] or not is_json_type(content_type) or self._is_json(ref, encoding)
        sha = ref["sha256"]
        return f"{self._prefix}{sha}:{int(ref['size'])}:{encoding or 'text'}:{int(keep)}", encoding

    def _text_bytes(self, ref: dict, encoding: str | None) -> Iterator[bytes]:
        chunks = iter_blob(self.vault, ref)
        return _base64(chunks) if encoding else chunks

    def _is_json(self, ref: dict, encoding: str | None) -> bool:
        """Whether the text (as the HAR holds it) parses as JSON, read a value at a time."""
        walk = JsonWalk(_ChunkReader(self._text_bytes(ref, encoding)))  # type: ignore[arg-type]
        try:
            walk.skip()
            return walk.at_end()
        except NotJson:
            return False

    def keeps_type(self, text: str) -> bool | None:
        """For a placeholder `view` gave: whether the HAR keeps the declared type for the blob's text (it is
        empty, not JSON-typed, or JSON: see har._mime_type); None for any other text."""
        m = self._text.fullmatch(text)
        return None if m is None else m.group(4) == "1"

    def expand(self, data: bytes) -> Iterator[bytes]:
        """Serialized JSON with each placeholder (as a JSON string) replaced by its blob's text, streamed."""
        at = 0
        for m in self._mark.finditer(data):
            yield data[at:m.start()]
            sha, size, kind = m.group(1).decode(), int(m.group(2)), m.group(3).decode()
            ref = {"sha256": sha, "size": size, "ref": f"blobs/sha256/{sha[:2]}/{sha}"}
            yield b'"'
            if kind == "base64":
                yield from self._text_bytes(ref, "base64")
            else:
                for text in _utf8(iter_blob(self.vault, ref)):
                    for at in range(0, len(text), _ESCAPE):  # orjson reserves several times a string's size
                        yield orjson.dumps(text[at:at + _ESCAPE])[1:-1]
            yield b'"'
            at = m.end()
        yield data[at:]
