"""`broker verify-export FILE`: re-check the hash chain inside an export, without the vault."""

from __future__ import annotations

import click


@click.command("verify-export")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False, exists=True))
def verify_export(path: str) -> int:
    """Re-check the chain inside an export (OCSF, HAR or OTel): exit 1 naming the first dropped,
    reordered, repeated or altered event.

    Works on a copy kept anywhere (a SIEM, a ticket): each event carries its entry's seq, hash and
    prev, and OCSF events the entry itself. See docs/exports.md, "Checking an export".
    """
    from broker.cli.terminal_text import one_line
    from journal.export.verify_export import verify_export as check

    verdict = check(path)
    if verdict.ok:
        click.echo(one_line(f"{path}: {verdict.format}, {verdict.events} events in {verdict.sessions} session(s): "
                            "every chain intact"))
        return 0
    click.echo(one_line(f"{path}: {verdict.format}: NOT intact: {verdict.problem}"))
    return 1


COMMANDS = [verify_export]
