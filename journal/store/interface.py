"""The store protocol: what every writer and reader of the journal needs from where entries live.

Two implementations: `FileStore` (the vault directory of docs/contract.md, the embedded default, wrapping
journal/writer.py, journal/reader.py and journal/blobstore.py) and `PostgresStore` (one database
many brokers write to). Whichever holds an entry, its canonical line and hash are the same bytes:
both chain with journal/chain.py and serialise with journal/canonical.py, and a store never
re-serialises a line once written.

The writer side (`EntryWriter`) is the shape of `JournalWriter`, so the Recorder, the recording
service and the MCP shim take either without knowing which. What a reader of the sessions a writer
appends to may use (prompt links, the MCP shim's exact prompt tie, autoseal) is `SessionLines` plus
the writer's `blobs` and `checkpoint_vault()`: nobody reaches behind a writer for its vault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

from journal.errors import JournalError
from journal.vault import Vault


class StoreError(JournalError):
    """A store that cannot be opened or used (bad URL, database unreachable or refusing)."""


class BlobErased(StoreError):
    """The blob's bytes were erased on purpose; its tombstone says when, by whom and why."""

    def __init__(self, tombstone: Tombstone) -> None:
        super().__init__(f"blob {tombstone.sha256} was erased on {tombstone.erased_at} by "
                         f"{tombstone.erased_by}: {tombstone.reason}")
        self.tombstone = tombstone


@dataclass(frozen=True)
class Tombstone:
    """What is left of an erased blob (docs/contract.md, "Erasure")."""

    sha256: str
    size: int | None
    erased_at: str  # YYYY-MM-DDTHH:MM:SS.mmmZ
    erased_by: str
    reason: str
    note: str | None = None  # the erasure key's signed note over the other fields (journal/erasure_signature.py)

    def as_dict(self) -> dict:
        d = {"sha256": self.sha256, "size": self.size, "erased_at": self.erased_at,
             "erased_by": self.erased_by, "reason": self.reason}
        if self.note is not None:
            d["note"] = self.note
        return d

    def signed(self, signer: object | None) -> Tombstone:
        """This tombstone with its note signed by `signer` (a journal.checkpoint.note.Signer); as is when None."""
        if signer is None:
            return self
        from journal.erasure_signature import sign_tombstone

        return Tombstone(self.sha256, self.size, self.erased_at, self.erased_by, self.reason,
                         sign_tombstone(self.as_dict(), signer))  # type: ignore[arg-type]


class BlobWriting(Protocol):
    """One blob being streamed in: `write` chunks, then `commit` (durable, returns the ref object)."""

    size: int

    def write(self, chunk: bytes) -> None: ...
    def commit(self) -> dict: ...
    def abort(self) -> None: ...
    def __enter__(self) -> BlobWriting: ...
    def __exit__(self, exc_type, exc, tb) -> None: ...


class BlobSink(Protocol):
    """Where spilled bytes go (journal/bodies.py takes any of these)."""

    def open_writer(self) -> BlobWriting: ...
    def put_bytes(self, data: bytes) -> dict: ...
    def put_stream(self, chunks: Iterable[bytes]) -> dict: ...


class SessionLines(Protocol):
    """Reading the sessions of a journal as they grow, whatever holds them."""

    def lines_after(self, session: str, seq: int = 0) -> Iterator[bytes]:
        """The session's durable lines (canonical JSON + newline) after seq `seq`, in seq order; nothing for a
        session with no entries. A line still being written is left for the next call."""
        ...


