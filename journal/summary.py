"""One session in one line: entries, times, connectors, writes, evidence grades, chain and seal status.

`broker sessions` and the inspector's sessions list both show this; it is computed in the
verifier's single pass over the file (journal/verify.py), so what it says about the chain is the
verifier's verdict, not a second opinion.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from journal.confine import NotConfined
from journal.reader import RowSource, session_blocks
from journal.seal import read_seal
from journal.vault import Vault
from journal.verify import verify_session


def count_lines(vault: Vault, session: str) -> int:
    """Lines in a session file (entries, when the chain is broken and the verifier stopped early)."""
    if isinstance(vault, RowSource):  # a database store read in place: the same lines a pulled file holds
        return sum(len(block.lines) for block in session_blocks(vault, session))
    try:
        f = os.fdopen(vault.open_session(session), "rb")
    except NotConfined:  # not read (journal/confine.py); the verifier's report says why
        return 0
    with f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def summarize_session(vault: Vault, session: str, *, progress: Callable[[int], None] | None = None) -> dict:
    """The session's row: `session`, `entries`, `first_ts`, `last_ts`, `connectors`, `writes`,
    `captures` (entries per evidence grade), `verifies`, `broken_at_seq`, `kind`, `detail`, `notes`,
    `bytes`, `sealed` (entries covered by a legacy seal file, or null) and `checkpoint` (see
    `checkpoint_status`). Neither seal nor checkpoint is checked here: that takes the log's public
    key (`broker verify --seal-key`)."""
    connectors: set[str] = set()
    captures: dict[str, int] = {}
    writes = 0

    def seen(entry: dict) -> None:
        nonlocal writes
        connectors.add(entry["connector"])
        captures[entry["capture"]] = captures.get(entry["capture"], 0) + 1
        writes += entry["effect"] == "write"

    r = verify_session(vault, session, progress=progress, on_entry=seen)
    seal = read_seal(vault, session)
    return {
        "session": session, "entries": r.entries if r.intact else count_lines(vault, session),
        "first_ts": r.first_ts, "last_ts": r.last_ts, "connectors": sorted(connectors),
        "writes": writes, "captures": dict(sorted(captures.items())), "verifies": r.intact,
        "broken_at_seq": r.broken_at_seq, "kind": r.kind, "detail": r.detail, "notes": r.notes,
        "bytes": r.bytes, "sealed": seal.entries if seal is not None else None,
        "checkpoint": checkpoint_status(vault, session),
    }


def checkpoint_status(vault: Vault, session: str) -> dict | None:
    """The sessions list's short form of what the checkpoint claims (journal/checkpoint/claims.py), not
    verified: `size` (entries covered), `signers` (the key names on its signature lines: the log's, then
    any witnesses'), or `error` when the file cannot be read as a checkpoint note. None when there is
    no checkpoint. (The checkpoint modules, and cryptography with them, are imported here: `broker verify`
    and `show` import this module and never need them.)"""
    from journal.checkpoint.checkpoint import read_checkpoint_note
    from journal.checkpoint.claims import checkpoint_claims

    claims = checkpoint_claims(read_checkpoint_note(vault, session))
    if claims is None:
        return None
    if claims["error"] is not None:
        return {"size": None, "signers": [], "error": claims["error"]}
    signers = [claims["signer"]["name"]] + [w["name"] for w in claims["witnesses"]]
    return {"size": claims["size"], "signers": signers, "error": None}
