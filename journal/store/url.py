"""Which store a `--store URL` / `--vault DIR` / `BROKER_STORE` names.

`postgresql://...` (or `postgres://...`) is a PostgreSQL store; anything else is a vault directory.
Put a database password in ~/.pgpass or PGPASSWORD rather than in the URL: the URL may show in
process listings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, TypeGuard

from journal.store.interface import BlobSink, EntryWriter, Store

SCHEMES = ("postgresql://", "postgres://")


def is_database_url(target: object) -> TypeGuard[str]:
    return isinstance(target, str) and target.startswith(SCHEMES)


def store_target(target: str | os.PathLike) -> str:
    """A target another process can open: directories made absolute, URLs as they are."""
    return target if is_database_url(target) else str(Path(target).resolve())


def open_store(target: str | os.PathLike | None = None, *, create: bool = False) -> Store:
    """The store `target` names (default: BROKER_STORE). `create`: make a missing vault directory."""
    if target is None:
        target = os.environ.get("BROKER_STORE")
        if not target:
            from journal.store.interface import StoreError

            raise StoreError("no store given: use --store URL (a vault directory or postgresql://...) or BROKER_STORE")
    if is_database_url(target):
        from journal.store.postgres_store import PostgresStore

        return PostgresStore(str(target))
    from journal.store.file_store import FileStore

    return FileStore(target, create=create)


def open_writer(target: str | os.PathLike, *, durable: bool = True) -> EntryWriter:
    """The entry writer for a target: JournalWriter for a directory, PostgresWriter for a database URL."""
    if is_database_url(target):
        from journal.store.postgres_store import PostgresStore

        return PostgresStore(str(target)).writer(durable=durable)
    from journal.writer import JournalWriter

    return JournalWriter(target, durable=durable)


def check_store(target: str | os.PathLike) -> str:
    """Open a writer's store once up front (a vault is created, a database's schema checked or made), so a
    bad store is one clear error at start; what to show the operator for it (no password)."""
    if is_database_url(target):
        from journal.store.postgres_store import PostgresStore

        db = PostgresStore(str(target))
        db.connect().close()
        return db.shown
    from journal.vault import Vault

    return str(Vault.create(target).root)


def open_blob_sink(url: str) -> BlobSink:
    """Where spilled bytes go when they are not kept with the entries (`--blobs URL`, BROKER_BLOBS):
    s3://BUCKET/PREFIX (journal/store/s3_blobs.py)."""
    from journal.store.s3_blobs import S3Blobs, is_s3_url

    if not is_s3_url(url):
        from journal.store.interface import StoreError

        raise StoreError(f"--blobs {url!r}: give s3://BUCKET/PREFIX (without --blobs, blobs stay in the store)")
    return S3Blobs(url)


def open_remote_blob(url: str, digest: str, size: int | None = None) -> BinaryIO:
    """Blob `digest` fetched from the blob store at `url` (BROKER_BLOBS) for a reader whose vault does not
    hold it, checked against its name (journal/store/interface.py `checked_blob`)."""
    from journal.store.interface import checked_blob

    return checked_blob(open_blob_sink(url), digest, url, size)  # type: ignore[arg-type]
