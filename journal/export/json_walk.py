"""Reading a JSON document too big to hold, a value at a time (for `broker verify-export` of a big HAR or
OTLP/JSON export: issue 26).

`JsonWalk` steps through the containers a reader names (an object's members, an array's elements) and
hands over the values inside them parsed by orjson, one at a time: memory holds the value being read (a
HAR entry, a span) and a read block, not the document. What it skips is still checked to be JSON, so a
document the walk accepts is one `orjson.loads` accepts. The extent of a value is found by a regular
expression over the bytes (strings whole, brackets counted), not a character at a time in Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

import orjson

from journal.errors import InputError

_READ = 1 << 18
_WHOLE = 1 << 20  # a container up to this size is checked by one orjson.loads; a bigger one member by member
_WS = re.compile(rb"[ \t\n\r]*+")
_RUN = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+')  # up to a bracket, or a string not yet complete
_SCALAR_END = re.compile(rb"[,\]}: \t\n\r]")
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')


class NotJson(InputError):
    """The document is not JSON (as orjson.loads would refuse it)."""


class JsonWalk:
    """A reader of one JSON document from a binary file, front to back (see the module docstring)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._buf = bytearray()
        self._pos = 0
        self._eof = False

    def _more(self) -> bool:
        """Read another block (dropping what was consumed); False at the end of the file."""
        if self._eof:
            return False
        data = self._f.read(_READ)
        if not data:
            self._eof = True
            return False
        del self._buf[:self._pos]  # a bytearray drops its front without copying the rest
        self._buf += data
        self._pos = 0
        return True

    def _ws(self) -> None:
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or not self._more():
                return

    def peek(self) -> bytes:
        """The next byte that is not whitespace (b"" at the end of the document)."""
        self._ws()
        return bytes(self._buf[self._pos:self._pos + 1])

    def at_end(self) -> bool:
        return self.peek() == b""

    def _take(self, byte: bytes) -> None:
        if self.peek() != byte:
            raise NotJson(f"expected {byte.decode()!r}")
        self._pos += 1

    def _extent(self, limit: int | None) -> int | None:
        """The end (an offset into the buffer) of the value starting at the read position, reading on as
        needed; None when a container runs past `limit` bytes (the buffer then holds that much of it)."""
        first = self._buf[self._pos:self._pos + 1]
        if first == b'"':
            while (m := _STRING.match(self._buf, self._pos)) is None:
                if not self._more():
                    raise NotJson("an unfinished string")
            return m.end()
        if first not in (b"{", b"["):
            while (m := _SCALAR_END.search(self._buf, self._pos)) is None:
                if not self._more():
                    return len(self._buf)
            return m.start()
        at, depth = self._pos, 0
        while True:
            at = _RUN.match(self._buf, at).end()  # type: ignore[union-attr]
            if at < len(self._buf) and self._buf[at] != 0x22:  # a bracket (0x22: a string not complete yet)
                depth += 1 if self._buf[at] in (0x7B, 0x5B) else -1
                at += 1
                if depth == 0:
                    return at
                continue
            if limit is not None and at - self._pos > limit:
                return None
            base = self._pos
            if not self._more():
                raise NotJson("unbalanced brackets or an unfinished string")
            at -= base  # the buffer now starts at the read position

    def value(self) -> object:
        """The next value, parsed (held whole: for the values a reader reads, not the ones it walks)."""
        self._ws()
        end = self._extent(None)
        assert end is not None
        data = self._buf[self._pos:end]
        self._pos = end
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise NotJson(str(exc)) from None

    def small_value(self, limit: int | None = None) -> tuple[bool, object]:
        """(True, the next value parsed) when it takes at most `limit` bytes; (False, None) otherwise, the
        read position left at its start (to be walked inside instead)."""
        self._ws()
        end = self._extent(_WHOLE if limit is None else limit)
        if end is None:
            return False, None
        data = self._buf[self._pos:end]
        self._pos = end
        try:
            return True, orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise NotJson(str(exc)) from None

    def skip(self) -> None:
        """Step over the next value, checking that it is JSON, a member at a time when it is big."""
        self._ws()
        end = self._extent(_WHOLE)
        if end is not None:
            data = self._buf[self._pos:end]
            self._pos = end
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise NotJson(str(exc)) from None
            return
        if self.peek() == b"[":
            for _ in self.elements():
                self.skip()
        else:
            for _ in self.members():
                self.skip()

    def elements(self) -> Iterator[int]:
        """Step into an array: yields each element's index, the caller reading the element (value, skip, or
        a walk inside) before asking for the next."""
        self._take(b"[")
        if self.peek() == b"]":
            self._pos += 1
            return
        n = 0
        while True:
            yield n
            n += 1
            nxt = self.peek()
            self._pos += 1
            if nxt == b"]":
                return
            if nxt != b",":
                raise NotJson("expected ',' or ']'")

    def members(self) -> Iterator[str]:
        """Step into an object: yields each member's key, the caller reading its value before the next."""
        self._take(b"{")
        if self.peek() == b"}":
            self._pos += 1
            return
        while True:
            if self.peek() != b'"':
                raise NotJson("expected a key")
            key = self.value()
            self._take(b":")
            yield str(key)
            nxt = self.peek()
            self._pos += 1
            if nxt == b"}":
                return
            if nxt != b",":
                raise NotJson("expected ',' or '}'")