@runtime_checkable
class EntryWriter(Protocol):
    """Appends chained entries; returns each only once it is durable."""

    blobs: BlobSink
    on_durable: Callable[[str, list[dict]], None] | None
    """Called with each session's committed entries once they are durable (autoseal); must not raise."""

    def lines_after(self, session: str, seq: int = 0) -> Iterator[bytes]:
        """As SessionLines.lines_after, for the sessions this writer appends to."""
        ...
    def checkpoint_vault(self) -> Vault | None:
        """Where a sealer writes this journal's checkpoints: the file vault itself; None for a database
        store, whose checkpoints go into a vault directory the operator names (docs/postgres.md)."""
        ...
    def append(self, fields: dict, *, dedupe: bool = False) -> dict: ...
    def append_many(self, batch: list[dict]) -> list: ...
    def check_session(self, session: str) -> None: ...
    def head(self, session: str) -> tuple[int, str]: ...
    def close(self) -> None: ...


class Store(Protocol):
    """Entries, blobs and tombstones of one journal."""

    url: str

    def writer(self, *, durable: bool = True) -> EntryWriter: ...
    def sessions(self) -> list[str]: ...
    def iter_lines(self, session: str) -> Iterator[bytes]:
        """A session's lines exactly as written (canonical JSON + newline), in seq order."""
        ...
    def iter_entries(self, session: str) -> Iterator[dict]: ...
    def lines_after(self, session: str, seq: int = 0, last_seq: int | None = None) -> Iterator[bytes]:
        """As SessionLines.lines_after, up to seq `last_seq` when given: a reader's page by seq range, streamed
        (a database pages by its primary key, never holding a session in memory)."""
        ...
    def has_session(self, session: str) -> bool: ...
    def line_at(self, session: str, seq: int) -> bytes | None:
        """The line of the entry with this seq, or None: one key lookup in a database; in a file vault through
        the session's seq index (journal/seq_index.py, checked against the line, never trusted)."""
        ...
    def head(self, session: str) -> tuple[int, str]: ...
    def append_lines(self, session: str, lines: Iterable[bytes]) -> int:
        """Add lines already chained elsewhere (push, pull), verbatim; they must continue the head."""
        ...
    def has_blob(self, digest: str) -> bool: ...
    def blob_digests(self) -> Iterator[str]: ...
    def read_blob(self, digest: str) -> Iterator[bytes]:
        """The blob's bytes in chunks; BlobErased after an erasure, StoreError when absent."""
        ...
    def put_blob(self, chunks: Iterable[bytes]) -> dict: ...
    def tombstones(self) -> Iterator[Tombstone]: ...
    def erase_blob(self, digest: str, *, reason: str, by: str, signer: object | None = None) -> Tombstone: ...
    def put_tombstone(self, tombstone: Tombstone) -> None: ...
    def close(self) -> None: ...


class BlobSource(Protocol):
    """Anything blobs can be read from by name (a Store, a blob sink such as S3Blobs)."""

    def read_blob(self, digest: str) -> Iterator[bytes]: ...


def checked_blob(source: BlobSource, digest: str, where: str, size: int | None = None) -> BinaryIO:
    """Blob `digest` read from `source` into a spooled file (memory bounded: a temporary file past 8 MiB,
    gone when closed) and handed over only when its bytes hash to its name. FileNotFoundError when the
    source lacks it or its bytes do not match: a reader treats it as missing, never as the recorded body.
    With the `size` its entry names, an object holding more is refused as soon as more came: a huge object
    in its place fills neither the disk nor the clock."""
    import tempfile

    from journal.blobstore import hash_chunks, oversize

    out = tempfile.SpooledTemporaryFile(max_size=8 << 20)

    def spooled(chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            out.write(chunk)
            yield chunk

    try:
        got, n = hash_chunks(spooled(source.read_blob(digest)), size)
    except StoreError as exc:
        out.close()
        raise FileNotFoundError(str(exc)) from None
    if size is not None and n > size:
        out.close()
        raise FileNotFoundError(oversize(digest, size, f" in {where}") + "; not used")
    if got != digest:
        out.close()
        raise FileNotFoundError(f"blob {digest} in {where} does not hash to its name; not used")
    out.seek(0)
    return out  # type: ignore[return-value]
