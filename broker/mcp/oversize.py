"""Lines over `--max-message-mib`: relayed as they stream, recorded without being held or parsed whole.

The bytes go to the blob store as they pass (redacted on the way by `journal.redact.StreamingRedactor`
with the JSON rules), and a small *skeleton* of the message is kept: the same JSON with every string
over `STRING_LIMIT` bytes emptied and the contents of containers deeper than `SKELETON_DEPTH`
dropped. The skeleton still parses and holds what the relay needs (the method, the id, the tool
name in `params.name`, also inside a batch), so such a call is matched to its answer and recorded
like any other; its entry's value is the blob's ref (docs/mcp.md, "Large messages").
"""

from __future__ import annotations

import re
import threading

from broker.mcp.messages import RECORDED_METHODS, Line, parse_line
from journal.redact import StreamingRedactor
from journal.store.interface import BlobSink, BlobWriting

SKELETON_DEPTH = 3
"""Containers opened at this depth or less keep their scalars: message (1), params (2), arguments (3);
in a batch: array (1), message (2), params (3)."""
SKELETON_LIMIT = 1 << 20
"""A skeleton that grows past this (a huge structure of small values) is given up: no id is learned."""
STRING_LIMIT = 4096
"""Strings up to this many bytes (ids, method and tool names) are kept in the skeleton."""

_IN_STRING = re.compile(rb'["\\]')
_STRUCTURE = re.compile(rb'["{}\[\]]')
_RECORDED = frozenset(m.encode() for m in RECORDED_METHODS)
_MENTIONS = tuple({b'"' + m + b'"' for m in _RECORDED} | {b'"' + m.replace(b"/", b"\\/") + b'"' for m in _RECORDED})
"""A recorded method's name as a JSON string, plain or with its slash escaped."""
_MENTION_TAIL = max(len(m) for m in _MENTIONS) - 1


