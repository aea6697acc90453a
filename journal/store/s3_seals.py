"""Checkpoints, the signed vault index and witness cosignatures copied to the blob bucket (`--blobs s3://...`),
so a fleet of brokers on one database store has one place where its seals live.

Layout under PREFIX/seals/: `<stem>/<size>-<root hex>.checkpoint` (the signed note with its cosignatures,
written create-only: the history) and `<stem>/latest` (the newest note, overwritten: the pointer);
`index/<sha256 of the note>` (create-only) and `index/latest` for the vault index. The vault's files stay
the sealer's record; the bucket is a copy, so a bucket that is down costs a warning, never a seal.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from journal.checkpoint.checkpoint import Checkpoint, session_stem
from journal.checkpoint.note import NoteError, parse_note
from journal.store.s3_blobs import S3Blobs, error_code

log = logging.getLogger(__name__)


class SealMirror:
    def __init__(self, blobs: S3Blobs) -> None:
        self.s3 = blobs
        self.base = f"{blobs.prefix}seals/"

    def _create(self, key: str, data: bytes) -> None:
        """Create-only; an object already there with the same name is kept (same content by its name)."""
        try:
            self.s3.client.put_object(Bucket=self.s3.bucket, Key=key, Body=data, IfNoneMatch="*")
        except self.s3.errors as exc:
            if error_code(exc) not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                raise

    def checkpoint(self, session: str, note: bytes) -> None:
        cp = Checkpoint.parse(parse_note(note).text)
        folder = f"{self.base}{session_stem(session)}/"
        self._create(f"{folder}{cp.size:020d}-{cp.root.hex()}-{hashlib.sha256(note).hexdigest()[:16]}.checkpoint",
                     note)
        self.s3.client.put_object(Bucket=self.s3.bucket, Key=f"{folder}latest", Body=note)

    def index(self, note: bytes) -> None:
        self._create(f"{self.base}index/{hashlib.sha256(note).hexdigest()}", note)
        self.s3.client.put_object(Bucket=self.s3.bucket, Key=f"{self.base}index/latest", Body=note)

    def copy(self, outcomes: list, index_file: Path) -> None:
        """After a sealing round: each written checkpoint, then the index. Never raises."""
        failures: tuple[type[BaseException], ...] = (OSError, NoteError, *self.s3.errors)
        try:
            for o in outcomes:
                if o.path is not None and o.refused is None:
                    self.checkpoint(o.session, Path(o.path).read_bytes())
            if index_file.is_file():
                self.index(index_file.read_bytes())
        except failures as exc:
            log.warning("checkpoints not copied to %s (the vault holds them): %s", self.s3.url, exc)


def seal_mirror(url: str | None) -> SealMirror | None:
    """The mirror for a --blobs s3:// URL; None for no URL."""
    if not url:
        return None
    from journal.store.url import open_blob_sink

    sink = open_blob_sink(url)
    return SealMirror(sink) if isinstance(sink, S3Blobs) else None
