"""The `broker` command line: one click group; each command family lives in its own module."""

from __future__ import annotations

import sys

import click

from broker.errors import run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="connector-broker")
def cli() -> None:
    """Evidence-grade record of every connector call an AI agent makes."""


def _register() -> None:
    from broker import audit_commands, mcp_commands, proxy_commands, replay_commands, seal_commands, store_commands

    for module in (audit_commands, seal_commands, proxy_commands, mcp_commands, replay_commands, store_commands):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    sys.exit(run_cli(cli))


if __name__ == "__main__":
    main()
