"""A session's Merkle tree as C2SP tlog-tiles (static files an auditor reads with standard tooling).

Layout (c2sp.org/tlog-tiles): `checkpoint` (the signed note: origin, size, base64 root), `tile/<L>/<N>`
(256 hashes of 32 bytes: level 0 holds leaf hashes, level L the hashes of the complete subtrees of 256^L
leaves), `tile/<L>/<N>.p/<W>` (a partial tile of the W hashes there are so far), and `tile/entries/<N>`
(entry bundles: each leaf's data with a 2-byte big-endian length). N is written in 3-digit groups, each
but the last prefixed with `x` (1234067 -> x001/x234/067).

What is public: the leaves are the entries' `hash` values (journal/checkpoint/merkle.py), so an entry
bundle holds 32-byte entry hashes and nothing of the entries themselves (docs/tiles.md).

Incremental: tiles are immutable once full, and a partial tile of width W never changes either, so every
tile is written create-only and a later run writes only what is new; the checkpoint is the one object
replaced. Before anything is written the published checkpoint (if any) must be a prefix of this tree
(same root at its size): a session rewritten under a published checkpoint is refused, never republished.
An object already under a name a run creates must hold the bytes it would write (whoever can write the
bucket or folder could have put a tile there, or removed the checkpoint over tiles of their own): else the
run is refused before the checkpoint is signed. Reads take at most MAX_READ bytes of an object.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from journal.checkpoint.checkpoint import Checkpoint
from journal.checkpoint.merkle import HASH_SIZE, MerkleTree
from journal.checkpoint.note import NoteError, Signer, Verifier, open_note, sign_note
from journal.errors import BrokerError

HEIGHT = 8
WIDTH = 1 << HEIGHT
MAX_READ = 1 << 16
"""The most bytes a read takes of one object (a tile is 8 KiB, an entry bundle 8.5 KiB, a checkpoint less): a
bigger object is no tile and no checkpoint, and is never read whole into memory."""


class PublishRefused(BrokerError):
    """The target holds a checkpoint this tree does not extend (or one this key did not sign)."""


class TileTarget(Protocol):
    """Where tiles go: a directory or an S3 prefix."""

    def read(self, path: str) -> bytes | None:
        """The object's bytes (at most MAX_READ + 1 of them); None when there is none."""
        ...
    def create(self, path: str, data: bytes) -> bool:
        """Write `data` at `path` unless something is there; True when written."""
        ...
    def replace(self, path: str, data: bytes) -> None: ...
    def flush(self) -> None:
        """Make every object created so far durable."""
        ...


def tile_index_path(n: int) -> str:
    digits = f"{n:03d}"
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i:i + 3] for i in range(0, len(digits), 3)]
    return "/".join([f"x{g}" for g in groups[:-1]] + [groups[-1]])


def tile_path(level: int | str, n: int, width: int = WIDTH) -> str:
    path = f"tile/{level}/{tile_index_path(n)}"
    return path if width == WIDTH else f"{path}.p/{width}"


