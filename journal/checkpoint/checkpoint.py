"""tlog-checkpoint bodies (c2sp.org/tlog-checkpoint) and the session checkpoint files of the vault.

Body: the origin line, the tree size in decimal (no leading zeros), the base64 RFC 6962 root, each
ending in "\\n"; no extension lines. One origin per session, `<vault origin>/<session file name
without .jsonl>`. The signed note (log signature, then any witness cosignatures) is written to
`seals/<session file name without .jsonl>.checkpoint` with `write_atomically` (temp file in the same
directory, fsync, rename, directory fsync): a reader sees the old checkpoint or the new one.
"""

from __future__ import annotations

import base64
import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from journal.checkpoint.note import NoteError
from journal.confine import read_inside
from journal.vault import SESSION_SUFFIX, Vault, session_filename, write_atomically

CHECKPOINT_SUFFIX = ".checkpoint"
LEAVES_SUFFIX = ".leaves"
_SIZE = re.compile(r"(0|[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise NoteError("malformed checkpoint: expected origin, size and root lines")
        origin, size, root = lines[0], lines[1], lines[2]
        if not origin or " " in origin or "+" in origin:
            raise NoteError(f"malformed checkpoint origin {origin!r}")
        if not _SIZE.match(size):
            raise NoteError(f"malformed checkpoint size {size!r}")
        try:
            raw = base64.b64decode(root, validate=True)
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise NoteError("malformed checkpoint root hash")
        if any(not extra for extra in lines[3:-1]):
            raise NoteError("malformed checkpoint: empty extension line")
        return cls(origin, int(size), raw)


def session_stem(session: str) -> str:
    """The session's file name without `.jsonl`: the last part of its origin and its checkpoint's name."""
    return session_filename(session)[: -len(SESSION_SUFFIX)]


def session_origin(vault_origin: str, session: str) -> str:
    return f"{vault_origin}/{session_stem(session)}"


def checkpoint_path(vault: Vault, session: str) -> Path:
    return vault.seals_dir / (session_stem(session) + CHECKPOINT_SUFFIX)


def read_checkpoint_note(vault: Vault, session: str) -> bytes | None:
    """The checkpoint note's bytes; None when there is none (a symlink counts as none: journal/confine.py)."""
    return read_inside(vault.root, ("seals", checkpoint_path(vault, session).name))


def write_checkpoint_note(vault: Vault, session: str, note: bytes) -> Path:
    vault.seals_dir.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(vault, session)
    write_atomically(path, note)
    return path


def checkpoint_stems(vault: Vault) -> list[str]:
    """Stems of the checkpoint files present (a checkpoint may outlive its deleted session)."""
    if not vault.seals_dir.is_dir():
        return []
    return sorted(p.name[: -len(CHECKPOINT_SUFFIX)] for p in vault.seals_dir.glob("*" + CHECKPOINT_SUFFIX))


@contextmanager
def seals_lock(vault: Vault) -> Iterator[None]:
    """Exclusive across processes: one round of sealing (checkpoints + index) at a time per vault."""
    vault.seals_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(vault.seals_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def leaves_path(vault: Vault, session: str) -> Path:
    return vault.seals_dir / (session_stem(session) + LEAVES_SUFFIX)


def write_leaves(vault: Vault, session: str, leaf_hashes: bytes) -> None:
    """Keep `seals/<stem>.leaves`, the leaf hashes (32 bytes each) of the entries sealed so far, so a
    verifier can say *which* entry a rewrite changed. Unsigned and only a hint: it counts only when
    its first N leaves hash to a signed root. Appended when it is a prefix of the new leaves, else
    replaced atomically."""
    path = leaves_path(vault, session)
    try:
        have = path.stat().st_size
    except FileNotFoundError:
        have = -1
    if 0 <= have <= len(leaf_hashes) and have % 32 == 0:
        with open(path, "r+b") as f:
            if f.read(min(have, 32 * 64)) == leaf_hashes[: min(have, 32 * 64)]:  # the sealer keeps it a prefix
                f.seek(have)
                f.write(leaf_hashes[have:])
                return
    write_atomically(path, leaf_hashes)


def read_leaves(vault: Vault, session: str) -> bytes | None:
    return read_inside(vault.root, ("seals", leaves_path(vault, session).name))
