"""Commands auditors use on a vault: verify, sessions, show."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
import orjson

from broker.store_options import pulled_vault, reading_vault, store_option
from journal.entry import parse_ts
from journal.reader import iter_entries
from journal.seal import load_public_key
from journal.vault import Vault, VaultError
from journal.verify import SessionReport, verify_session

vault_option = click.option(
    "--vault", "vault_dir", envvar="BROKER_VAULT", default="./vault", show_default=True,
    type=click.Path(file_okay=False), help="Vault directory (also BROKER_VAULT).",
)
PROGRESS_MIN_BYTES = 8 << 20


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for large vaults, only when stderr is a terminal."""
    if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=Console(stderr=True), transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _select(vault: Vault, sessions: tuple[str, ...]) -> list[str]:
    if not sessions:
        return vault.sessions()
    for s in sessions:
        vault.require_session(s)
    return list(sessions)


def _total_bytes(vault: Vault, sessions: list[str]) -> int:
    return sum(vault.session_path(s).stat().st_size for s in sessions)


@click.command()
@vault_option
@store_option
@click.argument("sessions", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per session.")
@click.option("--no-blobs", is_flag=True, help="Skip re-hashing spilled blobs (faster, weaker).")
@click.option("--seal-key", type=click.Path(dir_okay=False), default=None,
              help="Public seal key (from `broker keygen`, kept outside the vault): check each session's seal.")
def verify(
    vault_dir: str, store: str | None, sessions: tuple[str, ...], as_json: bool, no_blobs: bool, seal_key: str | None
) -> int:
    """Check every session's hash chain, canonical form, contract, blobs and (with --seal-key) seal.

    Exit 0 when every session is intact, 1 when any is broken, 2 on a usage error.
    """
    public = load_public_key(seal_key) if seal_key else None
    if seal_key and store:  # seals of a database store live in the vault it was pulled into and sealed in
        vault = pulled_vault(store, vault_dir, list(sessions) or None)
    else:
        vault = reading_vault(store, vault_dir, blobs=not no_blobs)
    names = _select(vault, sessions)
    reports: list[SessionReport] = []
    with _progress(_total_bytes(vault, names), "verifying") as advance:
        for s in names:
            reports.append(
                verify_session(vault, s, check_blobs=not no_blobs, progress=advance, seal_key=public)
            )
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
    if not names and not as_json:
        click.echo(f"no sessions in {vault.root}")
    return 0 if all(r.intact for r in reports) else 1


@click.command()
@vault_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per session.")
def sessions(vault_dir: str, store: str | None, as_json: bool) -> int:
    """List sessions: entries, first and last time, connectors, writes, and whether each verifies."""
    vault = reading_vault(store, vault_dir)
    names = vault.sessions()
    rows = []
    with _progress(_total_bytes(vault, names), "reading") as advance:
        for s in names:
            connectors: set[str] = set()
            writes = 0

            def seen(entry: dict, connectors: set[str] = connectors) -> None:
                nonlocal writes
                connectors.add(entry["connector"])
                writes += entry["effect"] == "write"

            r = verify_session(vault, s, progress=advance, on_entry=seen)
            rows.append({
                "session": s, "entries": r.entries if r.intact else _count_lines(vault, s),
                "first_ts": r.first_ts, "last_ts": r.last_ts, "connectors": sorted(connectors),
                "writes": writes, "verifies": r.intact,
                "broken_at_seq": r.broken_at_seq, "kind": r.kind,
            })
    if as_json:
        for row in rows:
            click.echo(orjson.dumps(row).decode())
        return 0
    if not rows:
        click.echo(f"no sessions in {vault.root}")
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


def _count_lines(vault: Vault, session: str) -> int:
    with open(vault.session_path(session), "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


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


@click.command()
@vault_option
@store_option
@click.argument("session")
@click.option("--seq", type=int, default=None, help="Show only this entry.")
@click.option("--json", "as_json", is_flag=True, help="Entries as JSON, one per line.")
def show(vault_dir: str, store: str | None, session: str, seq: int | None, as_json: bool) -> int:
    """A session's timeline: seq, time, gap, connector, effect, capture, method, URL, status."""
    vault = reading_vault(store, vault_dir, blobs=False)
    vault.require_session(session)
    prev_ts = None
    found = False
    for entry in iter_entries(vault, session):
        ts = entry.get("ts", "")
        gap = _gap(prev_ts, ts)
        prev_ts = ts
        if seq is not None and entry.get("seq") != seq:
            continue
        found = True
        if as_json:
            click.echo(orjson.dumps(entry).decode())
            continue
        req, resp = entry.get("request", {}), entry.get("response", {})
        status = resp.get("status")
        status_s = str(status) if status is not None else f"ERR({resp.get('error', '?')})"
        click.echo(
            f"{entry.get('seq', '?'):>5}  {ts}  {gap:>9}  {entry.get('connector', '?'):<9} "
            f"{entry.get('effect', '?'):<5} {entry.get('capture', '?'):<7} {req.get('method', '?'):<6} "
            f"{status_s:<4} {req.get('url', '')}"
        )
        if seq is not None:
            click.echo(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())
    if seq is not None and not found:
        raise VaultError(f"session {session!r} has no entry with seq {seq}")
    return 0


COMMANDS = [verify, sessions, show]