def _tiles(tree: MerkleTree, old: int) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of each hash tile and entry bundle that the tree of `tree.size` has and `old` had not."""
    size, level = tree.size, 0
    while True:
        count = size >> (HEIGHT * level)  # complete nodes at height 8*level
        old_count = old >> (HEIGHT * level)
        if count == 0:
            break
        for n in range(old_count // WIDTH, (count + WIDTH - 1) // WIDTH):
            width = min(WIDTH, count - n * WIDTH)
            if min(WIDTH, old_count - n * WIDTH) == width:
                continue  # already published with this width
            data = b"".join(tree._node(HEIGHT * level, i) for i in range(n * WIDTH, n * WIDTH + width))
            yield tile_path(level, n, width), data
        if count < WIDTH:
            break
        level += 1


def _bundles(entry_hashes: list[bytes], old: int) -> Iterator[tuple[str, bytes]]:
    size = len(entry_hashes)
    for n in range(old // WIDTH, (size + WIDTH - 1) // WIDTH):
        width = min(WIDTH, size - n * WIDTH)
        if min(WIDTH, old - n * WIDTH) == width:
            continue
        data = b"".join(len(h).to_bytes(2, "big") + h for h in entry_hashes[n * WIDTH:n * WIDTH + width])
        yield tile_path("entries", n, width), data


def publish(target: TileTarget, origin: str, entry_hashes: list[bytes], signer: Signer) -> tuple[int, int, int]:
    """Publish the tree of `entry_hashes` (raw 32-byte entry hashes, in seq order); (old size, new size,
    objects written)."""
    tree = MerkleTree(entry_hashes)
    old = 0
    published = target.read("checkpoint")
    if published is not None:
        try:
            cp = Checkpoint.parse(open_note(published, [signer.verifier()]).text)
        except NoteError as exc:
            raise PublishRefused(f"the published checkpoint does not verify with this key ({exc})") from None
        if cp.origin != origin:
            raise PublishRefused(f"the published checkpoint is for {cp.origin!r}, not {origin!r}")
        if cp.size > tree.size or tree.root(cp.size) != cp.root:
            raise PublishRefused(f"the published tree of {cp.size} entries is not a prefix of this session's "
                                 f"{tree.size}: the session changed under a published checkpoint")
        old = cp.size
    written = 0
    with ThreadPoolExecutor(8) as pool:  # object stores answer one request at a time: eight in flight
        batch: list[tuple[str, bytes]] = []
        for item in (*_tiles(tree, old), *_bundles(entry_hashes, old)):
            batch.append(item)
            if len(batch) == 256:  # bounded memory: 256 tiles of 8 KiB at a time
                written += sum(pool.map(lambda pd: _create(target, *pd), batch))
                batch = []
        written += sum(pool.map(lambda pd: _create(target, *pd), batch))
    target.flush()  # every tile durable before the checkpoint that names them
    if old != tree.size or published is None:
        target.replace("checkpoint", sign_note(Checkpoint(origin, tree.size, tree.root()).body(), signer))
        written += 1
    return old, tree.size, written


def _create(target: TileTarget, path: str, data: bytes) -> bool:
    """Create `path` holding `data`; an object already there must hold the same bytes (PublishRefused else)."""
    if target.create(path, data):
        return True
    if target.read(path) != data:
        raise PublishRefused(f"{path} already holds other bytes than this session's tree has there (an object "
                             "put there by someone else, or a publication of another tree): nothing signed")
    return False


class DirectoryTarget:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, path: str) -> Path:
        return self.root / path  # paths are built here (tile_path), never taken from outside

    def read(self, path: str) -> bytes | None:
        p = self._path(path)
        if not p.is_file():
            return None
        with open(p, "rb") as f:
            return f.read(MAX_READ + 1)

    def create(self, path: str, data: bytes) -> bool:
        """Temp file and rename (a reader never sees half a tile); made durable by `flush`, once for all."""
        p = self._path(path)
        if p.exists():
            return False
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)
        return True

    def flush(self) -> None:
        """One syncfs of the tiles' filesystem (Linux; os.sync elsewhere) instead of a fsync per tile."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if libc.syncfs(fd) != 0:
                    raise OSError(ctypes.get_errno(), "syncfs failed")
            finally:
                os.close(fd)
        except (AttributeError, OSError):
            os.sync()

    def replace(self, path: str, data: bytes) -> None:
        from journal.vault import write_atomically

        p = self._path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(p, data)


class S3Target:
    """Tiles under an S3 prefix: create-only (If-None-Match: *), the checkpoint replaced."""

    def __init__(self, url: str) -> None:
        from journal.store.s3_blobs import S3Blobs

        self.s3 = S3Blobs(url)

    def read(self, path: str) -> bytes | None:
        from journal.store.s3_blobs import error_code

        try:
            body = self.s3.client.get_object(Bucket=self.s3.bucket, Key=self.s3.prefix + path,
                                             Range=f"bytes=0-{MAX_READ}")["Body"]
            try:
                return bytes(body.read(MAX_READ + 1))
            finally:
                body.close()
        except self.s3.errors as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            if error_code(exc) in ("InvalidRange", "416"):  # an empty object: no byte in the range asked for
                return b""
            raise

    def create(self, path: str, data: bytes) -> bool:
        from journal.store.s3_blobs import error_code

        try:
            self.s3.client.put_object(Bucket=self.s3.bucket, Key=self.s3.prefix + path, Body=data, IfNoneMatch="*")
        except self.s3.errors as exc:
            if error_code(exc) in ("PreconditionFailed", "412"):
                return False
            raise
        return True

    def flush(self) -> None:
        pass  # a PUT that returned is durable

    def replace(self, path: str, data: bytes) -> None:
        self.s3.client.put_object(Bucket=self.s3.bucket, Key=self.s3.prefix + path, Body=data,
                                  CacheControl="no-cache")


def tile_target(to: str) -> TileTarget:
    from journal.store.s3_blobs import is_s3_url

    return S3Target(to) if is_s3_url(to) else DirectoryTarget(to)


__all__ = ["HASH_SIZE", "PublishRefused", "Verifier", "publish", "tile_path", "tile_target"]
