"""A session as a versioned JSON test fixture (schema `connector-broker/fixture/1`).

The fixture holds the entries exactly as recorded (redacted as on disk: it is built from the
session file, never from anything un-redacted), the verifier's verdict on the chain, and the
`expected` behaviour: the ordered calls with their statuses. A later run is compared with
`expected` (see `broker diff`); the entries let a test re-verify the chain itself.

Keys:

- `schema`: `"connector-broker/fixture/1"`. A change that breaks a reader gets a new number.
- `source`: where it came from: the session id, its file name inside the vault, the vault's
  format (and origin when VAULT.json names one), the number of entries and the head hash. No
  absolute path and no export time, so exporting the same session twice gives the same bytes.
- `chain`: `verdict` (`"intact"` or `"broken at seq N (kind)"`) and the rest of
  `journal.verify.SessionReport` (`intact`, `entries`, `broken_at_seq`, `kind`, `detail`,
  `first_ts`, `last_ts`, `notes`, ...).
- `entries`: each line of the session file parsed, in file order (a line that is not JSON, such as
  a torn tail, cannot be an entry; its line number is listed in `source.unparsed_lines`).
- `expected`: one object per entry, in order: `seq`, `connector`, `effect`, `method`, `url` (as
  recorded, ids and all, redacted query values included), `request_body_sha256` (SHA-256 hex of
  the RFC 8785 canonical form of `request.body` as recorded; a spilled body is its reference
  object, so the hash is of that reference) and `status` (`response.status`, null when none came).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import orjson

from journal.canonical import canonical_bytes
from journal.chain import GENESIS, next_head
from journal.errors import InputError
from journal.export.streamed_json import ArrayMark, JsonSpool, streamed_document
from journal.reader import open_vault, session_lines
from journal.vault import Vault
from journal.verify import verify_session

SCHEMA = "connector-broker/fixture/1"
EXPECTED_KEYS = ("seq", "connector", "effect", "method", "url", "request_body_sha256", "status")


def body_digest(body: object) -> str:
    """SHA-256 hex of the canonical form of a recorded body value (the one rule for comparing bodies)."""
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def expected_call(entry: dict) -> dict:
    """The behaviour one entry records: what was called, and what status came back."""
    request = entry.get("request") or {}
    response = entry.get("response") or {}
    return {
        "seq": entry.get("seq"),
        "connector": entry.get("connector"),
        "effect": entry.get("effect"),
        "method": request.get("method"),
        "url": request.get("url"),
        "request_body_sha256": body_digest(request.get("body")),
        "status": response.get("status"),
    }


def chain_verdict(report: dict) -> str:
    """`intact`, or `broken at seq N (kind)`: the words the inspector and the CLI show."""
    if report.get("intact"):
        return "intact"
    return f"broken at seq {report.get('broken_at_seq')} ({report.get('kind')})"


def read_entries(vault: Vault, session: str, verified: dict | None = None) -> tuple[list[dict], list[int]]:
    """The parsed entries of a session in file order, and the 1-based numbers of lines that are not JSON
    (all held: for readers of a small session; exports use `iter_session_entries`, which says what
    `verified` checks)."""
    unparsed: list[int] = []
    return list(iter_session_entries(vault, session, unparsed.append, verified=verified)), unparsed


@dataclass
class EntryTally:
    """What an export states about the whole session (its entries and head, its first and last times),
    counted as the entries stream past (`iter_session_entries`)."""

    entries: int = 0
    head: object = None  # the last entry's hash
    first_ts: object = None
    last_ts: object = None
    marks: list[tuple[int, str]] = field(default_factory=list)
    """(lines read, chain head there) every `MARK_EVERY` lines or `MARK_BYTES` bytes of the verified chain,
    taken by a pass that followed it to the verifier's head: what a later pass checks as it goes."""


MARK_EVERY = 256
MARK_BYTES = 4 << 20
"""How far apart the marks of a verified pass are (see `EntryTally.marks`): a later pass holds back at
most this many entries (or about this many bytes of lines) before it can show they are the verified ones."""


