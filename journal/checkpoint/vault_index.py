"""The signed vault index: every sealed session with its size and root, and the declared coverage.

A checkpoint proves a session's size and root, but only if it is there: deleting a session file
together with its checkpoint, or deleting a checkpoint, leaves nothing to check. The index, signed
with the same key and rewritten with every round of checkpoints, names every session ever sealed, so
`broker verify` reports those as `session_missing` / `seal_missing`, and an older checkpoint put back
as `seal_rollback`.

`seals/vault-index.note` is a C2SP signed note whose text is:

    connector-journal-index/1
    <vault origin>
    time <unix seconds>
    session <session stem> <size> <base64 root>        (one per session, sorted by stem)
    coverage <session stem> <host> <what> <count>      (declared coverage, see docs/checkpoints.md)

`<what>` is `passed` (no connector matched, passed through unrecorded), `token` (token exchange, left
out by rule) or `refused` (the capture point refused the call). The index never shrinks: a session
stays listed (with the largest size sealed) after its file is gone, which is the point.
"""

from __future__ import annotations

import base64
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from journal.checkpoint.note import NoteError, Signer, Verifier, open_note, sign_note
from journal.confine import read_inside
from journal.vault import Vault, write_atomically

INDEX_FORMAT = "connector-journal-index/1"
INDEX_NAME = "vault-index.note"
COVERAGE_KINDS = ("passed", "token", "refused")
_WORD = re.compile(r"[^\s]+\Z")


@dataclass(frozen=True)
class IndexedSession:
    size: int
    root: bytes


@dataclass
class VaultIndex:
    origin: str
    time: int = 0
    sessions: dict[str, IndexedSession] = field(default_factory=dict)  # stem -> latest sealed head
    coverage: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (stem, host, what) -> count

    def text(self) -> str:
        lines = [INDEX_FORMAT, self.origin, f"time {self.time}"]
        for stem in sorted(self.sessions):
            s = self.sessions[stem]
            lines.append(f"session {stem} {s.size} {base64.b64encode(s.root).decode()}")
        for (stem, host, what), n in sorted(self.coverage.items()):
            lines.append(f"coverage {stem} {host} {what} {n}")
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> VaultIndex:
        lines = text.split("\n")
        if len(lines) < 4 or lines[0] != INDEX_FORMAT or lines[-1] != "" or not lines[2].startswith("time "):
            raise NoteError(f"not a {INDEX_FORMAT} index")
        try:
            index = cls(lines[1], int(lines[2][5:]))
            for line in lines[3:-1]:
                parts = line.split(" ")
                if parts[0] == "session" and len(parts) == 4:
                    root = base64.b64decode(parts[3], validate=True)
                    if len(root) != 32:
                        raise ValueError("root is not 32 bytes")
                    index.sessions[parts[1]] = IndexedSession(int(parts[2]), root)
                elif parts[0] == "coverage" and len(parts) == 5 and parts[3] in COVERAGE_KINDS:
                    index.coverage[(parts[1], parts[2], parts[3])] = int(parts[4])
                else:
                    raise ValueError(f"unknown line {line[:40]!r}")
        except ValueError as exc:
            raise NoteError(f"malformed vault index: {exc}") from None
        return index

    def add_coverage(self, stem: str, host: str, what: str, count: int) -> None:
        if what not in COVERAGE_KINDS or not _WORD.match(host) or count < 0:
            raise NoteError(f"bad coverage record {stem} {host} {what} {count}")
        key = (stem, host, what)
        self.coverage[key] = self.coverage.get(key, 0) + count


def index_path(vault: Vault) -> Path:
    return vault.seals_dir / INDEX_NAME


def read_index(vault: Vault, verifier: Verifier) -> VaultIndex | None:
    """The index, its signature checked with `verifier`; None when there is none; NoteError when it
    does not verify or does not parse."""
    if not os.path.lexists(index_path(vault)):
        return None
    msg = read_inside(vault.root, ("seals", INDEX_NAME))
    if msg is None:
        raise NoteError(f"{INDEX_NAME} is not a regular file inside the vault (a symlink?); not read")
    opened = open_note(msg, [verifier])
    return VaultIndex.parse(opened.text)


def write_index(vault: Vault, index: VaultIndex, signer: Signer) -> None:
    index.time = int(time.time())
    vault.seals_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(index_path(vault), sign_note(index.text(), signer))
