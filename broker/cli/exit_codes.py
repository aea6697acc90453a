"""Turning errors a user can cause into one clear line and an exit code (never a traceback)."""

from __future__ import annotations

import click

from journal.entry import ContractError
from journal.vault import VaultError
from journal.writer import JournalError

USAGE_EXIT = 2
# OSError covers what the machine refuses (a port in use, a full disk, a missing file, no permission).
USER_ERRORS = (VaultError, JournalError, ContractError, OSError, ValueError)


def run_cli(group: click.Group) -> int:
    try:
        result = group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("broker: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except USER_ERRORS as exc:
        click.echo(f"broker: error: {exc}", err=True)
        return USAGE_EXIT
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0
