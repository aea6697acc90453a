"""What `broker verify --seal-key VKEY` checks beyond the chain: checkpoints, the vault index, witnesses.

Kinds (each at the first seq it concerns):
- `session_missing` (seq 1): the index or a checkpoint names a session whose file is gone;
- `seal_missing` (seq 1): the index lists the session but its checkpoint is gone; or, with
  `--witness-key`, the checkpoint carries no cosignature of that witness;
- `seal_rollback` (first seq past the checkpoint): the checkpoint is older than the index's record
  or than what a witness has cosigned (an older genuine checkpoint put back);
- `seal_mismatch`: the checkpoint's signature fails or is not the given key's, its origin is another
  vault's or session's, the file holds fewer entries than it covers (at the first missing seq), or
  the sealed entries hash to another root (at the first changed seq, found with `seals/<stem>.leaves`
  when its leaves hash to the signed root; else seq 1: a root alone cannot say which entry changed);
- `unsealed_tail` (first unsealed seq): entries after the last checkpoint. A note with their count,
  a break only under `--require-sealed`.

The chain's own break (journal.verify) comes first; seal findings after it become notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from journal.checkpoint.checkpoint import (
    Checkpoint,
    checkpoint_stems,
    read_checkpoint_note,
    read_leaves,
    session_stem,
)
from journal.checkpoint.merkle import MerkleTree
from journal.checkpoint.note import NoteError, Verifier, open_note
from journal.checkpoint.vault_index import VaultIndex, index_path, read_index
from journal.checkpoint.witness import WitnessClient, WitnessUnavailable
from journal.vault import SESSION_SUFFIX, SessionIdError, Vault, session_from_filename
from journal.verify import SessionReport, verify_session


def session_tree(vault: Vault, session: str, **kwargs) -> tuple[SessionReport, MerkleTree]:
    """Verify a session's chain and build the Merkle tree of the entries that verified."""
    tree = MerkleTree()

    def on_entry(entry: dict) -> None:
        tree.append(bytes.fromhex(entry["hash"]))

    report = verify_session(vault, session, on_entry=on_entry, **kwargs)
    return report, tree


@dataclass
class VaultAudit:
    reports: list[SessionReport]
    vault_problems: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail) for the vault itself
    vault_notes: list[str] = field(default_factory=list)
    coverage: list[str] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.vault_problems and all(r.intact for r in self.reports)


def _break(report: SessionReport, seq: int, kind: str, detail: str) -> None:
    if report.intact:
        report.intact, report.broken_at_seq, report.kind, report.detail = False, seq, kind, detail
    else:
        report.notes.append(f"{kind} (seq {seq}): {detail}")


def audit_vault(
    vault: Vault, checked: dict[str, tuple[SessionReport, MerkleTree]], key: Verifier, *,
    witness_keys: Sequence[Verifier] = (), witnesses: Sequence[WitnessClient] = (), require_sealed: bool = False,
    selected: list[str] | None = None,
) -> VaultAudit:
    """Check the verified sessions in `checked` (chain report and tree) against their checkpoints, the
    index and witnesses; sessions the index or a checkpoint names without a file are added."""
    audit = VaultAudit([r for r, _ in checked.values()])
    origin = vault.origin()
    index: VaultIndex | None = None
    try:
        index = read_index(vault, key)
    except NoteError as exc:
        audit.vault_problems.append(("seal_mismatch", f"the vault index {index_path(vault).name} does not "
                                     f"verify: {exc}"))
    stems = set(checkpoint_stems(vault)) | set(index.sessions if index else ())
    if index is None and not audit.vault_problems and (stems or checked):
        if stems:
            audit.vault_problems.append(("seal_missing", f"checkpoints exist but the signed vault index "
                                         f"({index_path(vault).name}) is gone: deleted sessions would go unseen"))
        else:
            audit.vault_notes.append("never sealed: no checkpoints and no vault index")
    if index is not None:
        if origin is not None and index.origin != origin:
            audit.vault_problems.append(("seal_mismatch", f"the vault index is for origin {index.origin!r}, "
                                         f"this vault is {origin!r} (copied from another vault?)"))
        origin = index.origin  # the signed origin is the one that counts
        for (stem, host, what), n in sorted(index.coverage.items()):
            audit.coverage.append(f"{stem}: {host}: {n} {what}")
    if origin is None and stems:
        audit.vault_problems.append(("seal_mismatch", "VAULT.json names no origin, yet checkpoints exist"))
    by_stem = {session_stem(s): s for s in checked}
    present = set(vault.sessions()) if stems - set(by_stem) else set()
    for stem in sorted(stems - set(by_stem)):
        try:
            session = session_from_filename(stem + SESSION_SUFFIX)
        except SessionIdError:
            continue
        if selected is not None and session not in selected:
            continue
        if session in present:
            continue  # present but not selected
        r = SessionReport(session)
        sealed = index.sessions[stem].size if index and stem in index.sessions else None
        _break(r, 1, "session_missing", "the session file is gone; "
               + (f"the vault index sealed {sealed} entries" if sealed else "its checkpoint remains"))
        audit.reports.append(r)
    for session, (report, tree) in checked.items():
        _audit_session(vault, session, report, tree, origin, index, key, list(witness_keys), list(witnesses),
                       require_sealed)
    return audit


