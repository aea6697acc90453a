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

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from journal.blobstore import BlobStore, is_ref_object
from journal.canonical import CanonicalError, is_canonical_line
from journal.chain import GENESIS
from journal.entry import ContractError, validate_entry
from journal.erasure import read_tombstone
from journal.reader import Line, iter_lines
from journal.seal import Seal, check_signature, read_seal
from journal.trajectory import ToolListWatch
from journal.vault import Vault

KINDS = (
    "edited", "removed", "inserted", "reordered", "torn_tail", "not_canonical",
    "contract_violation", "blob_missing", "blob_corrupt", "seal_mismatch",
    # checkpoints (journal/checkpoint/audit.py)
    "session_missing", "seal_missing", "seal_rollback", "unsealed_tail",
)
_HASH_KEY = b',"hash":"'
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
) -> SessionReport:
    """Verify one session file. `progress` gets byte counts as lines are read; `on_entry` each good entry;
    `seal_key` (a public key held outside the vault) checks the session's seal."""
    path = vault.require_session(session)
    seal = read_seal(vault, session)
    sealed_hash: str | None = None
    report = SessionReport(session)
    blobs = BlobStore(vault.root)
    blob_ok: dict[str, str | None] = {}
    expected_prev = GENESIS
    tool_lists = ToolListWatch()
    before: dict | None = None  # the entry of the line before, for the chain-break classification
    lines = iter_lines(path)
    for line in lines:
        k = line.index + 1
        report.bytes += len(line.data)
        if progress is not None:
            progress(len(line.data))
        try:
            entry = _check_line(line, session)
            if entry["seq"] != k or entry["prev"] != expected_prev:
                raise _classify_chain_break(entry, k, before, lines)
            if check_blobs and _REF_MARK in line.data:
                _check_blobs(entry, blobs, blob_ok, report.erased)
        except _Break as brk:
            report.intact = False
            report.broken_at_seq = brk.seq or k
            report.entries = report.broken_at_seq - 1
            report.kind = brk.kind
            report.detail = f"line {k}: {brk.detail}"
            break
        report.entries = k
        expected_prev = entry["hash"]
        before = entry
        if seal is not None and k == seal.entries:
            sealed_hash = entry["hash"]
        if report.first_ts is None:
            report.first_ts = entry["ts"]
        report.last_ts = entry["ts"]
        if on_entry is not None:
            on_entry(entry)
        tool_lists.observe(entry)
    report.notes += tool_lists.notes()  # docs/prompts.md: tool definitions changed within the session
    for t in report.erased:
        report.notes.append(
            f"blob {t['sha256']} erased on {t.get('erased_at')} by {t.get('erased_by')}: {t.get('reason')}"
        )
    for q in sorted(path.parent.glob(path.name + ".torn-*")):
        report.notes.append(f"torn tail quarantined by the writer: {q.name} ({q.stat().st_size} bytes)")
    _check_seal(report, seal, seal_key, sealed_hash)
    return report


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


def _check_line(line: Line, session: str) -> dict:
    data = line.data
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
        at = canon.find(_HASH_KEY + digest.encode() + b'"') if len(digest) == 64 else -1
        unhashed = canon[:at] + canon[at + 74 :] if at >= 0 else None
        if unhashed is None or hashlib.sha256(unhashed).hexdigest() != digest:
            raise _Break("edited", f"hash does not match the content of seq {entry.get('seq')}")
    try:
        validate_entry(entry)
    except ContractError as exc:
        raise _Break("contract_violation", str(exc)) from None
    if entry["session"] != session:
        raise _Break("contract_violation", f"entry names session {entry['session']!r}, not this file's")
    return entry


def _classify_chain_break(entry: dict, k: int, before: dict | None, rest: Iterator[Line]) -> _Break:
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


def _later_links(rest: Iterator[Line]) -> list[tuple[int, str, str]]:
    """(seq, prev, hash) of the lines after the break that parse, in file order."""
    out = []
    for line in rest:
        try:
            e = orjson.loads(line.data)
            out.append((e["seq"], e["prev"], e["hash"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
    return out


def _check_blobs(entry: dict, blobs: BlobStore, cache: dict[str, str | None], erased: list[dict]) -> None:
    for ref in _refs(entry):
        digest = ref["sha256"]
        if digest not in cache:
            if ref["ref"] != f"blobs/sha256/{digest[:2]}/{digest}":
                cache[digest] = f"ref {ref['ref']!r} does not match sha256 {digest}"
            else:
                cache[digest] = blobs.check(digest, ref["size"] if isinstance(ref["size"], int) else None)
                if cache[digest] is not None and "missing" in cache[digest]:
                    tombstone = read_tombstone(blobs.root, digest)
                    if tombstone is not None:
                        cache[digest] = None
                        erased.append(tombstone)
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
