"""Where the journal lives: a vault directory (the default) or PostgreSQL. See README.md here."""

from journal.store.interface import BlobErased, EntryWriter, Store, StoreError, Tombstone
from journal.store.url import is_database_url, open_store, open_writer, store_target

__all__ = [
    "BlobErased", "EntryWriter", "Store", "StoreError", "Tombstone", "is_database_url", "open_store",
    "open_writer", "store_target",
]