def check_session_checkpoint(vault: Vault, report: SessionReport, verified: bytes, key: Verifier) -> None:
    """What `broker verify --seal-key VKEY` checks beyond the chain, for one session whose chain was
    already verified into `report` (replay's single pass): its checkpoint, the vault index, the
    `.leaves` hint. A finding breaks `report` at the seq it concerns (a vault-level one, such as an index
    that does not verify, at seq 1: verify fails the whole vault for it) or becomes one of its notes.

    `verified`: the 32-byte hashes of the entries the verifier passed, in order (its first report.entries count).
    The tree is built from them, not from the file read again: whoever writes the vault could show that read the
    sealed file and the verifier a rewritten one (every hash recomputed), and the rewrite would pass as sealed."""
    tree = MerkleTree(verified[i : i + 32] for i in range(0, 32 * report.entries, 32))
    if tree.size != report.entries:
        raise ValueError(f"{tree.size} verified hashes given for {report.entries} entries")
    audit = audit_vault(vault, {report.session: (report, tree)}, key, selected=[report.session])
    for kind, detail in audit.vault_problems:
        _break(report, 1, kind, f"vault: {detail}")
    report.notes.extend(f"vault: {note}" for note in audit.vault_notes)


def _audit_session(
    vault: Vault, session: str, report: SessionReport, tree: MerkleTree, origin: str | None,
    index: VaultIndex | None, key: Verifier, witness_keys: list[Verifier], witnesses: list[WitnessClient],
    require_sealed: bool,
) -> None:
    stem = session_stem(session)
    entries = tree.size
    indexed = index.sessions.get(stem) if index else None
    note = read_checkpoint_note(vault, session)
    if note is None:
        if indexed is not None:
            _break(report, 1, "seal_missing", f"the checkpoint is gone; the vault index sealed {indexed.size} entries")
            _check_head(vault, report, tree, indexed.size, indexed.root, "the vault index")
        elif require_sealed and entries:
            _break(report, 1, "unsealed_tail", f"no checkpoint: {entries} entries are not sealed")
        elif entries:
            report.notes.append(f"unsealed_tail: no checkpoint; {entries} entries are not sealed")
        _ask_witnesses(vault, report, tree, session, origin, None, key, witness_keys, witnesses)
        return
    try:
        opened = open_note(note, [key, *witness_keys])
        if not any(v is key for v, _, _ in opened.verified):
            raise NoteError(f"not signed by the given seal key {key.name}+{key.key_id.hex()}")
        cp = Checkpoint.parse(opened.text)
    except NoteError as exc:
        _break(report, 1, "seal_mismatch", f"checkpoint: {exc}")
        return
    expected = f"{origin}/{stem}"
    if cp.origin != expected:
        _break(report, 1, "seal_mismatch", f"the checkpoint is for origin {cp.origin!r}, not {expected!r} "
               "(copied in from another vault or session)")
        return
    cosigners = [v.name for v, _, ts in opened.verified if ts is not None]
    for wk in witness_keys:
        if wk.name not in cosigners:
            _break(report, 1, "seal_missing",
                   f"the checkpoint ({cp.size} entries) is not cosigned by witness {wk.name}")
    if report.intact or entries >= cp.size:
        _check_head(vault, report, tree, cp.size, cp.root, "the checkpoint")
    if indexed is not None:
        if indexed.size > cp.size:
            _break(report, min(entries, cp.size) + 1, "seal_rollback",
                   f"the checkpoint covers {cp.size} entries, the vault index sealed {indexed.size}: "
                   "an older checkpoint was put back")
            _check_head(vault, report, tree, indexed.size, indexed.root, "the vault index")
        elif indexed.size == cp.size and indexed.root != cp.root:
            _break(report, 1, "seal_mismatch", "the checkpoint and the vault index disagree on the root")
    _ask_witnesses(vault, report, tree, session, origin, cp, key, witness_keys, witnesses)
    if report.intact and entries > cp.size:
        tail = entries - cp.size
        if require_sealed:
            _break(report, cp.size + 1, "unsealed_tail", f"{tail} entries after the checkpoint are not sealed")
        else:
            report.notes.append(f"unsealed_tail: {tail} entries after the checkpoint (seq {cp.size + 1}-{entries})")
    if report.intact:
        by = f", cosigned by {', '.join(cosigners)}" if cosigners else ""
        report.notes.append(f"checkpoint checked: {cp.size} entries{by}")


