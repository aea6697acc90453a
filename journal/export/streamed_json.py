"""A pretty-printed JSON document written a piece at a time, for exports of sessions of any size (issue 26).

`streamed_document` yields the very bytes `orjson.dumps(doc, option=OPT_INDENT_2 | option) + b"\\n"` would
give, where some arrays of `doc` are iterables drawn one item at a time: the lists are never held. The
document around the arrays comes from a template called again after each array is drawn, so values the
items decide (a count, the last hash) can follow the array they are counted from.

`JsonSpool` keeps items on disk for an array that is written later than its items are met (a HAR's
`_nonHttpEntries`, listed after every entry): memory holds one item, not the list.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable, Iterable, Iterator

import orjson

_INDENT = orjson.OPT_INDENT_2


class ArrayMark:
    """Where an array streamed by `streamed_document` goes in a template: a string no recorded value
    holds (a random nonce behind a NUL), so its serialized form is found in the template's bytes only there."""

    def __init__(self, name: str) -> None:
        self.value = f"\x00{name}:{secrets.token_hex(12)}"
        self.serialized = orjson.dumps(self.value)


class Chunks:
    """An array item already serialized (OPT_INDENT_2, at indent 0), as pieces: an item that is itself too
    big to hold, such as a HAR entry carrying a WebSocket connection's messages."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self.pieces = pieces


def _indent_of(text: bytes, pos: int) -> int:
    start = text.rfind(b"\n", 0, pos) + 1
    return len(text) - start - len(text[start:].lstrip(b" "))


def _items(items: Iterable[object], indent: int, option: int,
           expand: Callable[[bytes], Iterable[bytes]] | None) -> Iterator[bytes]:
    """The text of a non-empty array's items as orjson writes them at `indent` (`[` and `]` excluded), each
    piece through `expand` when given (it puts in what a placeholder inside an item stands for)."""
    pad = b"\n" + b" " * (indent + 2)
    first = True
    for item in items:
        yield pad[1:] if first else b"," + pad
        first = False
        pieces = item.pieces if isinstance(item, Chunks) else [orjson.dumps(item, option=_INDENT | option)]
        for piece in pieces:
            piece = piece.replace(b"\n", pad)  # orjson's newlines are all layout: a string's are escaped
            if expand is None:
                yield piece
            else:
                yield from expand(piece)
    if not first:
        yield b"\n" + b" " * indent


def streamed_document(template: Callable[[], object], arrays: list[tuple[ArrayMark, Iterable[object]]],
                      option: int = 0, newline: bool = True,
                      expand: Callable[[bytes], Iterable[bytes]] | None = None) -> Iterator[bytes]:
    """The bytes of the document `template()` with each mark replaced by its iterable's items (in the
    order `arrays` gives, which must be the order the marks come in the document).

    The text before a mark is taken from `template()` as called before that array is drawn, the text
    after the last mark from a call after every array was: a template must give the same text before a
    mark whenever it is called (values computed from items belong after their array)."""
    start = 0  # where the text not yet written begins, in every rendering (marks keep their length)
    for mark, items in arrays:
        text = orjson.dumps(template(), option=_INDENT | option)
        pos = text.find(mark.serialized, start)
        if pos < 0:
            raise ValueError(f"array mark {mark.value[1:].split(':')[0]!r} is not in the document, or out of order")
        yield text[start:pos]
        first = True
        for piece in _items(items, _indent_of(text, pos), option, expand):
            if first:
                yield b"[\n"
                first = False
            yield piece
        yield b"[]" if first else b"]"
        start = pos + len(mark.serialized)
    text = orjson.dumps(template(), option=_INDENT | option)
    yield text[start:] + (b"\n" if newline else b"")


class JsonSpool:
    """Items kept in a temporary file (the first MiB in memory) until they are read back, in order;
    `len()` is how many were added. Read back as often as needed; closed with the spool."""

    def __init__(self) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=1 << 20)
        self.count = 0

    def add(self, item: object) -> None:
        self._file.seek(0, 2)
        self._file.write(orjson.dumps(item) + b"\n")
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[object]:
        self._file.seek(0)
        read = 0
        while read < self.count:  # a line at a time: `add` between reads moves the file's position
            line = self._file.readline()
            pos = self._file.tell()
            read += 1
            yield orjson.loads(line)
            self._file.seek(pos)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
