"""The verifier: re-read a session file and report the first seq where the chain stops holding.

Checks per line, in order (the first failure decides the kind):

1. `torn_tail`: the last line has no final newline (a crash mid-write, or a cut).
2. `not_canonical`: the line is not JSON, or its bytes differ from the canonical form of what it
   parses to (whitespace, escapes, `1.0`, duplicate keys ...).
3. `contract_violation`: not exactly the fourteen keys with their types, or `session` is not
   the session the file is named for.
4. `edited`: `hash` does not match the entry's content.
5. chain: `seq` must be the line's position and `prev` the previous entry's hash, else
   `removed` (a gap: the expected seq is nowhere later in the file), `reordered` (a genuine
   entry out of place; the expected one comes later), `inserted` (a duplicate or an entry that
   does not belong to the chain) or `edited` (an entry changed and its hash recomputed: its own
   line holds, the next line's `prev` no longer names it, so the break is reported at the changed
   entry, not at the next one). The reported seq is a trust boundary: when the file cannot tell
   which of two entries was changed, the earlier one is named.
6. `blob_missing` / `blob_corrupt`: a blob the entry references is absent or its bytes do not hash
   to its name. A blob erased on purpose (a tombstone in `blobs/erased/`, journal/erasure.py) is
   no break: it is listed in `erased` and a note says when, by whom and why.
7. `seal_mismatch` (when a seal key is given, see seal.py): the seal's signature does not verify,
   the file holds fewer entries than were sealed (cut off), or the sealed seq has another hash
   (rewritten).

What a hash chain alone cannot see (docs/contract.md): a file cut at a line boundary, or a whole file
rewritten with every hash recomputed. A seal checked with a key held elsewhere catches both, for
the entries it covers.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

import orjson

from journal import canonical
from journal.blobstore import BlobStore, is_ref_object
from journal.canonical import (
    CanonicalError,
    canonical_value,
    is_canonical_line,
    keys_may_sort_differently,
    proven_canonical,
)
from journal.chain import GENESIS, spliced_digest, unsplice_hash
from journal.confine import NotConfined, is_blob_name
from journal.entry import ContractError, is_valid_entry, validate_entry
from journal.entry_struct import EntryFields, entry_fields
from journal.erasure import read_tombstone
from journal.forked_call import ForkedCall, can_fork, usable_cpus
from journal.reader import LineBlock, RowSource, fd_line_blocks, session_blocks, split_lines
from journal.seal import Seal, check_signature, read_seal
from journal.vault import Vault, VaultError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.checkpoint.note import Verifier
    from journal.trajectory import ToolListWatch

KINDS = (
    "edited", "removed", "inserted", "reordered", "torn_tail", "not_canonical",
    "contract_violation", "blob_missing", "blob_corrupt", "seal_mismatch",
    # checkpoints (journal/checkpoint/audit.py)
    "session_missing", "seal_missing", "seal_rollback", "unsealed_tail",
)
_REF_MARK = b'"ref":"blobs/sha256/'


@dataclass
class SessionReport:
    session: str
    entries: int = 0  # lines that verified before the break (all of them when intact)
    intact: bool = True
    broken_at_seq: int | None = None
    kind: str | None = None
    detail: str | None = None
    bytes: int = 0
    head: str | None = None  # the last line's hash when every line verified (what a seal or checkpoint names)
    first_ts: str | None = None
    last_ts: str | None = None
    notes: list[str] = field(default_factory=list)
    erased: list[dict] = field(default_factory=list)  # tombstones of erased blobs the entries name

    def as_dict(self) -> dict:
        return asdict(self)


class _Break(Exception):
    def __init__(self, kind: str, detail: str, seq: int | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.seq = seq  # the seq the break is reported at, when it is not the line being read


def verify_session(
    vault: Vault, session: str, *, check_blobs: bool = True, progress: Callable[[int], None] | None = None,
    on_entry: Callable[[dict], None] | None = None, seal_key: Ed25519PublicKey | None = None,
    workers: int | None = None, erasure_keys: Sequence[object] = (), blobs_url: str | None = None,
) -> SessionReport:
    """Verify one session file. `progress` gets byte counts as lines are read; `on_entry` each good entry;
    `seal_key` (a public key held outside the vault) checks the session's seal. `workers`: processes to
    share the file among (default: one per CPU, and per 4 MB, for files of PARALLEL_MIN_BYTES and more, when
    there is no `on_entry` and the process has no other thread; 1 keeps to this process). The report is the same
    whichever way the lines were shared. `blobs_url` (s3://BUCKET/PREFIX): the blobs are checked there
    (existence and hash, streaming), in this process (a client is not shared with forked workers)."""
    report = SessionReport(session)
    rows = isinstance(vault, RowSource)  # a database store read in place (journal/store/database_vault.py)
    try:
        # A file is opened once, confined (journal/confine.py), and every read below goes through that descriptor:
        # a read by path after the check would follow whatever the vault's writer put there since (a `journal/`
        # swapped for a symlink to a foreign journal, a file replaced), and verify bytes that were never checked.
        fd = -1 if rows else vault.open_session(session)
        path = vault.require_session(session) if rows else vault.session_path(session)
    except NotConfined as exc:  # a finding for this session, not a stop for the others
        report.intact, report.broken_at_seq, report.kind = False, 1, "contract_violation"
        report.detail = f"session file not read: {exc}"
        return report
    try:
        _verify_opened(vault, session, report, fd, path, check_blobs=check_blobs, progress=progress,
                       on_entry=on_entry, seal_key=seal_key, workers=workers, erasure_keys=erasure_keys,
                       blobs_url=blobs_url)
    finally:
        if fd >= 0:
            os.close(fd)
    return report


def _verify_opened(
    vault: Vault, session: str, report: SessionReport, fd: int, path: Path, *, check_blobs: bool,
    progress: Callable[[int], None] | None, on_entry: Callable[[dict], None] | None,
    seal_key: Ed25519PublicKey | None, workers: int | None, erasure_keys: Sequence[object], blobs_url: str | None,
) -> None:
    """verify_session once the session is open: `fd` its file's descriptor (-1 for a database store's rows)."""
    rows = fd < 0
    seal = read_seal(vault, session)
    remote = None
    if blobs_url and check_blobs:
        from journal.store.url import open_blob_sink

        remote, workers = open_blob_sink(blobs_url), 1
    elif rows and check_blobs:
        remote = vault.blob_checker()  # type: ignore[attr-defined]
    checker = BlobStore(vault.root, erasure_keys=erasure_keys, remote=remote) if check_blobs else None
    walk = _Walk(session, report, checker,
                 seal.entries if seal is not None else None, on_entry, progress)
    if rows:
        walk.run(session_blocks(vault, session))
    else:
        _verify_file(walk, fd, workers)
    if not walk.broken and walk.k:
        report.head = walk.expected_prev
    report.erased = [tombstone for _, tombstone in walk.erased]
    report.notes += walk.tool_list_notes()  # docs/prompts.md: tool definitions changed within the session
    for t in report.erased:
        report.notes.append(
            f"blob {t['sha256']} erased on {t.get('erased_at')} by {t.get('erased_by')}: {t.get('reason')} "
            f"(signed by erasure key {t.get('signed_by')})"
        )
    for q in sorted(path.parent.glob(path.name + ".torn-*")):
        report.notes.append(f"torn tail quarantined by the writer: {q.name} ({q.lstat().st_size} bytes)")
    _check_seal(report, seal, seal_key, walk.sealed_hash)


def verify_lines(
    session: str, lines: Iterable[bytes], *, on_entry: Callable[[dict], object] | None = None, block: int = 512,
) -> SessionReport:
    """The line checks of `verify_session` (canonical form, contract, hash, chain) over a session's lines
    taken from elsewhere (a database store, journal/store/interface.py `lines_after`), each with its
    newline. No blobs and no seal are checked: those live beside a file vault."""
    report = SessionReport(session)
    walk = _Walk(session, report, None, None, on_entry)
    if walk.run(_blocks_of(iter(lines), block)) and walk.k:
        report.head = walk.expected_prev
    return report


def _blocks_of(lines: Iterator[bytes], size: int) -> Iterator[LineBlock]:
    """LineBlocks of `size` lines each (as iter_line_blocks gives a file's); a line without its newline
    comes alone, as `torn`."""
    while chunk := list(itertools.islice(lines, size)):
        whole = chunk if chunk[-1].endswith(b"\n") else chunk[:-1]
        if whole:
            raw = b"".join(whole)
            yield LineBlock(split_lines(raw), raw)
        if len(whole) < len(chunk):
            yield LineBlock([], chunk[-1], chunk[-1])
            return


class _Walk:
    """One pass over a session's lines in file order: the checks of the module docstring, and what they
    carry from line to line (the line count, the expected prev, the entry before, blob results).

    Each line first takes `_quick_entry`, which accepts a line only when `_check_line` would return the
    same entry; any other line goes through `_check_line`, which names the finding. So the fast path
    changes the speed, never a finding.
    """

    def __init__(
        self, session: str, report: SessionReport, blobs: BlobStore | None, seal_entries: int | None,
        on_entry: Callable[[dict], object] | None = None, progress: Callable[[int], None] | None = None,
    ) -> None:
        self.session, self.report, self.blobs = session, report, blobs
        self.seal_entries, self.on_entry, self.progress = seal_entries, on_entry, progress
        self.k = 0  # lines verified so far
        self.expected_prev = GENESIS
        self.before: dict | None = None  # the entry of line k, for the chain-break classification
        self.sealed_hash: str | None = None
        self.blob_ok: dict[str, str | None] = {}
        self.erased: list[tuple[str, dict]] = []  # (sha256, tombstone) of erased blobs, first seen first
        self._tool_lists: ToolListWatch | None = None  # made at the first gateway entry (see tool_lists)
        self.listings: list[dict] | None = None  # a range worker collects tools/list entries here instead
        self.broken = False

    @property
    def tool_lists(self) -> ToolListWatch:
        """The watch of MCP tool listings, made at the first gateway entry: journal.trajectory (and with it
        the model and redaction modules) is imported only by a verify that meets one."""
        if self._tool_lists is None:
            from journal.trajectory import ToolListWatch

            self._tool_lists = ToolListWatch()
        return self._tool_lists

    def tool_list_notes(self) -> list[str]:
        return self._tool_lists.notes() if self._tool_lists is not None else []

    def run(self, blocks: Iterator[LineBlock], after: Callable[[], Iterator[LineBlock]] | None = None) -> bool:
        """Check the lines of `blocks` after the k lines already checked; False once a break is recorded.
        `after`: the blocks that follow when `blocks` stops short of the end of the file (a chain break is
        classified by the lines after it, all of them)."""
        report, session, blobs, progress, on_entry = self.report, self.session, self.blobs, self.progress, self.on_entry
        k, expected_prev, before, sealed_at = self.k, self.expected_prev, self.before, self.seal_entries
        first_ts, nbytes = report.first_ts, 0
        quick = _quick_entry
        # Lines the C proof and the typed reading pass need no dict (journal/entry_struct.py), unless a caller
        # wants every entry, the line holds a blob reference, or it is a gateway entry (tool listings).
        lite = _quick_fields if on_entry is None and canonical.SPEEDUPS else None
        before_line: bytes | None = None  # when set, `before` is the entry of this line, not decoded yet
        try:
            for block in blocks:
                if block.torn:  # no newline: _check_line names it (torn_tail)
                    k += 1
                    nbytes += len(block.torn)
                    if progress is not None:
                        progress(len(block.torn))
                    try:
                        _check_line(block.torn, session)
                    except _Break as brk:
                        self._broken(brk, k)
                        return False
                    raise AssertionError("a line without a newline passed the checks")
                lines = block.lines
                # With the C accelerator every line it proves has had its key order checked by it; the few it
                # cannot prove check their own keys (keys_ok False), so the block-wide scan is skipped.
                keys_ok = not canonical.SPEEDUPS and not keys_may_sort_differently(block.raw)
                refs = block.lines_holding(_REF_MARK) if blobs is not None else None
                k0 = k
                for data in lines:
                    k += 1
                    if progress is not None:
                        progress(len(data) + 1)
                    if lite is not None and not (refs and k - k0 - 1 in refs):
                        fields = lite(data, session, expected_prev)
                        if fields is not None and fields.seq == k and fields.capture != "gateway":
                            expected_prev, before, before_line = fields.hash, None, data
                            if k == sealed_at:
                                self.sealed_hash = expected_prev
                            if first_ts is None:
                                first_ts = fields.ts
                            continue
                    try:
                        entry = quick(data, session, keys_ok, expected_prev) or _check_line(data + b"\n", session)
                        if entry["seq"] != k or entry["prev"] != expected_prev:
                            if before_line is not None:
                                before, before_line = orjson.loads(before_line), None
                            rest = _rest(lines, k - k0 - 1, itertools.chain(blocks, after() if after else ()))
                            raise _classify_chain_break(entry, k, before, rest)
                        if refs and k - k0 - 1 in refs:
                            _check_blobs(entry, blobs, self.blob_ok, self.erased)  # type: ignore[arg-type]
                    except _Break as brk:
                        nbytes += sum(map(len, lines[: k - k0])) + k - k0
                        self._broken(brk, k)
                        return False
                    expected_prev = entry["hash"]
                    before, before_line = entry, None
                    if k == sealed_at:
                        self.sealed_hash = expected_prev
                    if first_ts is None:
                        first_ts = entry["ts"]
                    if on_entry is not None:
                        on_entry(entry)
                    if entry["capture"] == "gateway":  # ToolListWatch.is_listing looks at nothing else
                        if self.listings is None:
                            self.tool_lists.observe(entry)
                        elif self.tool_lists.is_listing(entry):
                            self.listings.append(entry)
                nbytes += sum(map(len, lines)) + len(lines)
            return True
        finally:
            if before_line is not None:
                before = orjson.loads(before_line)
            report.bytes += nbytes
            report.first_ts = first_ts
            report.last_ts = before["ts"] if before is not None else None
            if not self.broken:
                self.k, self.expected_prev, self.before = k, expected_prev, before
                report.entries = k

    def _broken(self, brk: _Break, k: int) -> None:
        report = self.report
        self.broken, report.intact = True, False
        report.broken_at_seq = brk.seq or k
        report.entries = report.broken_at_seq - 1
        report.kind = brk.kind
        report.detail = f"line {k}: {brk.detail}"

    def absorb(self, part: _RangeResult) -> None:
        """Take over what a range worker verified right after the lines checked so far (part.first_seq is
        k + 1 and part.first_prev the expected prev: the caller checked), as if checked here."""
        report = self.report
        self.k, self.expected_prev, self.before = part.last_seq, part.last_hash, part.last_entry
        report.entries = part.last_seq
        report.bytes += part.bytes
        report.first_ts = report.first_ts or part.first_ts
        report.last_ts = part.last_entry["ts"]
        if part.sealed_hash is not None:
            self.sealed_hash = part.sealed_hash
        self.erased += [(d, t) for d, t in part.erased if d not in self.blob_ok]
        for digest, problem in part.blob_ok.items():
            self.blob_ok.setdefault(digest, problem)
        for entry in part.listings:
            self.tool_lists.observe(entry)
        if self.progress is not None:
            self.progress(part.bytes)


def _quick_entry(data: bytes, session: str, keys_ok: bool, prev: str | None = None) -> dict | None:
    """The entry of line `data` (its newline stripped) when it passes every check of `_check_line`, else
    None (then `_check_line` decides). The same checks in one pass: canonical_value for the canonical form,
    is_valid_entry for the contract, and the hash spliced out exactly as `_check_line` does.

    `prev`: the chain's expected prev (64 lowercase hex digits the caller holds: the genesis value or a hash
    this verifier checked); a line naming another prev is left to `_check_line` (and then the chain check
    names the break). Since `hash` must equal the digest computed here and `prev` that string, neither
    form is checked again (is_valid_entry's `links_known`)."""
    entry = canonical_value(data, keys_checked=keys_ok)
    if type(entry) is not dict:
        return None
    digest = spliced_digest(data)
    if digest is None or entry.get("hash") != digest:  # a line with no hash member: its absent digest is no match
        return None
    if prev is None:
        ok = is_valid_entry(entry)
    else:  # found: `hash` a hex digest just computed, `prev` the caller's
        ok = entry.get("prev") == prev and is_valid_entry(entry, links_known=True)
    return entry if ok and entry["session"] == session else None


def _quick_fields(data: bytes, session: str, prev: str) -> EntryFields | None:
    """`_quick_entry` without the entry's dict: the line proven canonical by the C accelerator, its fields read
    typed and checked (journal/entry_struct.py), its hash spliced out as `_quick_entry` does and equal to `hash`,
    `prev` the chain's expected prev. None: `_quick_entry` and `_check_line` decide."""
    if not proven_canonical(data):
        return None
    fields = entry_fields(data)
    if fields is None or fields.prev != prev or fields.session != session:
        return None
    return fields if fields.hash == spliced_digest(data) else None


def _rest(lines: list[bytes], i: int, blocks: Iterator[LineBlock]) -> Iterator[bytes]:
    """The lines after line i of `lines`, then those of the blocks not read yet."""
    yield from lines[i + 1 :]
    for block in blocks:
        yield from block.lines
        if block.torn:
            yield block.torn


# -- sharing one file among processes ---------------------------------------------------------------

PARALLEL_MIN_BYTES = 8 << 20
"""Below this a file is verified in the calling process alone (a fork costs a few milliseconds)."""


class _RangeResult(NamedTuple):
    """What a range worker found intact, for `_Walk.absorb` (a NamedTuple: a dataclass costs every verify
    ~0.4 ms of start-up to build)."""

    first_seq: int
    first_prev: str
    last_seq: int
    last_hash: str
    last_entry: dict
    bytes: int
    first_ts: str
    sealed_hash: str | None
    blob_ok: dict[str, str | None]
    erased: list[tuple[str, dict]]
    listings: list[dict]


MIN_WORKER_BYTES = 4 << 20
"""Bytes per process at least, in the default sharing (a fork costs a few milliseconds)."""
MIN_RANGE_BYTES = 1 << 20
"""The smallest range of the default sharing (`_range_targets`): a few milliseconds of one core's work."""


def _verify_file(walk: _Walk, fd: int, workers: int | None) -> None:
    """Verify the whole file open at `fd` (every read a pread of it; forked workers share it): in this process
    alone, or cut at line starts into ranges that this process and `workers - 1` forked children take from a
    shared queue and check at the same time.

    A range is checked as if the chain before it were intact, taking its first line's seq and prev as
    given (`_verify_range`); this process then goes through the ranges in file order, checks that each
    starts where the chain stands (seq k + 1, the expected prev) and takes over its state. The first
    range that did not pass (any finding, a first line that does not link, a worker that failed) is
    checked again here by the one walk, from its first line to the end of the file: so findings and
    their classification are exactly those of one process reading alone.
    """
    size = os.fstat(fd).st_size
    if workers is None:  # a process per CPU, each with MIN_WORKER_BYTES at least, 16 at most
        auto = walk.on_entry is None and size >= PARALLEL_MIN_BYTES
        workers = min(usable_cpus(), size // MIN_WORKER_BYTES, 16) if auto else 1
    cuts = _line_starts(fd, size, _range_targets(size, workers)) if workers > 1 and can_fork() else []
    if not cuts:
        walk.run(fd_line_blocks(fd))
        return
    bounds = [0, *cuts, size]
    ranges = list(zip(bounds, bounds[1:], strict=False))
    queue, fill = os.pipe()
    os.write(fill, bytes(range(len(ranges))))  # one byte per range: each read(1) takes one
    os.close(fill)
    take = functools.partial(_verify_ranges, queue, walk.session, fd, ranges, walk.blobs, walk.seal_entries)
    parts: dict[int, _RangeResult | None] = {}
    children: list[ForkedCall] = []
    try:
        for _ in range(workers - 1):
            children.append(ForkedCall(take))
    except OSError:  # no more processes to be had: share among those started
        pass
    try:
        try:
            parts.update(take())
        except Exception:  # noqa: BLE001 - the walk below checks these ranges again and raises it
            pass
        for child in children:
            parts.update(cast("dict[int, _RangeResult | None]", child.result() or {}))  # what `take` returns
    finally:
        for child in children:
            child.close()
        os.close(queue)
    for i, (start, _) in enumerate(ranges):
        part = parts.get(i)
        if part is None or part.first_seq != walk.k + 1 or part.first_prev != walk.expected_prev:
            walk.run(fd_line_blocks(fd, start))
            return
        walk.absorb(part)
    walk.run(fd_line_blocks(fd, size))  # lines appended since the size was taken


def _verify_ranges(
    queue: int, session: str, fd: int, ranges: list[tuple[int, int]], blobs: BlobStore | None,
    seal_entries: int | None,
) -> dict[int, _RangeResult | None]:
    """Take ranges from the queue until it is empty; the result of each, by its index."""
    done: dict[int, _RangeResult | None] = {}
    while taken := os.read(queue, 1):
        start, stop = ranges[taken[0]]
        done[taken[0]] = part = _verify_range(session, fd, start, stop, blobs, seal_entries)
        if part is None:  # the parent reads on from this range itself: the ranges not yet taken are not needed
            os.read(queue, len(ranges))
            break
    return done


def _range_targets(size: int, workers: int) -> list[int]:
    """Where to cut `size` bytes (before moving each cut to a line start) into the ranges `workers` processes
    take one at a time from a queue: in rounds of `workers` ranges, each round half of what is left, down to
    MIN_RANGE_BYTES; at least `workers` ranges (equal ones in a small file), 255 at most (one queue byte each).

    Why shrinking ranges: the ranges taken last are short, so the processes finish close together (equal
    ranges of 12 MB left a core idle for up to one range's ~50 ms whenever one process ran slower), and a
    process slowed by other load takes fewer of them."""
    cuts: list[int] = []
    pos = step = 0
    while True:
        if len(cuts) % workers == 0:  # a new round
            step = max((size - pos) // (2 * workers), MIN_RANGE_BYTES)
        pos += step
        if pos >= size or len(cuts) == 254:
            break
        cuts.append(pos)
    if len(cuts) < workers - 1:
        cuts = [size * i // workers for i in range(1, workers)]
    return cuts


def _line_starts(fd: int, size: int, targets: list[int]) -> list[int]:
    """The offsets `targets` (ascending) each moved on to the next line start in the file open at `fd`: the cuts of
    the file's ranges."""
    cuts: list[int] = []
    for target in targets:
        pos = max(target, cuts[-1] if cuts else 1)
        at = pos - 1
        while chunk := os.pread(fd, 1 << 16, at):
            nl = chunk.find(b"\n")
            if nl >= 0:
                pos = at + nl + 1
                break
            at += len(chunk)
        else:
            break
        if pos >= size:
            break
        if not cuts or pos > cuts[-1]:
            cuts.append(pos)
    return cuts


def _verify_range(
    session: str, fd: int, start: int, stop: int, blobs: BlobStore | None, seal_entries: int | None
) -> _RangeResult | None:
    """In a worker: the lines of [start, stop) checked as if the chain before them were intact (the first
    line's seq and prev taken as given); None at any finding (the parent reads the range again itself)."""
    blocks = fd_line_blocks(fd, start, stop)
    first = next(blocks, None)
    if first is None or not first.lines:
        return None
    try:
        head = _quick_entry(first.lines[0], session, False) or _check_line(first.lines[0] + b"\n", session)
    except _Break:
        return None
    report = SessionReport(session)
    walk = _Walk(session, report, blobs, seal_entries)
    walk.k, walk.expected_prev, walk.listings = head["seq"] - 1, head["prev"], []
    if not walk.run(itertools.chain([first], blocks)) or walk.before is None:
        return None
    return _RangeResult(
        head["seq"], head["prev"], walk.k, walk.expected_prev, walk.before, report.bytes,
        report.first_ts or "", walk.sealed_hash, walk.blob_ok, walk.erased, walk.listings,
    )


def _check_seal(
    report: SessionReport, seal: Seal | None, key: Ed25519PublicKey | None, sealed_hash: str | None
) -> None:
    if seal is None:
        if key is not None:
            report.notes.append("not sealed: nothing shows whether entries were cut off at the end")
        return
    if key is None:
        report.notes.append(f"sealed at {seal.entries} entries on {seal.sealed_at}; no key given, seal not checked")
        return
    problem = check_signature(seal, key)
    if problem is None and report.intact:
        if report.entries < seal.entries:
            problem = f"the seal covers {seal.entries} entries, the file holds {report.entries}: entries were cut off"
        elif sealed_hash != seal.head:
            problem = f"seq {seal.entries} is not the entry that was sealed: the file was rewritten"
    if problem is None:
        report.notes.append(f"seal checked: {seal.entries} entries sealed on {seal.sealed_at}")
        return
    if report.intact:
        report.intact = False
        report.broken_at_seq = min(seal.entries, report.entries + 1)
        report.kind = "seal_mismatch"
        report.detail = problem
    else:
        report.notes.append(f"seal: {problem}")


def _check_line(data: bytes, session: str) -> dict:
    """The entry of one line (`data` with its newline, if it has one), or the _Break that names what is wrong."""
    if not data.endswith(b"\n"):
        raise _Break("torn_tail", f"last line has no final newline ({len(data)} bytes)")
    try:
        entry = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _Break("not_canonical", f"not JSON ({exc})") from None
    canon = data[:-1]
    try:
        if not is_canonical_line(canon, entry):
            raise _Break("not_canonical", "line bytes differ from the canonical form of the entry")
    except CanonicalError as exc:
        raise _Break("not_canonical", f"value has no canonical form ({exc})") from None
    # The hash is checked before the shape: an edit that also breaks the contract is an edit.
    if isinstance(entry, dict) and isinstance(entry.get("hash"), str):
        digest = entry["hash"]
        unhashed = unsplice_hash(canon, digest) if len(digest) == 64 else None
        if unhashed is None or hashlib.sha256(unhashed).hexdigest() != digest:
            raise _Break("edited", f"hash does not match the content of seq {entry.get('seq')}")
    try:
        validate_entry(entry)
    except ContractError as exc:
        raise _Break("contract_violation", str(exc)) from None
    if entry["session"] != session:
        raise _Break("contract_violation", f"entry names session {entry['session']!r}, not this file's")
    return entry


def _classify_chain_break(entry: dict, k: int, before: dict | None, rest: Iterator[bytes]) -> _Break:
    """Name the kind and the first seq of a chain break found at line k (`before`: the entry of line k-1).

    The reported seq is the trust boundary: every entry before it is genuine, so when an earlier entry
    may be the changed one (an entry edited and its hash recomputed leaves its own line consistent and
    breaks only the next line's `prev`), the break is reported there. The lines after k tell the cases
    apart: a genuine continuation names its predecessor's hash in `prev`.
    """
    seq, prev = entry["seq"], entry["prev"]
    expected_prev = before["hash"] if before is not None else GENESIS
    later = _later_links(rest)
    after = later[0] if later else None  # (seq, prev, hash) of line k+1
    if seq == k:
        if after is not None and after[0] == k and after[1] == expected_prev:
            return _Break("inserted", f"found an entry claiming seq {k} before the genuine seq {k}")
        if before is not None and (after is None or after[1] == entry["hash"]):
            tail = "" if after is not None else f" (or seq {k}, the last line, does not belong to the chain)"
            return _Break(
                "edited", f"seq {k}'s prev no longer names seq {k - 1}: seq {k - 1} was changed and its hash "
                f"recomputed{tail}", k - 1,
            )
        what = f"name seq {k - 1}" if before is not None else "hold 64 zeros"
        return _Break("edited", f"seq {k}'s prev does not {what}: seq {k} was changed and its hash recomputed")
    if seq < k:
        if before is not None and seq == k - 1 and prev == before["prev"] and entry["hash"] != before["hash"]:
            if after is not None and after[0] == k and after[1] == entry["hash"]:
                detail = f"two entries claim seq {k - 1}; the first does not belong to the chain"
                return _Break("inserted", detail, k - 1)
            if after is None or after[1] != before["hash"]:
                return _Break("inserted", f"two entries claim seq {k - 1}; either may be the inserted one", k - 1)
        return _Break("inserted", f"found seq {seq} where seq {k} belongs (a duplicate or an inserted entry)")
    by_seq = {s: (p, h) for s, p, h in later}
    if k in by_seq and by_seq[k][0] == expected_prev:
        genuine = by_seq.get(seq - 1, (None, None))[1] == prev
        if genuine:
            return _Break("reordered", f"found seq {seq} where seq {k} belongs; seq {k} comes later")
        return _Break("inserted", f"found an entry claiming seq {seq} before seq {k}; it does not belong to the chain")
    if prev == expected_prev:
        return _Break("edited", f"found seq {seq} where seq {k} belongs, right after seq {k - 1}: its seq was changed")
    n = seq - k
    return _Break("removed", f"found seq {seq} where seq {k} belongs: {n} entr{'y' if n == 1 else 'ies'} missing")


def _later_links(rest: Iterator[bytes]) -> list[tuple[int, str, str]]:
    """(seq, prev, hash) of the lines after the break that parse, in file order."""
    out = []
    for line in rest:
        try:
            e = orjson.loads(line)
            out.append((e["seq"], e["prev"], e["hash"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
    return out


def _check_blobs(
    entry: dict, blobs: BlobStore, cache: dict[str, str | None], erased: list[tuple[str, dict]]
) -> None:
    for ref in _refs(entry):
        digest = ref["sha256"]
        if not is_blob_name(digest):  # never resolved: a name like ../../etc/hostname would read outside the vault
            raise _Break("contract_violation", f"a blob reference names sha256 {str(digest)[:80]!r}, "
                         "not 64 lowercase hex digits; not resolved")
        if digest not in cache:
            if ref["ref"] != f"blobs/sha256/{digest[:2]}/{digest}":
                cache[digest] = f"ref {ref['ref']!r} does not match sha256 {digest}"
            else:
                checked = blobs.check(digest, ref["size"] if isinstance(ref["size"], int) else None)
                cache[digest] = checked
                if checked is not None and "missing" in checked:
                    try:
                        held = getattr(blobs.remote, "tombstone", None)  # a database store keeps its own
                        tombstone = held(digest) if held is not None else read_tombstone(blobs.root, digest)
                    except VaultError as exc:
                        tombstone, cache[digest] = None, f"{cache[digest]} ({exc})"
                    from journal.erasure_signature import erasure_signer  # signatures: only for a tombstone

                    keys = cast("list[Verifier]", blobs.erasure_keys)  # BlobStore holds them untyped
                    signer = erasure_signer(tombstone, keys) if tombstone is not None else None
                    if signer is not None:
                        assert tombstone is not None  # a signer is only found on a tombstone
                        cache[digest] = None
                        erased.append((digest, {**tombstone, "signed_by": signer}))
                    elif tombstone is not None:  # a claim anyone who can write the vault could make
                        cache[digest] = (
                            f"{cache[digest]}; a tombstone says it was erased on {tombstone.get('erased_at')} by "
                            f"{tombstone.get('erased_by')} ({tombstone.get('reason')}), but it is not signed by a "
                            "given --erasure-key: not honoured"
                        )
        problem = cache[digest]
        if problem is not None:
            kind = "blob_missing" if "missing" in problem else "blob_corrupt"
            raise _Break(kind, problem)


def _refs(value: object) -> Iterator[dict]:
    if isinstance(value, dict):
        if is_ref_object(value):
            yield value
            return
        for v in value.values():
            yield from _refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)
