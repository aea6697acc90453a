"""One round of sealing: a signed checkpoint per session, witness cosignatures, the signed vault index.

The sealer never signs a checkpoint inconsistent with one it signed before (tlog-checkpoint: a log
MUST NOT): before signing size n of a session, the tree's root at the size of the session's current
checkpoint and of its index record must be the roots recorded there, and a witness that has seen a
larger or different tree must not answer 409/422. Otherwise the session is refused (SealRefused): the
file changed under the seal, and re-sealing it would launder the change.

A witness that cannot be reached is reported in the outcome (`witness_problems`) and the checkpoint
is written without its cosignature: recording never waits for a witness.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from journal.checkpoint.checkpoint import (
    Checkpoint,
    checkpoint_stems,
    read_checkpoint_note,
    seals_lock,
    session_origin,
    session_stem,
    write_checkpoint_note,
    write_leaves,
)
from journal.checkpoint.merkle import MerkleTree
from journal.checkpoint.note import NoteError, Signature, Signer, open_note, parse_note, sign_note
from journal.checkpoint.vault_index import IndexedSession, VaultIndex, index_path, read_index, write_index
from journal.checkpoint.witness import WitnessClient, WitnessUnavailable
from journal.vault import Vault, VaultError

log = logging.getLogger(__name__)


class SealRefused(VaultError):
    """A session (or the vault) that must not be sealed as it is; the message says why."""


@dataclass
class SealOutcome:
    session: str
    size: int
    path: Path | None = None
    cosigned_by: list[str] = field(default_factory=list)
    witness_problems: list[str] = field(default_factory=list)
    refused: str | None = None


class Sealer:
    def __init__(self, vault: Vault, signer: Signer, witnesses: list[WitnessClient] | None = None) -> None:
        from journal.store.s3_seals import seal_mirror

        self.vault = vault
        # with `--blobs s3://...` (BROKER_BLOBS) each round is copied to the bucket too (journal/store/s3_seals.py)
        self.mirror = seal_mirror(os.environ.get("BROKER_BLOBS"))
        self.signer = signer
        self.verifier = signer.verifier()
        self.witnesses = witnesses or []

    def seal(self, trees: dict[str, MerkleTree], coverage: dict[tuple[str, str, str], int] | None = None,
             ) -> list[SealOutcome]:
        """Checkpoint each session's tree (an empty tree is skipped), then rewrite the index."""
        outcomes = []
        with seals_lock(self.vault):
            origin = self.vault.origin(create=True, prefix=self.signer.name)
            assert origin is not None
            index = self._index(origin)
            for session, tree in trees.items():
                if tree.size == 0:
                    continue
                try:
                    outcomes.append(self._seal_one(origin, index, session, tree))
                except SealRefused as exc:
                    log.error("not sealed: %s", exc)
                    outcomes.append(SealOutcome(session, tree.size, refused=str(exc)))
            for (stem, host, what), n in (coverage or {}).items():
                index.add_coverage(stem, host, what, n)
            write_index(self.vault, index, self.signer)
            if self.mirror is not None:
                self.mirror.copy(outcomes, index_path(self.vault))
        return outcomes

    def _index(self, origin: str) -> VaultIndex:
        try:
            index = read_index(self.vault, self.verifier)
        except NoteError as exc:
            raise SealRefused(f"the vault index does not verify with this key ({exc}); "
                              "run `broker verify --seal-key` and move the index aside to start a new one") from None
        if index is not None:
            if index.origin != origin:
                raise SealRefused(f"the vault index names origin {index.origin!r}, VAULT.json {origin!r}")
            return index
        # No index (first round, or deleted): start from the checkpoints that verify, so the sessions
        # they name stay listed.
        index = VaultIndex(origin)
        for stem in checkpoint_stems(self.vault):
            try:
                msg = (self.vault.seals_dir / f"{stem}.checkpoint").read_bytes()
                cp = Checkpoint.parse(open_note(msg, [self.verifier]).text)
            except (OSError, NoteError):
                continue
            if cp.origin == f"{origin}/{stem}":
                index.sessions[stem] = IndexedSession(cp.size, cp.root)
        return index

    def _seal_one(self, origin: str, index: VaultIndex, session: str, tree: MerkleTree) -> SealOutcome:
        stem = session_stem(session)
        prior_note = read_checkpoint_note(self.vault, session)
        prior: Checkpoint | None = None
        if prior_note is not None:
            try:
                prior = Checkpoint.parse(open_note(prior_note, [self.verifier]).text)
            except NoteError as exc:
                raise SealRefused(f"{session}: its checkpoint does not verify with this key ({exc})") from None
            if prior.origin != f"{origin}/{stem}":
                raise SealRefused(f"{session}: its checkpoint names origin {prior.origin!r}")
        for what, head in (("checkpoint", prior), ("vault index", index.sessions.get(stem))):
            if head is None:
                continue
            if head.size > tree.size:
                raise SealRefused(f"{session}: the {what} covers {head.size} entries, the file holds {tree.size}")
            if tree.root(head.size) != head.root:
                raise SealRefused(f"{session}: the first {head.size} entries differ from those in the {what}")
        cp = Checkpoint(session_origin(origin, session), tree.size, tree.root())
        outcome = SealOutcome(session, tree.size)
        if prior is not None and prior.size == tree.size and not self.witnesses:
            outcome.path = self.vault.seals_dir / f"{stem}.checkpoint"  # nothing new to sign
            index.sessions[stem] = IndexedSession(cp.size, cp.root)
            return outcome
        text = cp.body()
        note = sign_note(text, self.signer)
        cosigs: list[Signature] = []
        for w in self.witnesses:
            try:
                got = self._cosign(w, note, text, tree, prior, prior_note)
                cosigs.extend(got)
                outcome.cosigned_by.extend(s.name for s in got)
            except (WitnessUnavailable, NoteError) as exc:
                outcome.witness_problems.append(str(exc))
                log.warning("%s: no cosignature: %s", session, exc)
        full = note + "".join(s.line() for s in cosigs).encode()
        outcome.path = write_checkpoint_note(self.vault, session, full)
        write_leaves(self.vault, session, tree.leaf_hashes())
        index.sessions[stem] = IndexedSession(cp.size, cp.root)
        return outcome

    def _cosign(self, w: WitnessClient, note: bytes, text: str, tree: MerkleTree, prior: Checkpoint | None,
                prior_note: bytes | None) -> list[Signature]:
        origin = Checkpoint.parse(text).origin
        old = w.sizes.get(origin, 0)  # what it cosigned last (this process), else what the checkpoint shows
        if not old and prior is not None and prior_note is not None and w.key is not None:
            names = {(s.name, s.key_id) for s in parse_note(prior_note).sigs}
            if (w.key.name, w.key.key_id) in names:
                old = prior.size
        if old > tree.size:
            old = 0  # let the witness say its size (409)
        for _ in range(2):
            answer = w.add_checkpoint(note, old, tree.consistency_proof(old) if old else [])
            if answer.status == 200:
                sigs = w.cosignatures(answer.body, text)
                w.sizes[origin] = tree.size
                return sigs
            if answer.status == 409:
                try:
                    theirs = int(answer.body.strip())
                except ValueError:
                    raise WitnessUnavailable(f"witness {w.url}: 409 without a size") from None
                if theirs > tree.size:
                    raise SealRefused(f"witness {w.url} has cosigned {theirs} entries of this session, the file "
                                      f"holds {tree.size}: entries were cut off")
                old = theirs
                continue
            if answer.status == 422:
                raise SealRefused(f"witness {w.url} refused the checkpoint as inconsistent with what it saw: "
                                  f"{answer.body.decode(errors='replace').strip()}")
            raise WitnessUnavailable(f"witness {w.url}: HTTP {answer.status}: "
                                     f"{answer.body.decode(errors='replace').strip()[:200]}")
        raise WitnessUnavailable(f"witness {w.url}: its size kept changing")
