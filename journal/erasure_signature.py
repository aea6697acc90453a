"""Who may erase: a tombstone counts only when it is signed by a key the verifier is given.

Anyone who can write the vault (or insert into the database as the broker's role) can write a tombstone
("erased by dpo@example.com, GDPR request #42") for a blob nobody erased. So a tombstone is only a claim;
the verifier honours it (reports the blob erased, not missing) only when its `note` is a C2SP signed note
(journal/checkpoint/note.py, the format of the other keys) by one of the `--erasure-key` verifier keys,
over exactly this text:

    connector-broker/erasure/1
    <the tombstone's canonical JSON without `note`>

`broker erase --signing-key NAME.key` writes it. Without a matching signature the blob is reported
missing (or present, when its bytes are there), never erased.
"""

from __future__ import annotations

from journal.canonical import CanonicalError, canonical_bytes
from journal.checkpoint.note import NoteError, Signer, Verifier, open_note, sign_note

HEADER = "connector-broker/erasure/1\n"
_FIELDS = ("sha256", "size", "erased_at", "erased_by", "reason")


def erasure_text(tombstone: dict) -> str:
    """The text an erasure key signs for `tombstone` (its five fields, canonical JSON)."""
    fields = {k: tombstone.get(k) for k in _FIELDS}
    return HEADER + canonical_bytes(fields).decode("utf-8") + "\n"


def sign_tombstone(tombstone: dict, signer: Signer) -> str:
    """The signed note to store as the tombstone's `note`."""
    return sign_note(erasure_text(tombstone), signer).decode("utf-8")


def erasure_signer(tombstone: dict, keys: list[Verifier]) -> str | None:
    """The name of the given key that signed this tombstone, or None when none did (no note, another key,
    a note over other fields, a bad signature)."""
    note = tombstone.get("note")
    if not keys or not isinstance(note, str):
        return None
    try:
        opened = open_note(note.encode("utf-8"), keys)
    except (NoteError, UnicodeError):
        return None
    try:
        signed = erasure_text(tombstone)
    except CanonicalError:  # a field with no canonical form (2**70, a float): it cannot be what was signed
        return None
    if opened.text != signed:
        return None
    return opened.verified[0][0].name
