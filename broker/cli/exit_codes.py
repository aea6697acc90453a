"""What `broker` exits with: a user's error is one clear line and exit 2, a bug is its traceback and exit 1.

Usage mistakes (an unknown option, a value outside its choices) have the same one-line shape, exit 2.
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


def usage_line(exc: click.ClickException) -> str:
    """A usage mistake in the shape of every other error: one `broker: error:` line (click's own form is four
    lines, `Usage:`, `Try ...`, a blank line and `Error: ...`), naming the help to read."""
    from broker.cli.terminal_text import one_line  # (here: `broker --help` loads no more than it must)

    text = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        text += f" (see `{ctx.command_path} --help`)"
    return f"broker: error: {one_line(text)}"


def run_cli(group: click.Group) -> int:
    try:
        result = group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("broker: aborted", err=True)
        return 130
    except click.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `broker mcp` alone: the help itself, as click shows it
            exc.show()
            return exc.exit_code
        click.echo(usage_line(exc), err=True)
        return exc.exit_code
    except USER_ERRORS as exc:
        from broker.cli.terminal_text import one_line  # a message may quote the vault: escaped, one line

        click.echo(f"broker: error: {one_line(exc)}", err=True)
        return USAGE_EXIT
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0
