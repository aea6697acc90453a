"""`broker publish SESSION --to DIR|s3://...`: the session's Merkle tree as C2SP tlog-tiles.

journal/checkpoint/tiles.py writes them; docs/tiles.md says what is public (entry hashes only)."""

from __future__ import annotations

import click

from broker.cli.main import summary
from broker.cli.options import SIGNER_KEY, reading_vault, store_option, vault_option
from broker.cli.terminal_text import one_line
from journal.checkpoint.checkpoint import session_origin
from journal.checkpoint.note import Signer
from journal.checkpoint.tiles import publish as publish_tiles
from journal.checkpoint.tiles import tile_target
from journal.verify import verify_session


@click.command(short_help=summary("publish"))
@vault_option
@store_option
@click.argument("session")
@click.option("--to", "to", required=True, metavar="DIR|s3://BUCKET/PREFIX", help="Where the tiles go.")
@click.option("--key", "key", type=SIGNER_KEY, required=True, help="Signer key (`broker keygen`) for `checkpoint`.")
def publish(vault_dir: str, store: str | None, session: str, to: str, key: Signer) -> int:
    """Write the session's tree as tlog-tiles and a signed `checkpoint`, adding only what is new since the
    last publication. Public: the entries' hashes; never the entries. Exit 1 when the session does not verify
    or the published checkpoint is not a prefix of it."""
    vault = reading_vault(store, vault_dir, blobs=False)
    vault.require_session(session)
    hashes: list[bytes] = []
    report = verify_session(vault, session, check_blobs=False,
                            on_entry=lambda e: hashes.append(bytes.fromhex(e["hash"])))
    if not report.intact:
        click.echo(one_line(f"{session}: BROKEN at seq {report.broken_at_seq}: {report.kind}: {report.detail}")
                   + "; not published")
        return 1
    origin = session_origin(vault.origin(create=True, prefix=key.name) or key.name, session)  # the sealer's origin
    old, new, written = publish_tiles(tile_target(to), origin, hashes, key)
    click.echo(one_line(f"{session}: published {new} entries to {to} ({new - old} new, {written} objects written); "
                        f"origin {origin}"))
    return 0


COMMANDS = [publish]
