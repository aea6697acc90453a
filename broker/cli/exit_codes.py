"""What `broker` exits with: a user's error is one clear line and exit 2, a bug is its traceback and exit 1.

A user's error is a `BrokerError` (journal/errors.py: every error a user can cause or fix derives from
it, and its message says what to do) or an OSError (what the machine refuses: a port in use, a full
disk, a missing file, no permission). Anything else, a ValueError or KeyError included, is a bug in
the broker: it is not caught here, so Python shows where it happened and exits 1.
"""

from __future__ import annotations

import click

from journal.errors import BrokerError

USAGE_EXIT = 2
USER_ERRORS = (BrokerError, OSError)


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
