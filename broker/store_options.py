"""`--store URL` for every command that reads or writes the journal (see journal/store/).

A command given `--store` (or BROKER_STORE) uses it; otherwise `--vault DIR` as before. Readers
of a PostgreSQL store read a temporary file vault pulled from it (byte-identical lines), so the
one file verifier and the existing readers run unchanged.
"""

from __future__ import annotations

import click

from journal.store import is_database_url, open_store
from journal.vault import Vault

store_option = click.option(
    "--store", "store", envvar="BROKER_STORE", default=None, metavar="URL",
    help="Journal store: a vault directory or postgresql://... (also BROKER_STORE); overrides --vault.",
)


def store_or_vault(store: str | None, vault_dir: str) -> str:
    """What a writer records into: the --store URL when given, else the --vault directory."""
    return store or vault_dir


def reading_vault(store: str | None, vault_dir: str, *, blobs: bool = True) -> Vault:
    """A vault to read: --vault DIR, --store DIR, or a temporary pull of a --store database (removed when
    the command ends)."""
    if not store:
        return Vault.open_existing(vault_dir)
    if not is_database_url(store):
        return Vault.open_existing(store)
    db = open_store(store)
    ctx = click.get_current_context()
    vault = ctx.with_resource(db.reading_vault(blobs=blobs))
    ctx.meta["unmapped_sessions"] = getattr(db, "unmapped", {})
    return vault


def unmapped_sessions() -> dict[str, str]:
    """Session ids the database store read by `reading_vault` holds but no vault file can be named for -> why
    (findings for the reader to report: such a row was not verified)."""
    return click.get_current_context().meta.get("unmapped_sessions", {})


def pulled_vault(store: str | None, vault_dir: str, sessions: list[str] | None) -> Vault:
    """For readers that write beside the entries (replay's views): a database store's sessions are
    first pulled into --vault DIR (only what is new), which is then read and written as usual."""
    if not store or not is_database_url(store):
        return Vault.open_existing(store or vault_dir)
    from journal.store.file_store import FileStore
    from journal.store.transfer import copy_store

    db = open_store(store)
    target = FileStore(vault_dir, create=True)
    try:
        copy_store(db, target, sessions=sessions)
    finally:
        db.close()
    return target.vault
