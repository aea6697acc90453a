"""The file vault (docs/contract.md, "The vault") as a store: a thin wrapper over the existing modules.

Writing is journal/writer.py (flock, O_APPEND, fdatasync, torn-tail recovery) and
journal/blobstore.py (temp file, fsync, rename, directory fsync); reading is journal/reader.py;
erasure is journal/erasure.py. Nothing here writes an entry another way, except `append_lines`,
which copies lines chained elsewhere (pull) under the same flock and fdatasync.
"""

from __future__ import annotations

import fcntl
import itertools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from journal.blobstore import CHUNK, BlobStore
from journal.chain import GENESIS
from journal.confine import NotConfined, is_blob_name, open_blob, read_chunks
from journal.entry import format_ts
from journal.erasure import erase_file_blob, read_tombstone
from journal.reader import SessionTail, iter_entries, iter_lines, line_link
from journal.seq_index import line_of_seq
from journal.seq_sidecar import note_group
from journal.store.interface import BlobErased, StoreError, Tombstone
from journal.vault import Vault, write_all
from journal.writer import JournalWriter


def _write_all(fd: int, buf: bytearray) -> None:
    """Write and empty `buf` (whole lines only: a copy cut short leaves complete lines)."""
    write_all(fd, buf)
    buf.clear()


def _tombstone(data: dict) -> Tombstone:
    note = data.get("note")
    return Tombstone(data["sha256"], data.get("size"), data["erased_at"], data["erased_by"], data["reason"],
                     note if isinstance(note, str) else None)


class FileStore:
    """A vault directory. `create`: make the layout when missing (writers); readers need it to exist."""

    def __init__(self, root: str | os.PathLike, *, create: bool = False) -> None:
        self.vault = Vault.create(root) if create else Vault.open_existing(root)
        self.url = str(self.vault.root)
        self.blobs = BlobStore(self.vault.root)
        self._tail = SessionTail(self.vault)

    def writer(self, *, durable: bool = True) -> JournalWriter:
        return JournalWriter(self.vault, durable=durable)

    def sessions(self) -> list[str]:
        return self.vault.sessions()

    def iter_lines(self, session: str) -> Iterator[bytes]:
        for line in iter_lines(self.vault.require_session(session)):
            yield line.data

    def lines_after(self, session: str, seq: int = 0, last_seq: int | None = None) -> Iterator[bytes]:
        lines = self._tail.lines_after(session, seq)
        return lines if last_seq is None else itertools.islice(lines, max(0, last_seq - seq))

    def has_session(self, session: str) -> bool:
        return os.path.lexists(self.vault.session_path(session))

    def line_at(self, session: str, seq: int) -> bytes | None:
        return line_of_seq(self.vault, session, seq)

    def iter_entries(self, session: str) -> Iterator[dict]:
        return iter_entries(self.vault, session)

    def head(self, session: str) -> tuple[int, str]:
        """(seq, hash) of the session's last line; (0, GENESIS) when there is none. StoreError when the
        vault's own lines do not make a head to continue from (a broken session: `broker verify` says where)."""
        path = self.vault.session_path(session)
        if not os.path.lexists(path):
            return 0, GENESIS
        seq, digest = 0, GENESIS
        for line in iter_lines(path):
            link = line_link(line.data)
            if link is None or link[0] != seq + 1 or link[1] != digest or not line.data.endswith(b"\n"):
                raise StoreError(f"session {session!r} in {self.url} is broken at line {line.index + 1}; "
                                 "nothing is appended to it (run `broker verify`)")
            seq, digest = link[0], link[2]
        return seq, digest

    def append_lines(self, session: str, lines: Iterable[bytes]) -> int:
        """Append lines chained elsewhere, under the writer's flock. The first must continue the vault's chain
        (else the copies diverge: refused); after it each line is written as the source holds it, one line per
        line, so that a malformed or unchained line in the source becomes the file verifier's finding at its
        seq (a line holding no final newline gets one, so the lines after it stay lines)."""
        path = self.vault.session_path(session)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            seq, prev = self.head(session)
            count = 0
            buf = bytearray()
            at, noted = os.fstat(fd).st_size, 0  # for the seq sidecar: where `buf` goes, lines written before it

            def flush() -> None:
                nonlocal at, noted
                data = bytes(buf)
                _write_all(fd, buf)
                note_group(path, at, seq + noted + 1, count - noted, data)  # checked by readers: no fsync
                at, noted = at + len(data), count

            for line in lines:
                if count == 0:
                    link = line_link(line)
                    if link is None or link[0] != seq + 1 or link[1] != prev:
                        raise StoreError(
                            f"session {session!r}: the line for seq {seq + 1} does not continue the vault's chain "
                            f"at seq {seq}"
                        )
                buf += line if line.endswith(b"\n") else line + b"\n"
                count += 1
                if len(buf) >= CHUNK:
                    flush()
            flush()
            os.fdatasync(fd)
            return count
        finally:
            os.close(fd)

    def has_blob(self, digest: str) -> bool:
        return is_blob_name(digest) and self.blobs.path_for(digest).is_file()

    def blob_digests(self) -> Iterator[str]:
        """The blob names in the vault; a file under blobs/sha256/ that is not a blob name in its place is
        skipped (never resolved: journal/confine.py)."""
        base = self.blobs.base
        if base.is_dir():
            for sub in sorted(base.iterdir()):
                if sub.is_symlink() or not sub.is_dir():
                    continue
                for blob in sorted(sub.iterdir()):
                    if is_blob_name(blob.name) and blob.name[:2] == sub.name:
                        yield blob.name

    def read_blob(self, digest: str) -> Iterator[bytes]:
        try:
            f = open_blob(self.vault.root, digest)
        except FileNotFoundError:
            t = read_tombstone(self.vault.root, digest)
            if t is not None:
                raise BlobErased(_tombstone(t)) from None
            raise StoreError(f"blob {digest} is missing from {self.url}") from None
        except NotConfined as exc:
            raise StoreError(f"blob {digest} in {self.url} is not read: {exc}") from None
        yield from read_chunks(f)

    def put_blob(self, chunks: Iterable[bytes]) -> dict:
        return self.blobs.put_stream(chunks)

    def tombstones(self) -> Iterator[Tombstone]:
        folder = Path(self.vault.root) / "blobs" / "erased"
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                if not is_blob_name(path.stem):
                    continue
                t = read_tombstone(self.vault.root, path.stem)
                if t is not None:
                    yield _tombstone(t)

    def erase_blob(self, digest: str, *, reason: str, by: str, signer: object | None = None) -> Tombstone:
        path = self.blobs.path_for(digest)
        existing = read_tombstone(self.vault.root, digest)
        if not path.is_file():
            if existing is not None:
                return _tombstone(existing)
            raise StoreError(f"no blob {digest} in {self.url}")
        t = Tombstone(digest, path.stat().st_size, format_ts(), by, reason).signed(signer)
        erase_file_blob(self.vault.root, t.as_dict())
        return t

    def put_tombstone(self, tombstone: Tombstone) -> None:
        erase_file_blob(self.vault.root, tombstone.as_dict())

    def close(self) -> None:
        pass
