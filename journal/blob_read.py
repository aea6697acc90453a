"""A recorded blob for a reader (exports, trajectory, the inspector): from the vault, else from the blob
store named by BROKER_BLOBS (`--blobs s3://...`: the broker spilled it there), checked against its
name before it is handed over (journal/store/url.open_remote_blob). Verification does not come here:
`broker verify --blobs URL` checks the bucket itself."""

from __future__ import annotations

import os
from typing import BinaryIO

from journal.confine import is_blob_name, open_blob


def open_recorded_blob(root: str | os.PathLike, digest: str) -> BinaryIO:
    """Blob `digest` of the vault at `root` (as confine.open_blob), else of BROKER_BLOBS' store;
    FileNotFoundError when neither holds it, or the store's bytes do not hash to its name."""
    try:
        return open_blob(root, digest)
    except FileNotFoundError:
        remote = os.environ.get("BROKER_BLOBS")
        if not remote or not is_blob_name(digest):
            raise
    from journal.store.url import open_remote_blob

    return open_remote_blob(remote, digest)
