"""A database store read in place, as a vault: the readers' view of `--store postgresql://...` (issue 26).

Entries come straight from the store's rows, in seq order, a page at a time (PostgresStore.lines_after:
keyset paging on the primary key), never pulled into a copy. The lines a reader sees are the lines a
pulled vault would hold (journal/reader.py `blocks_of_lines`), so the one file verifier finds the same
things in both. The vault directory named with `--vault` keeps what lives beside the entries of a
database store (checkpoints, legacy seals: docs/postgres.md); it is read, never written, and need not
exist. Blobs are read from the store, each checked against its name before a reader gets it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from journal.reader import LineBlock, blocks_of_lines
from journal.store.interface import BlobErased, StoreError, checked_blob
from journal.store.postgres_store import PostgresStore
from journal.vault import SessionIdError, Vault, VaultError, session_filename

BLOCK_ROWS = 2000
"""Rows per page (and per LineBlock) for readers of a whole session."""


class DatabaseVault(Vault):
    """A PostgreSQL store as a read-only vault (journal/reader.py RowSource). `root`: the --vault directory
    holding the store's checkpoints and seals, when there is one."""

    def __init__(self, store: PostgresStore, root: str | os.PathLike) -> None:
        super().__init__(root)
        self.store = store
        self.label = store.shown
        self.unmapped: dict[str, str] = {}  # session ids the store holds that no vault file can be named for

    def origin(self, *, create: bool = False, prefix: str = "connector-broker.vault") -> str | None:
        """As Vault.origin, in the --vault directory of the store's checkpoints (made when a sealer needs it)."""
        if create and not self.root.is_dir():
            Vault.create(self.root)
        return super().origin(create=create, prefix=prefix)

    def sessions(self) -> list[str]:
        """The store's sessions in the file vault's order; an id no file could be named for goes to `unmapped`
        (a finding for verify, skipped by the other readers, as a pull skips it)."""
        out = []
        for session in self.store.sessions():
            try:
                session_filename(session)
            except SessionIdError as exc:
                self.unmapped[session] = str(exc)
                continue
            out.append(session)
        return out

    def require_session(self, session: str) -> Path:
        """The session's would-be file path (nothing is read there); VaultError when the store lacks it."""
        path = self.session_path(session)  # the vault's id rule: SessionIdError for an id no file could hold
        if not self.store.has_session(session):
            raise VaultError(f"no session {session!r} in {self.label}")
        return path

    def open_session(self, session: str) -> int:
        raise VaultError(f"session {session!r} lives in {self.label}, not in a file (read it with journal/reader.py)")

    # -- RowSource ---------------------------------------------------------------------------

    def line_blocks(self, session: str, after_seq: int = 0, last_seq: int | None = None) -> Iterator[LineBlock]:
        return blocks_of_lines(self.store.lines_after(session, after_seq, last_seq, page=BLOCK_ROWS), BLOCK_ROWS)

    def line_at(self, session: str, seq: int) -> bytes | None:
        line = self.store.line_at(session, seq)
        if line is None:
            return None
        return line if line.endswith(b"\n") else line + b"\n"

    def size_of(self, session: str) -> int:
        return self.store.size_of(session)

    # -- blobs --------------------------------------------------------------------------------

    def open_blob(self, digest: str, size: int | None = None) -> BinaryIO:
        """The blob's bytes from the store, spooled (memory bounded) and handed over only when they hash to
        its name (and hold no more than `size`, when its entry names one); FileNotFoundError otherwise (a
        reader treats it as missing, never as the recorded body)."""
        return checked_blob(self.store, digest, self.label, size)

    def blob_checker(self) -> DatabaseBlobCheck:
        return DatabaseBlobCheck(self.store)


class DatabaseBlobCheck:
    """What journal/verify.py asks of the blobs of a database store (the wording of BlobStore.check)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def check(self, digest: str, size: int | None = None) -> str | None:
        h, n = hashlib.sha256(), 0
        try:
            for chunk in self.store.read_blob(digest):
                h.update(chunk)
                n += len(chunk)
        except BlobErased:
            return f"blob {digest} is missing"
        except StoreError as exc:
            return f"blob {digest} is missing" if "missing" in str(exc) else f"blob {digest} is corrupt: {exc}"
        if h.hexdigest() != digest:
            return f"blob {digest} is corrupt (its bytes hash to {h.hexdigest()})"
        if size is not None and n != size:
            return f"blob {digest} holds {n} bytes, the entry says {size}"
        return None

    def tombstone(self, digest: str) -> dict | None:
        """The store's tombstone of `digest` as a file vault's blobs/erased/<digest>.json holds it, or None."""
        t = self.store.tombstone(digest)
        return t.as_dict() if t is not None else None
