"""`broker search`: entries across the vault's sessions matching every filter given (journal/search.py)."""

from __future__ import annotations

import click

from broker.cli.choices import FILTER_TYPES
from broker.cli.options import reading_vault, store_option, vault_option
from broker.cli.terminal_text import one_line
from journal.listing import call_label, entry_row, status_text
from journal.search import Query, search

_FILTERS = [
    ("connector", "Connector name (gmail, slack, ...)."),
    ("effect", "read or write."),
    ("capture", "Evidence grade: broker, gateway or agent."),
    ("status", "Response status: a code (404), a class (4xx) or none (no answer)."),
    ("answered-by", "upstream, capture or none."),
    ("agent", "The agent that made the call."),
    ("principal", "The account the connector acted as."),
    ("session", "Only this session."),
    ("since", "Entries at or after this UTC time (or a prefix of one: 2026-09-22), ISO time with offset, or "
              "time back from now (1h, 2d)."),
    ("until", "Entries at or before this UTC time (or a prefix of one), ISO time with offset, or time back "
              "from now."),
    ("url", "A substring of the request URL."),
    ("text", "A substring of the request or response body (ASCII letters without case)."),
]


def _with_filters(fn):
    for name, help_text in reversed(_FILTERS):
        fn = click.option(f"--{name}", default=None, type=FILTER_TYPES.get(name), help=help_text)(fn)
    return fn


@click.command("search")
@vault_option
@store_option
@_with_filters
@click.option("--json", "as_json", is_flag=True, help="Print each matching entry as recorded, one per line.")
def search_command(vault_dir: str, store: str | None, as_json: bool, **filters: str | None) -> int:
    """Find entries across every session; the filters given must all hold. Exit 0 when something
    matched, 1 when nothing did. Search reads what is on disk: `broker verify` says whether to trust it."""
    vault = reading_vault(store, vault_dir)
    query = Query.from_mapping(filters)
    found = 0
    for m in search(vault, query):
        found += 1
        if as_json:
            click.echo(m.raw.decode("utf-8", errors="surrogateescape"))
            continue
        row = entry_row(m.entry, m.line)
        status = status_text(row["status"], row["error"])
        r = {k: one_line(v) for k, v in row.items()}  # terminal_text.py: escaped, then padded
        click.echo(f"{one_line(m.session)}  {r['line']:>6}  {r['ts']}  {r['connector']:<9} {r['effect']:<5} "
                   f"{r['capture']:<7} {one_line(call_label(m.entry)):<6} {one_line(status):<4} {r['url']}")
    if not as_json:
        click.echo(f"{found} entr{'y' if found == 1 else 'ies'}", err=True)
    return 0 if found else 1


COMMANDS = [search_command]