class Skeleton:
    """Builds the skeleton of one JSON text fed in chunks of any size (state carries across chunks).

    A single message stops being scanned once what the relay needs is known (its `id`, and its
    `method` with `params.name` for a `tools/call`, or its `result`/`error`): the rest of a large
    line is only streamed to the blob. So the first `id`, `method` and `name` in the line decide."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.depth = 0
        self.stack = bytearray()  # the open brackets kept in `out`
        self.in_string = False
        self.escape = False
        self.keep_string = False
        self.string = bytearray()
        self.string_over = False
        self.overflow = False
        self.done: bytes | None = None  # the skeleton, closed, once enough is known
        self.names_recorded_method = False  # a kept string equals "tools/call" or "resources/read"

    def feed(self, data: bytes) -> None:
        if self.done is not None or self.overflow:
            return
        i, n = 0, len(data)
        while i < n:
            if self.in_string:
                if self.escape:
                    self._string_part(data, i, i + 1)
                    self.escape = False
                    i += 1
                    continue
                m = _IN_STRING.search(data, i)
                end = m.start() if m is not None else n
                self._string_part(data, i, end)
                if m is None:
                    break
                if data[end] == 0x5C:  # a backslash: the next byte is escaped, maybe in the next chunk
                    self._string_part(data, end, end + 1)
                    self.escape = True
                else:
                    self._close_string()
                i = end + 1
                continue
            m = _STRUCTURE.search(data, i)
            end = m.start() if m is not None else n
            if self.depth <= SKELETON_DEPTH:
                self._keep(data[i:end])
            if m is None:
                break
            c = data[end]
            if c == 0x22:
                self.in_string = True
                self.keep_string = self.depth <= SKELETON_DEPTH
                self.string.clear()
                self.string_over = False
            elif c in (0x7B, 0x5B):  # { [
                if self.depth <= SKELETON_DEPTH:
                    self._keep(data[end : end + 1])
                    self.stack.append(c)
                self.depth += 1
            else:  # } ]
                self.depth -= 1
                if self.depth <= SKELETON_DEPTH:
                    self._keep(data[end : end + 1])
                    if self.stack:
                        self.stack.pop()
            i = end + 1
        self._try_stop()

    def _string_part(self, data: bytes, start: int, end: int) -> None:
        if not self.keep_string or self.string_over:
            return
        if len(self.string) + end - start > STRING_LIMIT:
            self.string_over = True
            self.string.clear()
            return
        self.string += data[start:end]

    def _close_string(self) -> None:
        self.in_string = False
        if self.keep_string:
            if bytes(self.string) in _RECORDED:
                self.names_recorded_method = True
            self._keep(b'"' + (b"" if self.string_over else bytes(self.string)) + b'"')

    def _keep(self, data: bytes) -> None:
        if self.overflow or not data:
            return
        self.out += data
        if len(self.out) > SKELETON_LIMIT:
            self.overflow = True
            self.out = bytearray()

    def _try_stop(self) -> None:
        """Close what is open and see whether the message says enough already."""
        if self.overflow or not self.stack or self.stack[0] != 0x7B:
            return
        text = bytes(self.out).rstrip()
        if not text or text[-1:] not in (b"{", b"[", b",", b'"', b"]", b"}"):
            return  # inside a number or a literal, or before a value: it may go on in the next chunk
        if text.endswith(b","):
            text = text[:-1]
        text += bytes(0x7D if c == 0x7B else 0x5D for c in reversed(self.stack))
        line = parse_line(text)
        if len(line.messages) != 1 or not isinstance(line.messages[0].value, dict):
            return
        value = line.messages[0].value
        if "id" not in value or isinstance(value["id"], list | dict):
            return  # no id yet, or one that may still be open (closed here only for the test)
        params = value.get("params")
        named = isinstance(params, dict) and isinstance(params.get("name"), str)
        method = value.get("method")
        if "result" in value or "error" in value or (isinstance(method, str) and (method != "tools/call" or named)):
            self.done = text

    def line(self) -> Line:
        """The skeleton as a parsed line (no messages when it was given up)."""
        if self.done is not None:
            return parse_line(self.done)
        if self.overflow:
            return Line(b"", [], False, "too large a structure to read")
        return parse_line(bytes(self.out))


class OversizeLine:
    """One line over the limit on its way through: its redacted bytes in a blob, its skeleton, its size."""

    def __init__(self, store: BlobSink) -> None:
        self.skeleton = Skeleton()
        self._redactor = StreamingRedactor("application/json")
        self._blob: BlobWriting | None = None
        self._store = store
        self.size = 0
        self.error: str | None = None  # why the bytes could not be kept (the blob store failed)
        self._ref: dict | None = None
        self._lock = threading.Lock()
        self.mentions_recorded_method = False
        """A recorded method's name appears anywhere in the line (scanned as it streams, across parts): what
        decides, when the skeleton gave up (`Skeleton.overflow`) before it learned the method, that the line
        may be a recorded call and must have an entry."""
        self._tail = b""

    def feed(self, data: bytes) -> None:
        """A part of the line as it passed (the final part with its newline)."""
        if data.endswith(b"\n"):
            data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
        self.size += len(data)
        self.skeleton.feed(data)
        if not self.mentions_recorded_method:
            window = self._tail + data
            self.mentions_recorded_method = any(m in window for m in _MENTIONS)
            self._tail = window[-_MENTION_TAIL:]
        self._write(self._redactor.feed(data))

    @property
    def may_be_recorded_call(self) -> bool:
        """The skeleton named a recorded method, or gave up before it could tell and the line names one."""
        return self.skeleton.names_recorded_method or (self.skeleton.overflow and self.mentions_recorded_method)

    def end(self) -> Line:
        """The line is complete: the rest of the redacted bytes go out; returns the skeleton's messages."""
        self._write(self._redactor.close())
        return self.skeleton.line()

    def _write(self, data: bytes) -> None:
        if self.error is not None or not data:
            return
        try:
            if self._blob is None:
                self._blob = self._store.open_writer()
            self._blob.write(data)
        except OSError as exc:
            self.error = f"the blob store could not take the message: {exc}"
            self.abort()

    def commit(self) -> dict:
        """Make the blob durable (once, whichever call of a batch asks first); its ref object.
        Raises OSError when the blob store failed, so the entry is not written without its body."""
        with self._lock:
            if self._ref is not None:
                return self._ref
            if self.error is not None or self._blob is None:
                raise OSError(self.error or "the message had no bytes to store")
            self._ref = self._blob.commit()
            return self._ref

    def abort(self) -> None:
        """Nothing will refer to the blob (not a recorded call): drop the temporary file."""
        if self._blob is not None and self._ref is None:
            self._blob.abort()
