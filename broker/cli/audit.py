"""Commands auditors use on a vault: verify, sessions, show."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard, cast

import click
import orjson

from broker.cli.main import summary
from broker.cli.options import (
    ANY_VERIFIER_KEY,
    VERIFIER_KEY,
    blobs_option,
    reading_vault,
    store_option,
    unmapped_sessions,
    vault_option,
)
from broker.cli.progress import progress_bar
from journal.entry import parse_ts
from journal.reader import RowSource, iter_entries, session_size
from journal.seq_index import line_of_seq
from journal.summary import call_label, status_text, summarize_session
from journal.vault import Vault, VaultError
from journal.vault_verify import verify_sessions
from journal.verify import SessionReport

if TYPE_CHECKING:  # the checkpoint audit (and cryptography) is loaded when a --seal-key asks for it
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.checkpoint.note import Verifier


def _select(vault: Vault, sessions: tuple[str, ...]) -> list[str]:
    if not sessions:
        return vault.sessions()
    for s in sessions:
        vault.require_session(s)
    return list(sessions)


def _total_bytes(vault: Vault, sessions: list[str]) -> int:
    """For the progress bar: 0 (no bar) for a database store, whose sizes would cost a pass of their own."""
    return 0 if isinstance(vault, RowSource) else sum(session_size(vault, s) for s in sessions)


def _where(vault: Vault) -> str:
    return str(getattr(vault, "label", vault.root))


@click.command(short_help=summary("verify"))
@vault_option
@store_option
@click.argument("sessions", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per session.")
@click.option("--no-blobs", is_flag=True, help="Skip re-hashing spilled blobs (faster, weaker).")
@blobs_option
@click.option("--seal-key", type=ANY_VERIFIER_KEY, default=None,
              help="Verifier key (text or file, from `broker keygen`, kept outside the vault): check checkpoints "
              "and the signed vault index. A legacy .pub key checks the old .seal files.")
@click.option("--witness-key", "witness_keys", type=VERIFIER_KEY, multiple=True,
              help="Require each checkpoint to be cosigned by this witness (repeatable).")
@click.option("--witness", "witness_urls", multiple=True, metavar="URL",
              help="Ask this witness for the newest size it cosigned per session (repeatable).")
@click.option("--require-sealed", is_flag=True, help="Entries after the last checkpoint are a break, not a note.")
@click.option("--erasure-key", "erasure_keys", type=VERIFIER_KEY, multiple=True,
              help="Honour a tombstone only when signed by this key (`broker erase --signing-key`; repeatable). "
              "Without one no tombstone counts: an erased blob is reported missing.")
def verify(vault_dir: str, store: str | None, sessions: tuple[str, ...], as_json: bool, no_blobs: bool,
           seal_key: Verifier | Ed25519PublicKey | None, witness_keys: tuple[Verifier, ...],
           witness_urls: tuple[str, ...], require_sealed: bool, erasure_keys: tuple[Verifier, ...],
           blobs: str | None = None) -> int:
    """Check every session's hash chain, canonical form, contract, blobs and (with --seal-key) checkpoints.

    Exit 0 when every session is intact, 1 when any is broken, 2 on a usage error.
    """
    # A database store is read in place; its checkpoints and seals stay in the --vault directory they were
    # written to (docs/postgres.md), which is read there, never written.
    vault = reading_vault(store, vault_dir)
    if seal_key is not None and _is_checkpoint_key(seal_key):
        return verify_checkpoints(vault, sessions, as_json, no_blobs, seal_key, witness_keys, witness_urls,
                                  require_sealed, erasure_keys, blobs)
    if witness_keys or witness_urls or require_sealed:
        raise click.UsageError("--witness-key, --witness and --require-sealed need a --seal-key verifier key")
    public = cast("Ed25519PublicKey | None", seal_key)  # a legacy .pub key checks the old .seal files
    names = _select(vault, sessions)
    with progress_bar(_total_bytes(vault, names), "verifying") as advance:
        reports = verify_sessions(vault, names, check_blobs=not no_blobs, progress=advance, seal_key=public,
                                  erasure_keys=list(erasure_keys), blobs_url=blobs)
    print_reports(reports, as_json)
    unmapped = {} if sessions else unmapped_sessions(vault)
    for session, why in unmapped.items():  # rows of a database store no vault file can hold: not verified
        if as_json:
            click.echo(orjson.dumps({"session": session, "intact": False, "kind": "contract_violation",
                                     "broken_at_seq": 1, "detail": why}).decode())
        else:
            click.echo(f"{session!r}: BROKEN at seq 1: contract_violation: {why}; not verified")
    if not names and not as_json and not unmapped:
        click.echo(f"no sessions in {_where(vault)}")
    return 0 if all(r.intact for r in reports) and not unmapped else 1


def _is_checkpoint_key(key: object) -> TypeGuard[Verifier]:
    """A checkpoint verifier key (not a legacy .pub seal key); journal.checkpoint (and cryptography with it)
    is imported only when a key was given, which keeps a plain `broker verify`'s start-up short."""
    from journal.checkpoint.note import Verifier

    return isinstance(key, Verifier)


