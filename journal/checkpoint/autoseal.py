"""Sealing while the broker records: a checkpoint every N entries or T seconds, and at a clean stop.

The writer calls `Autosealer.appended(session, entries)` after each durable batch (writer
`on_durable`). That only queues the (seq, hash) pairs: the Merkle trees, the signing, the file writes
and the witness round trips happen in the autosealer's own thread, so the recording path never waits
for them, and a witness that is down only delays its cosignature (reported in the log).
`note_gap` takes the declared coverage (calls the capture point did not record), which goes into the
signed vault index with the next round.

A session seen for the first time in this process has its tree built from its entries once (the chain
verified as it is read), read through the store protocol (`lines_after`, journal/store/interface.py):
the journal may be a file vault or a database, while the checkpoints always go into a vault directory
(`home`: the file vault itself, or the one named for a database store).

The key is read from its file into memory at start and never written
anywhere: not into the vault, a log line or a temp file.

Defaults: `DEFAULT_ENTRIES` entries or `DEFAULT_SECONDS` seconds, whichever comes first.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from dataclasses import dataclass, field

from journal.checkpoint.checkpoint import session_stem
from journal.checkpoint.merkle import MerkleTree
from journal.checkpoint.note import Signer, load_signer, load_verifier
from journal.checkpoint.sealer import Sealer
from journal.checkpoint.witness import WitnessClient
from journal.errors import InputError
from journal.reader import SessionTail
from journal.store.interface import SessionLines
from journal.vault import SessionIdError, Vault
from journal.verify import verify_lines

log = logging.getLogger(__name__)
DEFAULT_ENTRIES = 1000
DEFAULT_SECONDS = 30.0


@dataclass
class AutosealConfig:
    key_path: str
    entries: int = DEFAULT_ENTRIES
    seconds: float = DEFAULT_SECONDS
    witnesses: list[str] = field(default_factory=list)
    witness_keys: list[str] = field(default_factory=list)
    vault_dir: str = ""  # where the checkpoints go when the journal is a database store (a file vault: itself)

    def service_args(self) -> list[str]:
        """The same settings as `python -m broker.proxy.service` options (the key's path, never the key)."""
        args = ["--seal-key", self.key_path, "--checkpoint-entries", str(self.entries),
                "--checkpoint-seconds", str(self.seconds)]
        if self.vault_dir:
            args += ["--checkpoint-vault", self.vault_dir]
        for u in self.witnesses:
            args += ["--witness", u]
        for k in self.witness_keys:
            args += ["--witness-key", k]
        return args

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seal-key", default="", help="signer key file: write checkpoints as entries are recorded")
        p.add_argument("--checkpoint-entries", type=int, default=DEFAULT_ENTRIES)
        p.add_argument("--checkpoint-seconds", type=float, default=DEFAULT_SECONDS)
        p.add_argument("--witness", action="append", default=[])
        p.add_argument("--witness-key", action="append", default=[])
        p.add_argument("--checkpoint-vault", default="", help="vault directory for the checkpoints of a database store")

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> AutosealConfig | None:
        if not ns.seal_key:
            return None
        return cls(ns.seal_key, ns.checkpoint_entries, ns.checkpoint_seconds, ns.witness, ns.witness_key,
                   ns.checkpoint_vault)

    def home(self, journal_home: Vault | None) -> Vault:
        """The vault the checkpoints go into: the journal's own (a file vault), else `vault_dir`."""
        if journal_home is not None:
            return journal_home
        if not self.vault_dir:
            from journal.store.interface import StoreError

            raise StoreError("a database store keeps no checkpoints: name a vault directory for them "
                             "(AutosealConfig.vault_dir, --checkpoint-vault DIR); `broker verify --store URL "
                             "--vault DIR --seal-key PUB` then checks them")
        return Vault.create(self.vault_dir)


class Autosealer:
    def __init__(self, vault: Vault, config: AutosealConfig, signer: Signer | None = None, *,
                 source: SessionLines | None = None) -> None:
        """`vault`: where the checkpoints go; `source`: where the entries are read (default: that vault)."""
        if config.entries < 1 or config.seconds <= 0:
            raise InputError("--checkpoint-entries must be >= 1 and --checkpoint-seconds > 0")
        self.vault = vault
        self.source: SessionLines = source if source is not None else SessionTail(vault)
        self.config = config
        signer = signer or load_signer(config.key_path)
        keys = [load_verifier(k) for k in config.witness_keys]
        clients = [WitnessClient(u, keys[i] if i < len(keys) else None) for i, u in enumerate(config.witnesses)]
        self.sealer = Sealer(vault, signer, clients)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a log line per witness round trip
        self.rounds = 0
        self.problems: list[str] = []
        self._queue: list[tuple[str, list[tuple[int, str]]]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._trees: dict[str, MerkleTree] = {}
        self._broken: set[str] = set()
        self._unsealed: dict[str, int] = {}
        self._gaps: dict[tuple[str, str, str], int] = {}
        self._thread = threading.Thread(target=self._run, name="autoseal", daemon=True)
        self._thread.start()

    def appended(self, session: str, entries: list[dict]) -> None:
        """Writer hook, after the entries are durable: queue them (cheap; never raises)."""
        with self._cond:
            self._queue.append((session, [(e["seq"], e["hash"]) for e in entries]))
            self._cond.notify()

    def note_gap(self, session: str, host: str, what: str, n: int = 1) -> None:
        """Declared coverage: `n` calls of `session` to `host` the capture point did not record
        (`what`: passed, token or refused); added to the vault index with the next round."""
        try:
            stem = session_stem(session)
        except SessionIdError:
            stem = "-"  # an id that maps to no file: its gaps still count, under "-"
        host = host or "-"
        with self._cond:
            key = (stem, host, what)
            self._gaps[key] = self._gaps.get(key, 0) + n

    def close(self) -> None:
        """Seal what is unsealed (the clean stop's checkpoint) and stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            with self._cond:
                if not self._queue and not self._closing:
                    self._cond.wait(max(0.0, self.config.seconds - (time.monotonic() - last)))
                batch, self._queue = self._queue, []
                closing = self._closing
            for session, items in batch:
                self._take(session, items)
            due = time.monotonic() - last >= self.config.seconds
            ready = {s for s, n in self._unsealed.items() if n and (closing or due or n >= self.config.entries)}
            gaps: dict[tuple[str, str, str], int] = {}
            if ready or due or closing:
                with self._cond:  # swapped, never shared: note_gap may add to the new one meanwhile
                    gaps, self._gaps = self._gaps, {}
            if ready or gaps:
                self._seal(ready, gaps)
            if due or ready:
                last = time.monotonic()
            if closing:
                with self._cond:
                    if not self._queue:
                        return

    def _take(self, session: str, items: list[tuple[int, str]]) -> None:
        if session in self._broken:
            return
        tree = self._trees.get(session)
        if tree is None:
            tree = self._load(session)
            if tree is None:
                return
        for seq, digest in items:
            if seq <= tree.size:
                continue  # already read from the file
            if seq != tree.size + 1:  # another process appended meanwhile: read the file again
                tree = self._load(session)
                if tree is None or tree.size < seq:
                    return
                continue
            tree.append(bytes.fromhex(digest))
            self._unsealed[session] = self._unsealed.get(session, 0) + 1

    def _load(self, session: str) -> MerkleTree | None:
        tree = MerkleTree()
        report = verify_lines(session, self.source.lines_after(session),
                              on_entry=lambda entry: tree.append(bytes.fromhex(entry["hash"])))
        if not report.intact and report.kind != "torn_tail":  # a line being written is no damage
            self._problem(f"{session}: not sealed: the file is broken at seq {report.broken_at_seq} "
                          f"({report.kind}); run `broker verify`")
            self._broken.add(session)
            return None
        self._trees[session] = tree
        self._unsealed[session] = tree.size  # whatever this process has not sealed yet
        return tree

    def _seal(self, sessions: set[str], gaps: dict[tuple[str, str, str], int]) -> None:
        try:
            outcomes = self.sealer.seal({s: self._trees[s] for s in sessions}, coverage=gaps)
        except Exception as exc:  # noqa: BLE001 - sealing must never stop recording; it is reported
            self._problem(f"sealing failed: {exc}")
            with self._cond:  # the gaps go with the next round
                for k, n in gaps.items():
                    self._gaps[k] = self._gaps.get(k, 0) + n
            return
        self.rounds += 1
        for o in outcomes:
            if o.refused:
                self._problem(f"{o.session}: not sealed: {o.refused}")
                self._broken.add(o.session)
            else:
                self._unsealed[o.session] = 0
            for p in o.witness_problems:
                self._problem(f"{o.session}: checkpoint {o.size} not cosigned: {p}")

    def _problem(self, message: str) -> None:
        log.warning("checkpoints: %s", message)
        self.problems.append(message)
