"""The `broker` click group: each command family lives in its own module of this package."""

from __future__ import annotations

import sys

import click

from broker.cli.exit_codes import run_cli


class _WholeSummaries(click.Group):
    """`broker --help` lists each command with its whole first sentence (wrapped), never cut with
    "...": click's default shortens summaries to the terminal width. Commands may set a `short_help`."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_WholeSummaries, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="connector-broker")
def cli() -> None:
    """Evidence-grade record of every connector call an AI agent makes."""


def _register() -> None:
    from broker.cli import (
        audit,
        checkpoint,
        diff,
        exec,
        export,
        inspect,
        mcp,
        proxy,
        publish,
        replay,
        seal,
        search,
        store,
        trajectory,
    )

    for module in (audit, seal, checkpoint, proxy, exec, mcp, replay, trajectory, search, inspect, export, diff,
                   store, publish):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    sys.exit(run_cli(cli))