def verify_checkpoints(vault: Vault, sessions: tuple[str, ...], as_json: bool, no_blobs: bool, key: Verifier,
                       witness_keys: tuple[Verifier, ...], witness_urls: tuple[str, ...], require_sealed: bool,
                       erasure_keys: tuple[Verifier, ...] = (), blobs_url: str | None = None) -> int:
    """`broker verify --seal-key VKEY`: the chain of each session, then checkpoints, index and witnesses."""
    from journal.checkpoint.audit import audit_vault, session_tree
    from journal.checkpoint.witness import WitnessClient

    wkeys = list(witness_keys)
    clients = [WitnessClient(u, None) for u in witness_urls]
    names = _select(vault, sessions)
    checked = {}
    with progress_bar(_total_bytes(vault, names), "verifying") as advance:
        for s in names:
            checked[s] = session_tree(vault, s, check_blobs=not no_blobs, progress=advance,
                                      erasure_keys=list(erasure_keys), blobs_url=blobs_url)
    audit = audit_vault(vault, checked, key, witness_keys=wkeys, witnesses=clients, require_sealed=require_sealed,
                        selected=list(sessions) or None)
    print_reports(audit.reports, as_json)
    for kind, detail in audit.vault_problems:
        if as_json:
            d = {"vault": str(vault.root), "intact": False, "kind": kind, "detail": detail}
            click.echo(orjson.dumps(d).decode())
        else:
            click.echo(f"vault: BROKEN: {kind}: {detail}")
    if not as_json:
        for note in audit.vault_notes:
            click.echo(f"vault: note: {note}")
        if audit.coverage:
            click.echo("declared coverage (what the capture points did not record):")
            for line in audit.coverage:
                click.echo(f"  {line}")
        elif not audit.vault_problems:
            click.echo("declared coverage: none declared (not accounted: counted only while the broker seals)")
    elif audit.coverage:
        click.echo(orjson.dumps({"vault": str(vault.root), "coverage": audit.coverage}).decode())
    return 0 if audit.intact else 1


def print_reports(reports: list[SessionReport], as_json: bool) -> None:
    for r in reports:
        if as_json:
            d = {k: getattr(r, k) for k in ("session", "entries", "intact", "broken_at_seq", "kind", "detail")}
            d["notes"] = r.notes
            click.echo(orjson.dumps(d).decode())
        elif r.intact:
            click.echo(f"{r.session}: intact ({r.entries} entries)")
        else:
            click.echo(f"{r.session}: BROKEN at seq {r.broken_at_seq}: {r.kind}: {r.detail}")
        if not as_json:
            for note in r.notes:
                click.echo(f"  note: {note}")


@click.command(short_help=summary("sessions"))
@vault_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per session.")
def sessions(vault_dir: str, store: str | None, as_json: bool) -> int:
    """List sessions: entries, first and last time, connectors, writes, and whether each verifies."""
    vault = reading_vault(store, vault_dir)
    names = vault.sessions()
    keys = ("session", "entries", "first_ts", "last_ts", "connectors", "writes", "verifies", "broken_at_seq", "kind",
            "sealed", "checkpoint")
    with progress_bar(_total_bytes(vault, names), "reading") as advance:
        rows = [{k: row[k] for k in keys} for row in (summarize_session(vault, s, progress=advance) for s in names)]
    if as_json:
        for row in rows:
            click.echo(orjson.dumps(row).decode())
        return 0
    if not rows:
        click.echo(f"no sessions in {_where(vault)}")
        return 0
    header = f"{'SESSION':<28} {'ENTRIES':>7} {'FIRST':<24} {'LAST':<24} {'WRITES':>6}  VERIFIES  CONNECTORS"
    click.echo(header)
    for row in rows:
        status = "yes" if row["verifies"] else f"NO (seq {row['broken_at_seq']}: {row['kind']})"
        click.echo(
            f"{row['session']:<28} {row['entries']:>7} {row['first_ts'] or '-':<24} {row['last_ts'] or '-':<24} "
            f"{row['writes']:>6}  {status:<8}  {','.join(row['connectors'])}"
        )
    return 0


