"""`broker reindex`: the maintenance command that writes the seq sidecar of sessions already recorded."""

from __future__ import annotations

import click

from broker.cli.main import summary
from broker.cli.options import vault_option
from broker.cli.terminal_text import one_line
from journal.seq_sidecar import SidecarRefused, rebuild, sidecar_name
from journal.vault import Vault


@click.command(short_help=summary("reindex"))
@vault_option
@click.argument("sessions", nargs=-1)
def reindex(vault_dir: str, sessions: tuple[str, ...]) -> int:
    """Write the seq sidecar (journal/<session>.seqidx: where every 128th seq starts) of each SESSION (default:
    every session) anew, as the writer would have kept it: for sessions recorded before the writer kept
    one, or whose sidecar was cut short, edited or left behind.

    Besides the journal writer this is the only command that writes the sidecar; every reader only reads
    it, and only as far as each record checks against its line. It takes the lock the writer takes (so it
    can run beside a live broker), writes through the writer's own code, reads the session files and never
    changes them. A symlink, a hard link or a FIFO in the sidecar's place is refused.

    Exit 0 when every sidecar was written, 1 when any was refused or could not be written.
    """
    vault = Vault.open_existing(vault_dir)
    chosen = list(sessions) or vault.sessions()
    if not chosen:
        click.echo(f"no sessions in {one_line(vault.root)}: nothing to reindex")
        return 0
    for s in chosen:
        vault.require_session(s)  # an unknown or unreadable session stops the command before it writes anything
    failed = 0
    for s in chosen:
        name = sidecar_name(vault.session_path(s).name)
        try:
            lines = rebuild(vault, s)
        except (SidecarRefused, OSError) as exc:
            failed += 1
            click.echo(one_line(f"{s}: NOT reindexed: {exc}"))
            continue
        click.echo(one_line(f"{s}: journal/{name} written ({lines} lines)"))
    return 1 if failed else 0


COMMANDS = [reindex]
