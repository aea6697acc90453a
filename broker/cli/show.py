"""`broker show`: a session's timeline, or one entry in full.

A reader of entries that checks none (`broker verify` does): it imports neither the verifier nor the
canonical form, so `show --seq N`, which reads one line through the seq index, takes little more than
`broker --help` whatever N (docs/benchmarks.md, branch `startup26`; tests/test_import_graph.py and
tests/e2e/test_reader_startup_imports.py keep it so).
"""

from __future__ import annotations

import click
import orjson

from broker.cli.main import summary
from broker.cli.options import reading_vault, store_option, vault_option
from broker.cli.terminal_text import json_text, one_line
from journal.entry import parse_ts
from journal.listing import call_label, status_text
from journal.reader import iter_entries, parse_entry
from journal.seq_index import line_of_seq
from journal.vault import Vault, VaultError


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
            click.echo(_entry_text(entry))
    if seq is not None and not found:
        raise VaultError(f"session {session!r} has no entry with seq {seq}")
    return 0


def _show_one(vault: Vault, session: str, seq: int, as_json: bool) -> int:
    """`show --seq N`: the entry's line (found by the store's key or the file's seq index, journal/seq_index.py
    line_of_seq: time independent of N) and the one before it for the gap; nothing else is read."""
    line = line_of_seq(vault, session, seq)
    entry = parse_entry(line)
    if entry is None:
        raise VaultError(f"session {session!r} has no entry with seq {seq}")
    if as_json:
        click.echo(orjson.dumps(entry).decode())
        return 0
    before = parse_entry(line_of_seq(vault, session, seq - 1)) if seq > 1 else None
    row = _row(entry, _gap(before.get("ts") if before else None, entry.get("ts", "")))
    click.echo("  ".join(row[:8]) + "  " + row[8])
    click.echo(_entry_text(entry))
    return 0


def _entry_text(entry: dict) -> str:
    """The whole entry below its line: indented JSON, each character a terminal would obey escaped as JSON
    (broker/cli/terminal_text.py)."""
    return json_text(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())


def _row(entry: dict, gap: str) -> list[str]:
    """The timeline's columns of one entry, each one line with nothing a terminal would obey
    (broker/cli/terminal_text.py): escaped before the columns are padded."""
    req, resp = entry.get("request", {}), entry.get("response", {})
    req = req if isinstance(req, dict) else {}
    resp = resp if isinstance(resp, dict) else {}
    status_s = status_text(resp.get("status"), resp.get("error"))
    return [one_line(c) for c in (entry.get("seq", "?"), entry.get("ts", ""), gap, entry.get("connector", "?"),
                                  entry.get("effect", "?"), entry.get("capture", "?"), call_label(entry), status_s,
                                  req.get("url", ""))]


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


COMMANDS = [show]
