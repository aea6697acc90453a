"""`broker diff`: do two sessions show the same behaviour (calls and statuses)?"""

from __future__ import annotations

import click
import orjson

from broker.cli.options import reading_vault, store_option, vault_option
from broker.cli.terminal_text import shown_lines


@click.command()
@vault_option
@store_option
@click.argument("session_a")
@click.argument("session_b")
@click.option("--json", "as_json", is_flag=True, help="The differences as one JSON object.")
def diff(vault_dir: str, store: str | None, session_a: str, session_b: str, as_json: bool) -> int:
    """Compare the ordered calls (connector, effect, method, URL, request body hash) and statuses of two
    sessions. Exit 0 when they match, 1 when they differ, 2 on a usage error."""
    from journal.diff import diff_sessions, render_lines

    d = diff_sessions(reading_vault(store, vault_dir), session_a, session_b)
    if as_json:
        click.echo(orjson.dumps(d.as_dict()).decode())
    else:
        click.echo(shown_lines(render_lines(d)))
    return 0 if d.same else 1


COMMANDS = [diff]
