"""The `broker` group imports a command's module only when it runs: its table of commands
(broker/cli/main.COMMANDS) must name every command of every module, with the summary the command
itself would show, or `broker --help` would lie or a command would be missing."""

from __future__ import annotations

import importlib
import pkgutil

import click
from click.testing import CliRunner

import broker.cli
from broker.cli.main import COMMANDS, cli


def _real_commands() -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for info in pkgutil.iter_modules(broker.cli.__path__):
        if info.name.startswith("_") or info.name == "main":  # __main__ runs the group; main is the table
            continue
        module = importlib.import_module(f"broker.cli.{info.name}")
        for command in getattr(module, "COMMANDS", ()):
            assert command.name not in found, f"{command.name} defined twice"
            found[command.name] = (info.name, command.get_short_help_str(limit=1000))
    return found


def test_the_table_names_every_command_with_its_own_summary():
    assert COMMANDS == _real_commands()


def test_each_name_resolves_to_its_command():
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
    assert cli.get_command(ctx, "no-such-command") is None


def test_help_lists_every_summary_whole_at_eighty_columns():
    out = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    text = " ".join(out.split("Commands:", 1)[1].split())
    for name, (_module, summary) in COMMANDS.items():
        assert f"{name} {summary}" in text
    assert "..." not in text


def test_an_unknown_command_is_one_clear_error():
    result = CliRunner().invoke(cli, ["veriffy"])
    assert result.exit_code == 2 and "No such command 'veriffy'" in result.output
