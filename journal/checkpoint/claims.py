"""What a session's checkpoint note claims, read for display and not verified.

Checking a signature takes the log's and the witnesses' public keys, which the vault does not hold
(`broker verify --seal-key ... --witness-key ...` checks them), so readers that only show a note (the
sessions list, the inspector's evidence page) read it here, once, and say "claims". The cosignature
time is read from the signature bytes as C2SP `cosignature/v1` lays them out (key ID, 8-byte
big-endian time, Ed25519 signature).
"""

from __future__ import annotations

import base64

from journal.checkpoint.checkpoint import Checkpoint
from journal.checkpoint.note import NoteError, Signature, parse_note

_KEY_ID = 4
_SIG = 64
_TIME = 8


def signature_claims(sig: Signature) -> dict:
    """One signature line as claimed: its key name and ID, and a cosignature's time when it has one."""
    raw = base64.b64decode(sig.b64)
    cosigned_at = None
    if len(raw) == _KEY_ID + _TIME + _SIG:
        cosigned_at = int.from_bytes(raw[_KEY_ID:_KEY_ID + _TIME], "big")
    return {"name": sig.name, "key_id": sig.key_id.hex(), "cosigned_at": cosigned_at}


def checkpoint_claims(note: bytes | None) -> dict | None:
    """The checkpoint note read for display (signatures unchecked): `origin`, `size`, `root`, `signer`
    (the log's signature line) and `witnesses`; only `error` when it does not parse; None for no note."""
    if note is None:
        return None
    try:
        parsed = parse_note(note)
        body = Checkpoint.parse(parsed.text)
    except NoteError as exc:
        return {"error": str(exc)}
    sigs = [signature_claims(s) for s in parsed.sigs]
    return {"error": None, "origin": body.origin, "size": body.size, "root": base64.b64encode(body.root).decode(),
            "signer": sigs[0], "witnesses": sigs[1:]}
