"""Reading session files: raw lines (for the verifier) and parsed entries (for everyone else)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from journal.vault import Vault

_READ = 1 << 20


@dataclass(frozen=True)
class Line:
    index: int  # 0-based line number
    offset: int  # byte offset in the file
    data: bytes  # the line's bytes including its final newline, if it has one


def iter_lines(path: str | os.PathLike) -> Iterator[Line]:
    """Yield each line with its offset, reading in blocks (never the whole file at once)."""
    index = 0
    offset = 0
    rest = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(_READ)
            if not block:
                break
            buf = rest + block if rest else block
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                yield Line(index, offset, buf[start : nl + 1])
                index += 1
                offset += nl + 1 - start
                start = nl + 1
            rest = buf[start:]
    if rest:
        yield Line(index, offset, rest)


def iter_entries(vault: Vault, session: str) -> Iterator[dict]:
    """Parsed entries of a session, in file order. Unparseable lines raise ValueError naming the line."""
    path = vault.require_session(session)
    for line in iter_lines(path):
        try:
            yield orjson.loads(line.data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {line.index + 1} is not JSON ({exc}); run `broker verify`") from None
