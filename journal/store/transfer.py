"""Copying a journal between stores (pull, push, and the readers' temporary vault).

Lines travel verbatim: the bytes a store holds are the bytes the other receives, so a copy is
byte-identical and the one file verifier, run on a pulled vault, checks what the database holds.
Order: blobs first, then tombstones, then each session's lines, so no entry arrives before the
blobs it names. A session already in the target must be a prefix of the source (same hash at the
target's head); then only the rest is copied. Anything else is a divergence and is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from journal.reader import line_link
from journal.store.interface import BlobErased, Store, StoreError
from journal.vault import SessionIdError, session_filename


@dataclass
class CopyReport:
    sessions: dict[str, int] = field(default_factory=dict)  # session -> lines copied
    blobs: int = 0
    tombstones: int = 0
    unmapped: dict[str, str] = field(default_factory=dict)  # session ids that map to no file name -> why
    tombstones_not_applied: int = 0  # tombstones of blobs whose bytes the source still holds

    @property
    def lines(self) -> int:
        return sum(self.sessions.values())


def copy_store(source: Store, target: Store, *, blobs: bool = True, sessions: list[str] | None = None,
               blob_source: object | None = None) -> CopyReport:
    """`blob_source`: where the source's blobs live when not in the store (S3Blobs of `--blobs s3://...`)."""
    report = CopyReport()
    if blobs:
        holder = blob_source if blob_source is not None else source
        for digest in holder.blob_digests():  # type: ignore[attr-defined]
            if target.has_blob(digest):
                continue
            try:
                ref = target.put_blob(holder.read_blob(digest))  # type: ignore[attr-defined]
            except BlobErased:  # its bytes are gone; the tombstone follows below
                continue
            if ref["sha256"] != digest:
                raise StoreError(f"blob {digest} in {getattr(holder, 'url', source.url)} holds bytes hashing to "
                                 f"{ref['sha256']}")
            report.blobs += 1
    for tombstone in source.tombstones():
        if _holds_bytes(source, tombstone.sha256):  # a claim of erasure over bytes still there: not applied
            report.tombstones_not_applied += 1
            continue
        target.put_tombstone(tombstone)
        report.tombstones += 1
    for session in sessions if sessions is not None else source.sessions():
        try:
            session_filename(session)
        except SessionIdError as exc:  # a database row no vault can hold: named, the others copied
            report.unmapped[session] = str(exc)
            continue
        report.sessions[session] = _copy_session(source, target, session)
    return report


def _holds_bytes(source: Store, digest: str) -> bool:
    """True when `source` still holds the blob's bytes (so a tombstone for it erased nothing)."""
    try:
        next(iter(source.read_blob(digest)), None)
    except StoreError:  # BlobErased, or missing
        return False
    return True


def _copy_session(source: Store, target: Store, session: str) -> int:
    have, head = target.head(session)
    lines = source.iter_lines(session)
    if have:
        for line in lines:
            link = line_link(line)
            if link is None or link[0] > have:
                raise StoreError(f"session {session!r} differs between {source.url} and {target.url} before "
                                 f"seq {have}: refusing to copy (verify both)")
            if link[0] == have:
                if link[2] != head:
                    raise StoreError(f"session {session!r} differs between {source.url} and {target.url} at "
                                     f"seq {have}: refusing to copy (verify both)")
                break
        else:
            raise StoreError(f"session {session!r}: {target.url} holds {have} entries, more than {source.url}; "
                             "refusing to copy")
    return target.append_lines(session, _rest(lines))


def _rest(lines: Iterator[bytes]) -> Iterator[bytes]:
    yield from lines
