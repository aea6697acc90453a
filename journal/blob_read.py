"""A recorded blob for a reader (exports, trajectory, the inspector): from the vault, else from the blob
store named by BROKER_BLOBS (`--blobs s3://...`: the broker spilled it there), checked against its
name before it is handed over (journal/store/url.open_remote_blob). Verification does not come here:
`broker verify --blobs URL` checks the bucket itself."""

from __future__ import annotations

import os
from typing import BinaryIO

from journal.confine import is_blob_name, open_blob
from journal.vault import Vault


def open_recorded_blob(vault: Vault | str | os.PathLike, digest: str) -> BinaryIO:
    """Blob `digest` of the vault (or the vault at that path: as confine.open_blob; a database store read in
    place: from its rows, checked against its name), else of BROKER_BLOBS' store; FileNotFoundError when
    neither holds it, or the bytes do not hash to its name."""
    from_store = getattr(vault, "open_blob", None)  # journal/store/database_vault.py
    try:
        if from_store is not None and is_blob_name(digest):
            return from_store(digest)
        return open_blob(vault.root if isinstance(vault, Vault) else vault, digest)
    except FileNotFoundError:
        remote = os.environ.get("BROKER_BLOBS")
        if not remote or not is_blob_name(digest):
            raise
    from journal.store.url import open_remote_blob

    return open_remote_blob(remote, digest)
