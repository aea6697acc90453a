"""Content-addressed blob store: `blobs/sha256/<hh>/<hex>`, immutable, deduplicated.

Writes go to a temporary file inside the vault (`blobs/tmp/`), hashed while written, then
fsync, rename into place and fsync the directory, so a blob that has a name is complete and
durable before any entry points at it. Nothing is held whole in memory.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from journal.confine import NotConfined, open_blob
from journal.errors import BrokerError
from journal.vault import fsync_dir

CHUNK = 1 << 20


class BlobError(BrokerError, OSError):
    """A blob that could not be written or does not hold the bytes its name says."""


def hash_chunks(chunks: Iterable[bytes], size: int | None = None) -> tuple[str, int]:
    """(SHA-256 hex, byte count) of `chunks`; with the `size` an entry names, reading stops once more than that
    many bytes came (the count then exceeds `size`, the hash is of a prefix): a blob replaced by a huge or
    sparse object is judged without reading it through (every blob check: the vault's, a bucket's)."""
    h = hashlib.sha256()
    n = 0
    for chunk in chunks:
        h.update(chunk)
        n += len(chunk)
        if size is not None and n > size:
            break
    return h.hexdigest(), n


def oversize(digest: str, size: int, where: str = "") -> str:
    """What a blob check says of an object holding more bytes than its entry names (its hash never computed)."""
    return f"blob {digest} is corrupt: it holds more than the {size} bytes the entry says{where}"


def blob_ref(digest: str) -> str:
    """The vault-relative path of the blob whose SHA-256 is `digest`."""
    return f"blobs/sha256/{digest[:2]}/{digest}"


def ref_object(digest: str, size: int) -> dict:
    """What an entry holds in place of spilled bytes (docs/contract.md, Bodies)."""
    return {"sha256": digest, "size": size, "ref": blob_ref(digest)}


def is_ref_object(value: object) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"sha256", "size", "ref"}
        and isinstance(value["ref"], str)
        and value["ref"].startswith("blobs/sha256/")
    )


class BlobWriter:
    """One blob being written chunk by chunk (for bodies that stream through the proxy)."""

    def __init__(self, store: BlobStore) -> None:
        import tempfile  # here, not at the top: the verifier imports this module and writes no blob

        self._store = store
        store.tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=store.tmp_dir, prefix="blob-")
        self._file = os.fdopen(fd, "wb")
        self._tmp = Path(name)
        self._hash = hashlib.sha256()
        self.size = 0
        self._done = False

    def write(self, chunk: bytes) -> None:
        if chunk:
            self._hash.update(chunk)
            self._file.write(chunk)
            self.size += len(chunk)

    def commit(self) -> dict:
        """Make the blob durable under its name; return its ref object."""
        if self._done:
            raise BlobError("blob already committed or aborted")
        self._done = True
        digest = self._hash.hexdigest()
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._store._install(self._tmp, digest)
        except OSError as exc:
            self._discard()
            raise BlobError(f"cannot store blob {digest}: {exc}") from exc
        return ref_object(digest, self.size)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._discard()

    def _discard(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


class WriterBackedBlobs:
    """`put_bytes` and `put_stream` for any blob sink that has `open_writer` and `has_blob` (the
    vault's BlobStore, the PostgreSQL store's blobs): one way to store bytes whatever holds them."""

    def open_writer(self):  # pragma: no cover - interface
        raise NotImplementedError

    def has_blob(self, digest: str) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def put_bytes(self, data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        if self.has_blob(digest):
            return ref_object(digest, len(data))
        with self.open_writer() as w:
            w.write(data)
            return w.commit()

    def put_stream(self, chunks: Iterable[bytes]) -> dict:
        """Store an iterator of chunks without holding them whole; return the ref object."""
        with self.open_writer() as w:
            for chunk in chunks:
                w.write(chunk)
            return w.commit()


class BlobStore(WriterBackedBlobs):
    def __init__(self, vault_root: str | os.PathLike, *, erasure_keys: Sequence[object] = (),
                 remote: object | None = None) -> None:
        self.root = Path(vault_root)
        self.remote = remote  # where the blobs live when not in the vault (S3Blobs: `check` reads them there)
        self.erasure_keys = list(erasure_keys)  # verifier keys whose signed tombstones count (erasure_signature.py)
        self.base = self.root / "blobs" / "sha256"
        self.tmp_dir = self.root / "blobs" / "tmp"

    def path_for(self, digest: str) -> Path:
        return self.base / digest[:2] / digest

    def open_writer(self) -> BlobWriter:
        return BlobWriter(self)

    def has_blob(self, digest: str) -> bool:
        return self.path_for(digest).exists()

    def _install(self, tmp: Path, digest: str) -> None:
        target = self.path_for(digest)
        if target.exists():
            tmp.unlink(missing_ok=True)  # same bytes already stored: dedupe
            return
        new_dir = not target.parent.is_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
        fsync_dir(target.parent)
        if new_dir:  # the new <hh> directory's own entry must be durable too
            fsync_dir(self.base)

    def check(self, digest: str, size: int | None = None) -> str | None:
        """None when the blob is present and hashes to its name (and size); else what is wrong. Only a regular
        file reached through no symlink inside the vault counts as present (journal/confine.py). With a
        `remote` (`--blobs s3://...`) the bytes are read and hashed from there, streaming."""
        if self.remote is not None:
            return self.remote.check(digest, size)  # type: ignore[attr-defined]
        try:
            f = open_blob(self.root, digest)
        except FileNotFoundError:
            return f"blob {digest} is missing"
        except NotConfined as exc:
            return f"blob {digest} is missing: {exc}"
        with f:
            got, n = hash_chunks(iter(lambda: f.read(CHUNK), b""), size)
        if size is not None and n > size:
            return oversize(digest, size)
        if got != digest:
            return f"blob {digest} is corrupt (its bytes hash to {got})"
        if size is not None and n != size:
            return f"blob {digest} holds {n} bytes, the entry says {size}"
        return None
