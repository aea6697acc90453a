"""HTTP/1.1 body plumbing: incremental request bodies and a streaming multipart parser.

Why: the fake must accept 200 MiB uploads (Content-Length or chunked) while keeping only a hash, a
size and a 4 KiB head in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import BinaryIO

CHUNK = 64 * 1024
HEAD_LIMIT = 4096


class BodyTooLarge(Exception):
    """Raised when a handler asks for a whole body bigger than it agreed to buffer."""


class BadBody(Exception):
    """Raised on malformed chunked framing or a body that ends early."""


class BodyReader:
    """Reads one request body incrementally; always hashes it and keeps its first 4 KiB."""

    def __init__(self, rfile: BinaryIO, length: int | None, chunked: bool) -> None:
        self._rfile = rfile
        self._remaining = length or 0
        self._chunked = chunked
        self._chunk_left = 0
        self._done = not chunked and not length
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.head = bytearray()

    @property
    def done(self) -> bool:
        """True once the whole body (including chunked trailers) has been read."""
        return self._done

    def _account(self, data: bytes) -> bytes:
        self.sha256.update(data)
        self.size += len(data)
        if len(self.head) < HEAD_LIMIT:
            self.head += data[: HEAD_LIMIT - len(self.head)]
        return data

    def _read_exact(self, n: int) -> bytes:
        data = self._rfile.read(n)
        if data is None or len(data) < n:
            raise BadBody("body ended early")
        return data

    def read_chunk(self, max_size: int = CHUNK) -> bytes:
        """Next piece of the body (b"" at the end)."""
        if self._done:
            return b""
        if not self._chunked:
            n = min(max_size, self._remaining)
            data = self._read_exact(n)
            self._remaining -= n
            if self._remaining == 0:
                self._done = True
            return self._account(data)
        if self._chunk_left == 0:
            line = self._rfile.readline(1026)
            if not line.endswith(b"\n"):
                raise BadBody("bad chunk size line")
            try:
                self._chunk_left = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise BadBody(f"bad chunk size {line!r}") from exc
            if self._chunk_left == 0:
                while True:  # trailers, then the blank line
                    trailer = self._rfile.readline(65537)
                    if not trailer:
                        raise BadBody("chunked body ended early")
                    if trailer in (b"\r\n", b"\n"):
                        break
                self._done = True
                return b""
        n = min(max_size, self._chunk_left)
        data = self._read_exact(n)
        self._chunk_left -= n
        if self._chunk_left == 0 and self._read_exact(2) != b"\r\n":
            raise BadBody("missing CRLF after chunk")
        return self._account(data)

    def iter(self, max_size: int = CHUNK) -> Iterator[bytes]:
        """Iterate over the remaining body."""
        while True:
            data = self.read_chunk(max_size)
            if not data:
                if self._done:
                    return
                continue
            yield data

    def read_all(self, limit: int) -> bytes:
        """The whole remaining body; raises BodyTooLarge (after draining) beyond ``limit`` bytes."""
        parts: list[bytes] = []
        total = 0
        for data in self.iter():
            total += len(data)
            if total > limit:
                self.drain()
                raise BodyTooLarge(f"body larger than {limit} bytes")
            parts.append(data)
        return b"".join(parts)

    def drain(self) -> None:
        """Consume (and hash) whatever is left, so the connection can be reused."""
        for _ in self.iter():
            pass


class MultipartParser:
    """Incremental multipart/* parser emitting events, so media parts can be hashed, never buffered.

    Events from ``feed``: ``("part", headers)`` (lower-cased names), ``("data", bytes)``, ``("end", None)``
    after each part and ``("done", None)`` after the closing delimiter.
    """

    def __init__(self, boundary: str) -> None:
        self._delim = b"--" + boundary.encode("latin-1")
        self._buf = bytearray()
        self._state = "preamble"
        self.done = False

    def feed(self, data: bytes) -> list[tuple[str, object]]:
        """Add bytes; return the events they complete."""
        self._buf += data
        events: list[tuple[str, object]] = []
        progress = True
        while progress and not self.done:
            progress = self._step(events)
        return events

    def _step(self, events: list[tuple[str, object]]) -> bool:
        buf = self._buf
        if self._state == "preamble":
            idx = buf.find(self._delim)
            if idx < 0:
                keep = len(self._delim)
                if len(buf) > keep:
                    del buf[: len(buf) - keep]
                return False
            del buf[: idx + len(self._delim)]
            self._state = "after_delim"
            return True
        if self._state == "after_delim":
            if len(buf) < 2:
                return False
            if buf[:2] == b"--":
                self.done = True
                events.append(("done", None))
                buf.clear()
                return False
            eol = buf.find(b"\n")
            if eol < 0:
                return False
            del buf[: eol + 1]  # CRLF (plus any transport padding)
            self._state = "headers"
            return True
        if self._state == "headers":
            if buf[:2] == b"\r\n":
                del buf[:2]
                headers: dict[str, str] = {}
            else:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > 65536:
                        raise BadBody("multipart headers too long")
                    return False
                headers = {}
                for line in bytes(buf[:end]).decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                del buf[: end + 4]
            events.append(("part", headers))
            self._state = "body"
            return True
        # body
        marker = b"\r\n" + self._delim
        idx = buf.find(marker)
        if idx >= 0:
            if idx:
                events.append(("data", bytes(buf[:idx])))
            events.append(("end", None))
            del buf[: idx + len(marker)]
            self._state = "after_delim"
            return True
        safe = len(buf) - len(marker) + 1
        if safe > 0:
            events.append(("data", bytes(buf[:safe])))
            del buf[:safe]
        return False
