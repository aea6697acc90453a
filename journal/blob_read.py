"""A recorded blob for a reader (exports, trajectory, the inspector): from the vault, else from the blob
store named by BROKER_BLOBS (`--blobs s3://...`: the broker spilled it there), checked against its
name before it is handed over, wherever it came from (a blob file replaced in the vault is refused as a
bucket's forged object is). Verification does not come here: `broker verify` reports a corrupt blob at
its entry's seq; `broker verify --blobs URL` checks the bucket itself."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import BinaryIO

from journal.blobstore import hash_chunks
from journal.confine import CHUNK, is_blob_name, open_blob
from journal.errors import VaultError
from journal.vault import Vault


class BlobMismatch(VaultError, FileNotFoundError):
    """A blob whose bytes do not hash to its name: a reader treats it as missing (a FileNotFoundError), never as
    the recorded bytes."""

    def __init__(self, digest: str) -> None:
        super().__init__(f"blob {digest} does not hold the bytes its name says: their hash differs "
                         "(run `broker verify`)")


def open_recorded_blob(vault: Vault | str | os.PathLike, digest: str, size: object = None, *,
                       hashed_by_caller: bool = False) -> BinaryIO:
    """Blob `digest` of the vault (or the vault at that path: as confine.open_blob; a database store read in
    place: from its rows, checked against its name), else of BROKER_BLOBS' store; FileNotFoundError when
    neither holds it, BlobMismatch when the bytes do not hash to its name. The file handed over was read
    through once to check it; a caller streaming it to someone else reads it through `verified_chunks` (an
    edit in place after the check is caught there). `size`: what the entry's reference names (`{"sha256",
    "size", "ref"}`); a blob holding more is a BlobMismatch found without reading it through (a huge or
    sparse file in its place). Anything but a byte count is ignored. `hashed_by_caller`: the caller hashes
    what it reads and stops past `size` itself (`recorded_body.iter_blob`), so a vault file is handed over
    unread rather than read through twice (a store's blob is always checked: it is spooled anyway)."""
    limit = size if type(size) is int and size >= 0 else None
    from_store = getattr(vault, "open_blob", None)  # journal/store/database_vault.py
    try:
        if from_store is not None and is_blob_name(digest):
            return from_store(digest, limit)
        f = open_blob(vault.root if isinstance(vault, Vault) else vault, digest)
        return f if hashed_by_caller else _checked(f, digest, limit)
    except BlobMismatch:
        raise
    except FileNotFoundError:
        remote = os.environ.get("BROKER_BLOBS")
        if not remote or not is_blob_name(digest):
            raise
    from journal.store.url import open_remote_blob

    return open_remote_blob(remote, digest, limit)


def _checked(f: BinaryIO, digest: str, size: int | None = None) -> BinaryIO:
    """`f` at its start once its bytes hash to `digest` (and, with `size`, hold no more: `hash_chunks`);
    closed and BlobMismatch otherwise."""
    try:
        got, n = hash_chunks(iter(lambda: f.read(CHUNK), b""), size)
        if got != digest or (size is not None and n > size):
            raise BlobMismatch(digest)
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return f


def verified_chunks(f: BinaryIO, digest: str) -> Iterator[bytes]:
    """The rest of `f` in chunks, hashed as they go; the last chunk is held back until the whole hashes to
    `digest`, else BlobMismatch instead of it: whoever receives the chunks never gets all of other bytes (an
    answer with a Content-Length ends short). Closes `f`."""
    h = hashlib.sha256()
    with f:
        held = f.read(CHUNK)
        while held:
            h.update(held)
            chunk = f.read(CHUNK)
            if not chunk:
                break
            yield held
            held = chunk
        if h.hexdigest() != digest:
            raise BlobMismatch(digest)
        if held:
            yield held
