"""A proof of one entry that a third party checks with nothing but the verifier key(s).

The bundle (`broker prove`) is one JSON object:

    {"format": "connector-journal-proof/1", "session": ..., "seq": N, "line": "<the entry's line>",
     "tree_size": S, "inclusion_proof": ["<base64 hash>", ...], "checkpoint": "<the signed note>"}

Checking it (`broker verify-proof`): the line is an entry in canonical form whose `hash` matches its
content; the checkpoint verifies with the seal key (and each required witness key); its origin names the
entry's session; and the inclusion proof leads from the entry's hash (leaf N-1) to the checkpoint's
root at size S. The rest of the session stays private; blobs the entry references are not included
(their SHA-256 is in the entry, so bytes handed over separately can be checked against it).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from journal.canonical import CanonicalError, is_canonical_line
from journal.chain import entry_hash
from journal.checkpoint.audit import session_tree
from journal.checkpoint.checkpoint import Checkpoint, read_checkpoint_note, session_stem
from journal.checkpoint.merkle import ProofError, leaf_hash, verify_inclusion
from journal.checkpoint.note import NoteError, Verifier, open_note, parse_note
from journal.reader import session_lines
from journal.vault import Vault, VaultError

PROOF_FORMAT = "connector-journal-proof/1"


class BundleError(VaultError):
    """A proof that cannot be made, or a bundle that does not check out; the message says why."""


def make_bundle(vault: Vault, session: str, seq: int) -> dict:
    note = read_checkpoint_note(vault, session)
    if note is None:
        raise BundleError(f"session {session!r} has no checkpoint: run `broker seal` first")
    cp = Checkpoint.parse(parse_note(note).text)
    if not 1 <= seq <= cp.size:
        raise BundleError(f"seq {seq} is not covered by the checkpoint (1-{cp.size}); seal again to cover it")
    report, tree = session_tree(vault, session, check_blobs=False)
    if tree.size < cp.size or tree.root(cp.size) != cp.root:
        raise BundleError(f"session {session!r} no longer matches its checkpoint: run `broker verify --seal-key`")
    line = next(ln.data for ln in session_lines(vault, session) if ln.index == seq - 1)
    return {
        "format": PROOF_FORMAT, "session": session, "seq": seq, "line": line.rstrip(b"\n").decode(),
        "tree_size": cp.size,
        "inclusion_proof": [base64.b64encode(h).decode() for h in tree.inclusion_proof(seq - 1, cp.size)],
        "checkpoint": note.decode(),
    }


@dataclass
class BundleCheck:
    session: str
    seq: int
    tree_size: int
    cosigned_by: list[str]
    entry: dict


def check_bundle(bundle: dict, key: Verifier, witness_keys: Sequence[Verifier] = ()) -> BundleCheck:
    """Raise BundleError unless the bundle proves its entry under a checkpoint signed by `key`."""
    try:
        if bundle.get("format") != PROOF_FORMAT:
            raise BundleError(f"not a {PROOF_FORMAT} bundle")
        line = bundle["line"].encode()
        entry = orjson.loads(line)
        seq, size = bundle["seq"], bundle["tree_size"]
        proof = [base64.b64decode(h, validate=True) for h in bundle["inclusion_proof"]]
        note = bundle["checkpoint"].encode()
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BundleError(f"malformed proof bundle: {exc}") from None
    try:
        if not is_canonical_line(line, entry):
            raise BundleError("the entry's line is not in canonical form")
    except CanonicalError as exc:
        raise BundleError(f"the entry has no canonical form: {exc}") from None
    if not isinstance(entry, dict) or entry_hash(entry) != entry.get("hash"):
        raise BundleError("the entry's hash does not match its content")
    if entry.get("seq") != seq or entry.get("session") != bundle["session"]:
        raise BundleError("the bundle's seq or session is not the entry's")
    try:
        opened = open_note(note, [key, *witness_keys])
    except NoteError as exc:
        raise BundleError(f"checkpoint: {exc}") from None
    names = {v.name for v, _, ts in opened.verified if ts is None and v is key}
    if key.name not in names:
        raise BundleError(f"the checkpoint is not signed by {key.name}+{key.key_id.hex()}")
    cosigned = [v.name for v, _, ts in opened.verified if ts is not None]
    for wk in witness_keys:
        if wk.name not in cosigned:
            raise BundleError(f"the checkpoint is not cosigned by witness {wk.name}")
    try:
        cp = Checkpoint.parse(opened.text)
    except NoteError as exc:
        raise BundleError(str(exc)) from None
    if not cp.origin.endswith("/" + session_stem(entry["session"])):
        raise BundleError(f"the checkpoint's origin {cp.origin!r} is not this session's")
    if cp.size != size:
        raise BundleError(f"the bundle says tree size {size}, the checkpoint {cp.size}")
    try:
        verify_inclusion(seq - 1, size, leaf_hash(bytes.fromhex(entry["hash"])), proof, cp.root)
    except ProofError as exc:
        raise BundleError(f"inclusion proof: {exc}") from None
    return BundleCheck(entry["session"], seq, size, cosigned, entry)

