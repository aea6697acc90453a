"""Sealing commands: keygen, seal (docs/checkpoints.md says what a checkpoint proves, and to whom)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from broker.cli.main import summary
from broker.cli.options import ANY_SIGNER_KEY, VERIFIER_KEY, reading_vault, store_option, vault_option
from broker.cli.terminal_text import one_line
from journal.checkpoint.audit import session_tree
from journal.checkpoint.note import Signer, Verifier
from journal.checkpoint.sealer import Sealer
from journal.checkpoint.witness import WitnessClient
from journal.seal import write_seal
from journal.vault import Vault, VaultError
from journal.verify import verify_session


@click.command(short_help=summary("keygen"))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Directory for NAME.key (signer key, mode 0600) and NAME.vkey (verifier key); characters "
              "other than letters, digits, '.', '_' and '-' become '_' in the file names.")
@click.option("--name", default="seal-key", show_default=True,
              help="Key name (no spaces, no '+'): it names the key in every signature line.")
@click.option("--cosigner", is_flag=True,
              help="A witness key: NAME.vkey is the cosignature/v1 verifier key (type 0x04).")
def keygen(out_dir: str, name: str, cosigner: bool) -> int:
    """Create an Ed25519 signer key in the C2SP/Go note text format and print its verifier key.

    Keep NAME.key away from whoever can write the vault; give NAME.vkey to auditors and witnesses.
    """
    signer = Signer.generate(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    key_path, vkey_path = out / f"{stem}.key", out / f"{stem}.vkey"
    for p in (key_path, vkey_path):
        if p.exists():
            raise VaultError(f"{p} exists; refusing to overwrite a key")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(signer.key_text() + "\n")
    vkey = (signer.cosigner_verifier() if cosigner else signer.verifier()).vkey()
    vkey_path.write_text(vkey + "\n")
    click.echo(vkey)
    return 0


@click.command(short_help=summary("seal"))
@vault_option
@store_option
@click.argument("sessions", nargs=-1)
@click.option("--key", "signer", required=True, type=ANY_SIGNER_KEY,
              help="Signer key from `broker keygen` (a legacy PEM key writes the old .seal files).")
@click.option("--witness", "witness_urls", multiple=True, metavar="URL",
              help="Ask this tlog-witness to cosign each checkpoint (repeatable).")
@click.option("--witness-key", "witness_keys", type=VERIFIER_KEY, multiple=True,
              help="The witness's cosigner key (text or file), paired with --witness in order: "
              "only its checked cosignatures are kept.")
def seal(vault_dir: str, store: str | None, sessions: tuple[str, ...], signer: Signer | Ed25519PrivateKey,
         witness_urls: tuple[str, ...], witness_keys: tuple[Verifier, ...]) -> int:
    """Write a signed checkpoint for each intact session into <vault>/seals/, and the signed vault index.

    Exit 1 when a session is broken or refused (its file changed under an earlier checkpoint).
    A witness that cannot be reached is reported; the checkpoint is written without its cosignature.
    With a database --store, its sessions are read in place and the checkpoints go into --vault DIR.
    """
    vault = reading_vault(store, vault_dir)
    names = list(sessions) or vault.sessions()
    if isinstance(signer, Ed25519PrivateKey):
        return _legacy_seal(vault, names, signer)
    keys = list(witness_keys)
    clients = [WitnessClient(u, keys[i] if i < len(keys) else None) for i, u in enumerate(witness_urls)]
    trees = {}
    broken = 0
    for s in names:
        vault.require_session(s)
        report, tree = session_tree(vault, s)
        if not report.intact:
            click.echo(one_line(f"{s}: NOT sealed: broken at seq {report.broken_at_seq} ({report.kind})"), err=True)
            broken += 1
            continue
        trees[s] = tree
    for o in Sealer(vault, signer, clients).seal(trees):
        if o.refused:
            click.echo(one_line(f"{o.session}: NOT sealed: {o.refused}"), err=True)
            broken += 1
            continue
        by = f", cosigned by {', '.join(o.cosigned_by)}" if o.cosigned_by else ""
        click.echo(one_line(f"{o.session}: checkpoint at {o.size} entries{by}"))
        for p in o.witness_problems:
            click.echo(f"  note: no cosignature: {one_line(p)}")
    return 1 if broken else 0


def _legacy_seal(vault: Vault, names: list[str], key: Ed25519PrivateKey) -> int:
    """The connector-journal-seal/1 `.seal` files of journal/seal.py (kept so old set-ups keep working)."""
    broken = 0
    for s in names:
        vault.require_session(s)
        last: dict = {}
        report = verify_session(vault, s, on_entry=last.update)
        if not report.intact:
            click.echo(one_line(f"{s}: NOT sealed: broken at seq {report.broken_at_seq} ({report.kind})"), err=True)
            broken += 1
            continue
        if not report.entries:
            raise VaultError(f"session {s!r} has no entries to seal")
        sealed = write_seal(vault, s, report.entries, last["hash"], key)
        click.echo(one_line(f"{s}: sealed at {sealed.entries} entries (head {sealed.head[:16]}...)"))
    return 1 if broken else 0


COMMANDS = [keygen, seal]
