"""Deterministic, lazily generated big bodies.

Why: big-download and big-attachment tests must know the expected SHA-256 without the server (or the
test) ever holding N bytes in memory.

Generator (stable, documented so other tests can re-implement it independently):

* ``B(seed)`` is a 1 MiB base block: the concatenation, for ``j = 0 .. 32767``, of
  ``sha256(b"upstream-big:" + seed.encode() + j.to_bytes(4, "big")).digest()``.
* The content is a sequence of 1 MiB blocks; block ``k`` (0-based) is
  ``k.to_bytes(8, "big") + B(seed)[8:]`` (the counter stops a reordered or duplicated block from
  going unnoticed).
* A body of size ``N`` is the first ``N`` bytes of that sequence.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator

BLOCK = 1 << 20
DEFAULT_CHUNK = 64 * 1024


@functools.lru_cache(maxsize=8)
def base_block(seed: str = "big") -> bytes:
    """The 1 MiB pseudo-random base block for ``seed`` (cached: 32768 sha256 calls, ~20 ms)."""
    prefix = b"upstream-big:" + seed.encode()
    return b"".join(hashlib.sha256(prefix + j.to_bytes(4, "big")).digest() for j in range(BLOCK // 32))


def big_body_chunks(size: int, seed: str = "big", chunk_size: int = DEFAULT_CHUNK) -> Iterator[bytes]:
    """Yield the ``size``-byte body in chunks of at most ``chunk_size``; lazy, O(chunk) memory."""
    if size < 0:
        raise ValueError("size must be >= 0")
    chunk_size = max(1, chunk_size)
    base = base_block(seed)
    pos = 0
    while pos < size:
        k, off = divmod(pos, BLOCK)
        n = min(chunk_size, size - pos, BLOCK - off)
        if off < 8:
            head = k.to_bytes(8, "big")[off : min(8, off + n)]
            piece = head + base[max(8, off) : off + n]
        else:
            piece = base[off : off + n]
        yield piece
        pos += n


def big_body_bytes(size: int, seed: str = "big") -> bytes:
    """The whole body in memory: only for small sizes (attachments, seeded files)."""
    return b"".join(big_body_chunks(size, seed, chunk_size=BLOCK))


def big_body_sha256(size: int, seed: str = "big") -> str:
    """Hex SHA-256 of the ``size``-byte body, computed streaming."""
    h = hashlib.sha256()
    for chunk in big_body_chunks(size, seed, chunk_size=BLOCK):
        h.update(chunk)
    return h.hexdigest()
