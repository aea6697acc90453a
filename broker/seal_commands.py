"""Sealing commands: keygen, seal (see journal/seal.py for what a seal proves)."""

from __future__ import annotations

from pathlib import Path

import click

from broker.audit_commands import vault_option
from broker.store_options import pulled_vault, store_option
from journal.seal import generate_keypair, load_private_key, write_seal
from journal.vault import VaultError
from journal.verify import verify_session


@click.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Directory for seal-key.pem (private) and seal-key.pub (public).")
@click.option("--name", default="seal-key", show_default=True, help="File name stem.")
def keygen(out_dir: str, name: str) -> int:
    """Create an Ed25519 key pair for sealing. Keep the private key away from whoever can write the vault."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kid = generate_keypair(out / f"{name}.pem", out / f"{name}.pub")
    click.echo(f"key {kid}: private {out / f'{name}.pem'} (mode 0600), public {out / f'{name}.pub'}")
    return 0


@click.command()
@vault_option
@store_option
@click.argument("sessions", nargs=-1)
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False), help="Private seal key.")
def seal(vault_dir: str, store: str | None, sessions: tuple[str, ...], key_path: str) -> int:
    """Sign each session's current length and head into <vault>/seals/. Only intact sessions are sealed.

    With a database --store, its sessions are pulled into --vault DIR first and sealed there."""
    key = load_private_key(key_path)
    vault = pulled_vault(store, vault_dir, list(sessions) or None)
    names = list(sessions) or vault.sessions()
    broken = 0
    for s in names:
        vault.require_session(s)
        last: dict = {}
        report = verify_session(vault, s, on_entry=last.update)
        if not report.intact:
            click.echo(f"{s}: NOT sealed: broken at seq {report.broken_at_seq} ({report.kind})", err=True)
            broken += 1
            continue
        if not report.entries:
            raise VaultError(f"session {s!r} has no entries to seal")
        sealed = write_seal(vault, s, report.entries, last["hash"], key)
        click.echo(f"{s}: sealed at {sealed.entries} entries (head {sealed.head[:16]}...)")
    return 1 if broken else 0


COMMANDS = [keygen, seal]
