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

from journal.chain import line_link
from journal.store.interface import Store, StoreError


@dataclass
class CopyReport:
    sessions: dict[str, int] = field(default_factory=dict)  # session -> lines copied
    blobs: int = 0
    tombstones: int = 0

    @property
    def lines(self) -> int:
        return sum(self.sessions.values())


def copy_store(source: Store, target: Store, *, blobs: bool = True, sessions: list[str] | None = None) -> CopyReport:
    report = CopyReport()
    if blobs:
        for digest in source.blob_digests():
            if target.has_blob(digest):
                continue
            ref = target.put_blob(source.read_blob(digest))
            if ref["sha256"] != digest:
                raise StoreError(f"blob {digest} in {source.url} holds bytes hashing to {ref['sha256']}")
            report.blobs += 1
    for tombstone in source.tombstones():
        target.put_tombstone(tombstone)
        report.tombstones += 1
    for session in sessions if sessions is not None else source.sessions():
        report.sessions[session] = _copy_session(source, target, session)
    return report


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
