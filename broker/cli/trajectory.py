"""`broker trajectory`: what the model asked for, what was done, what the model was shown."""

from __future__ import annotations

import click
import orjson

from broker.cli.options import reading_vault, store_option, vault_option
from broker.cli.terminal_text import shown_lines
from journal.trajectory import render_lines, trajectory


@click.command(name="trajectory")
@vault_option
@store_option
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.option("--strict", is_flag=True, help="Exit 1 when there is any finding.")
def trajectory_command(vault_dir: str, store: str | None, session: str, as_json: bool, strict: bool) -> int:
    """Replay a session turn by turn: model call, the tool calls it asked for, the entries that carried
    them out, the tool results the model was shown next. Reports tool calls not carried out, calls no
    model asked for, tool results that match no recorded response, and tool definitions that changed."""
    report = trajectory(reading_vault(store, vault_dir), session)
    if as_json:
        click.echo(orjson.dumps(report).decode())
    else:
        click.echo(shown_lines(render_lines(report)))
    return 1 if strict and report["findings"] else 0


COMMANDS = [trajectory_command]