def _check_head(vault: Vault, report: SessionReport, tree: MerkleTree, size: int, root: bytes, what: str) -> None:
    if tree.size < size:
        _break(report, tree.size + 1, "seal_mismatch",
               f"{what} covers {size} entries, the file holds {tree.size}: entries were cut off")
    elif tree.root(size) != root:
        seq = _first_changed(vault, report.session, tree, size, root)
        where = f"seq {seq} is not the entry that was sealed" if seq else f"entries 1-{size} do not hash to the root"
        _break(report, seq or 1, "seal_mismatch", f"{where} in {what}: the file was rewritten")


def _first_changed(vault: Vault, session: str, tree: MerkleTree, size: int, root: bytes) -> int | None:
    """The first seq whose hash differs from the sealed one, from `seals/<stem>.leaves` when its first
    `size` leaves hash to the signed root; None when that hint is missing or not genuine."""
    data = read_leaves(vault, session)
    if data is None or len(data) < 32 * size:
        return None
    sealed = MerkleTree.from_leaf_hashes(data[: 32 * size])
    if sealed.root() != root:
        return None
    for i in range(size):
        if sealed.leaf_hash_at(i) != tree.leaf_hash_at(i):
            return i + 1
    return None


def _ask_witnesses(
    vault: Vault, report: SessionReport, tree: MerkleTree, session: str, origin: str | None, cp: Checkpoint | None,
    key: Verifier, witness_keys: list[Verifier], witnesses: list[WitnessClient],
) -> None:
    if origin is None:
        return
    sorigin = f"{origin}/{session_stem(session)}"
    for w in witnesses:
        try:
            note = w.latest(sorigin)
        except WitnessUnavailable as exc:
            report.notes.append(f"witness not checked: {exc}")
            continue
        if note is None:  # no monitoring endpoint, or nothing for this origin: ask the tlog-witness way
            _probe_witness(vault, report, tree, session, cp, w)
            continue
        try:
            opened = open_note(note, [key, *witness_keys])
            seen = Checkpoint.parse(opened.text)
        except NoteError as exc:
            report.notes.append(f"witness {w.url} answered a checkpoint that does not verify: {exc}")
            continue
        have = cp.size if cp else 0
        if seen.size > have:
            _break(report, min(tree.size, have) + 1, "seal_rollback",
                   f"witness {w.url} has cosigned {seen.size} entries, the vault's checkpoint covers {have}")
        _check_head(vault, report, tree, seen.size, seen.root, f"the checkpoint witness {w.url} cosigned")


def _probe_witness(vault: Vault, report: SessionReport, tree: MerkleTree, session: str, cp: Checkpoint | None,
                   w: WitnessClient) -> None:
    note = read_checkpoint_note(vault, session)
    if cp is None or note is None:
        report.notes.append(f"witness {w.url} has no checkpoint for this session")
        return
    try:
        size = w.probe_size(note, cp.size)
    except WitnessUnavailable as exc:
        report.notes.append(f"witness not checked: {exc}")
        return
    except NoteError as exc:
        _break(report, 1, "seal_mismatch", str(exc))
        return
    if size is None:
        report.notes.append(f"witness {w.url} does not know this session")
    elif size > cp.size:
        _break(report, min(tree.size, cp.size) + 1, "seal_rollback",
               f"witness {w.url} has cosigned {size} entries, the vault's checkpoint covers {cp.size}")