def iter_session_entries(vault: Vault, session: str, unparsed: Callable[[int], object] | None = None,
                         tally: EntryTally | None = None, verified: dict | None = None,
                         marks: list[tuple[int, str]] | None = None) -> Iterator[dict]:
    """The parsed entries of a session in file (seq) order, one at a time, from whichever store holds it;
    the 1-based number of each line that is not a JSON object goes to `unparsed`, and `tally` counts what
    passed. Nothing is held: an export of any size draws its entries from here (issue 26).

    `verified`: the verifier's report (as_dict) the export states. When it says intact, the lines read here
    must be the chain it checked: followed as they are read (chain.next_head), its first `entries` lines must
    end at its `head` (lines appended since may follow). Else SessionChanged: the file was changed between
    the verifier's read and this one, and an export stating "intact" over other entries is refused. The
    heads met on the way go into `tally.marks`.

    `marks` (with `verified`): those of an earlier pass that was checked to the verifier's head. Each
    verified entry is then held back until the chain followed here reaches the next mark (or the head) with
    the same hash, so it leaves only once it is shown to be a verified one: a consumer that sends as it
    goes (`broker export --otlp`) sends nothing of a file rewritten between the passes. At most the
    entries between two marks are held (`MARK_EVERY`, `MARK_BYTES`)."""
    target = _verified_head(verified)
    head: str | None = GENESIS
    taking = tally.marks if tally is not None and target is not None else None
    since = 0  # bytes since the last mark taken
    held: list[dict] | None = [] if marks is not None and target is not None else None
    upcoming = iter(marks or ())
    mark = next(upcoming, None)
    for line in session_lines(vault, session):
        try:
            value = orjson.loads(line.data)
        except orjson.JSONDecodeError:
            value = None
        checked = False  # this line ends a stretch shown to be the verified chain
        if target is not None and line.index < target[0]:
            head = next_head(value, line.data, head) if isinstance(value, dict) and head is not None else None
            if line.index + 1 == target[0]:
                if head != target[1]:
                    raise SessionChanged(session)
                target, checked = None, True
            else:
                if mark is not None and line.index + 1 == mark[0]:
                    if head != mark[1]:
                        raise SessionChanged(session)
                    mark, checked = next(upcoming, None), True
                if taking is not None and head is not None:
                    since += len(line.data)
                    if (line.index + 1) % MARK_EVERY == 0 or since >= MARK_BYTES:
                        taking.append((line.index + 1, head))
                        since = 0
        if not isinstance(value, dict):
            if unparsed is not None:
                unparsed(line.index + 1)
        else:
            if tally is not None:
                tally.entries += 1
                tally.head = value.get("hash")
                if tally.entries == 1:
                    tally.first_ts = value.get("ts")
                tally.last_ts = value.get("ts")
            if held is None:
                yield value
            else:
                held.append(value)
        if held is not None and (checked or target is None):
            yield from held
            held.clear()
            if target is None:
                held = None  # past the verified head: lines appended since, as without marks
    if target is not None:  # fewer lines than the verifier checked
        raise SessionChanged(session)


class SessionChanged(InputError):
    """The session file read by an export is not the one its verifier checked a moment before."""

    def __init__(self, session: str) -> None:
        super().__init__(f"session {session!r} changed while it was exported: its entries are not those the "
                         "verifier just checked; export it again once nothing rewrites it")


def _verified_head(report: dict | None) -> tuple[int, str] | None:
    if report is None or not report.get("intact") or not report.get("entries"):
        return None
    return report["entries"], report["head"]


def counted_entries(vault: Vault, session: str, tally: EntryTally, verified: dict | None = None) -> Iterator[dict]:
    """The entries an earlier pass counted into `tally`, read again: no more, so an export whose passes
    state counts (a head, a number of entries) stays consistent with itself while the session grows.
    The count is read when the first entry is asked for, so a tally still being filled may be passed.
    `verified`: as for `iter_session_entries` (this pass reads the file again), each entry held back until
    it is shown to be a verified one at the next of the marks the earlier pass took (`tally.marks`)."""
    return itertools.islice(iter_session_entries(vault, session, verified=verified, marks=tally.marks),
                            tally.entries)


def _source(vault: Vault, session: str, tally: EntryTally, unparsed: object) -> dict:
    manifest: dict = {}
    try:
        loaded = orjson.loads((vault.root / "VAULT.json").read_bytes())
        if isinstance(loaded, dict):
            manifest = loaded
    except (OSError, orjson.JSONDecodeError):
        pass
    source = {
        "session": session,
        "file": os.path.relpath(vault.session_path(session), vault.root),
        "vault_format": manifest.get("format"),
        "entries": tally.entries,
        "head": tally.head,
        "unparsed_lines": unparsed,
    }
    if isinstance(manifest.get("origin"), str):
        source["vault_origin"] = manifest["origin"]
    return source


def fixture_chunks(vault_root: Vault | str | os.PathLike, session: str) -> Iterator[bytes]:
    """The fixture of one session as `fixture_bytes` writes it, a piece at a time (see the module docstring
    for its keys): the chain is verified first (a streaming pass), then the entries are written as they
    are read and the `expected` calls from a second pass; nothing grows with the session but the spool of
    unparsed line numbers, on disk. Raises VaultError for an unknown session or a directory that is not a vault."""
    vault = open_vault(vault_root)
    report = verify_session(vault, session).as_dict()
    tally = EntryTally()
    with JsonSpool() as unparsed:
        entries, expected, lines = ArrayMark("entries"), ArrayMark("expected"), ArrayMark("unparsed")

        def template() -> dict:
            return {
                "schema": SCHEMA,
                "source": _source(vault, session, tally, lines.value),
                "chain": {"verdict": chain_verdict(report), **report},
                "entries": entries.value,
                "expected": expected.value,
            }

        yield from streamed_document(template, [
            (entries, iter_session_entries(vault, session, unparsed.add, tally, report)),
            (expected, _expected_calls(vault, session, tally, report)),
            (lines, unparsed),
        ], option=orjson.OPT_SORT_KEYS)


def _expected_calls(vault: Vault, session: str, tally: EntryTally, verified: dict) -> Iterator[dict]:
    for e in counted_entries(vault, session, tally, verified):  # a generator: the entries are counted by then
        yield expected_call(e)


def build_fixture(vault_root: Vault | str | os.PathLike, session: str) -> dict:
    """The fixture of one session as a value (held whole: `fixture_chunks` writes a big one). Raises
    VaultError for an unknown session or a directory that is not a vault."""
    return orjson.loads(b"".join(fixture_chunks(vault_root, session)))


def fixture_bytes(fixture: dict) -> bytes:
    """The fixture as written to a file: pretty JSON with sorted keys, ending in a newline."""
    return orjson.dumps(fixture, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