def _gap(prev_ts: str | None, ts: str) -> str:
    if prev_ts is None:
        return "-"
    try:
        seconds = (parse_ts(ts) - parse_ts(prev_ts)).total_seconds()
    except ValueError:
        return "?"
    if seconds < 60:
        return f"+{seconds:.3f}s"
    if seconds < 3600:
        return f"+{seconds / 60:.1f}m"
    return f"+{seconds / 3600:.1f}h"


@click.command(short_help=summary("show"))
@vault_option
@store_option
@click.argument("session")
@click.option("--seq", type=int, default=None, help="Show only this entry.")
@click.option("--json", "as_json", is_flag=True, help="Entries as JSON, one per line.")
def show(vault_dir: str, store: str | None, session: str, seq: int | None, as_json: bool) -> int:
    """A session's timeline, one line per entry, in this column order: seq, time, gap, connector,
    effect, capture, method, status, URL. Columns are as wide as their longest value in the session.
    An MCP call's method is followed by the tool, prompt, resource or task it names, and a tool's
    error result shows as `200 (tool error)`. With --seq, that entry's line and the whole entry."""
    vault = reading_vault(store, vault_dir, blobs=False)
    vault.require_session(session)
    if seq is not None:
        return _show_one(vault, session, seq, as_json)
    if as_json:
        for entry in iter_entries(vault, session):
            click.echo(orjson.dumps(entry).decode())
        return 0
    # Two passes, so that every column is as wide as its widest value without holding the session.
    widths = [1] * 8
    for row, _entry in _timeline(vault, session, seq):
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
    found = False
    for row, entry in _timeline(vault, session, seq):
        found = True
        cells = [row[0].rjust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2])]
        cells += [c.ljust(w) for c, w in zip(row[3:8], widths[3:8], strict=True)]
        click.echo("  ".join(cells) + "  " + row[8])
        if seq is not None:
            click.echo(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())
    if seq is not None and not found:
        raise VaultError(f"session {session!r} has no entry with seq {seq}")
    return 0


def _show_one(vault: Vault, session: str, seq: int, as_json: bool) -> int:
    """`show --seq N`: the entry's line (found by the store's key or the file's seq index, journal/reader.py
    line_of_seq: time independent of N) and the one before it for the gap; nothing else is read."""
    line = line_of_seq(vault, session, seq)
    entry = _parsed(line)
    if entry is None:
        raise VaultError(f"session {session!r} has no entry with seq {seq}")
    if as_json:
        click.echo(orjson.dumps(entry).decode())
        return 0
    before = _parsed(line_of_seq(vault, session, seq - 1)) if seq > 1 else None
    row = _row(entry, _gap(before.get("ts") if before else None, entry.get("ts", "")))
    click.echo("  ".join(row[:8]) + "  " + row[8])
    click.echo(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())
    return 0


def _parsed(line: bytes | None) -> dict | None:
    try:
        entry = orjson.loads(line) if line is not None else None
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) else None


def _row(entry: dict, gap: str) -> list[str]:
    """The timeline's columns of one entry."""
    req, resp = entry.get("request", {}), entry.get("response", {})
    req = req if isinstance(req, dict) else {}
    resp = resp if isinstance(resp, dict) else {}
    status_s = status_text(resp.get("status"), resp.get("error"))
    return [str(entry.get("seq", "?")), str(entry.get("ts", "")), gap, str(entry.get("connector", "?")),
            str(entry.get("effect", "?")), str(entry.get("capture", "?")), call_label(entry), status_s,
            str(req.get("url", ""))]


def _timeline(vault: Vault, session: str, seq: int | None):
    """(columns, entry) per entry shown: seq, time, gap, connector, effect, capture, method, status, URL."""
    prev_ts = None
    for entry in iter_entries(vault, session):
        ts = entry.get("ts", "")
        gap = _gap(prev_ts, ts)
        prev_ts = ts
        if seq is not None and entry.get("seq") != seq:
            continue
        yield _row(entry, gap), entry


COMMANDS = [verify, sessions, show]
