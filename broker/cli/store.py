"""Commands that move or maintain the journal's store: pull, push, store migrate/grant, erase."""

from __future__ import annotations

import getpass
import socket

import click

from broker.cli.options import SIGNER_KEY, store_option
from broker.cli.terminal_text import one_line
from journal.checkpoint.note import Signer
from journal.store import StoreError, open_store
from journal.store.file_store import FileStore
from journal.store.postgres_store import PostgresStore
from journal.store.transfer import copy_store
from journal.verify import verify_session


@click.command()
@click.option("--from", "source", required=True, metavar="URL", help="Store to copy from (postgresql://... or DIR).")
@click.option("--to", "target", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Vault directory to write (created when missing; sessions in it must be prefixes).")
@click.option("--no-blobs", is_flag=True, help="Copy entries and tombstones only.")
@click.option("--blobs", "blobs", default=None, metavar="s3://BUCKET/PREFIX",
              help="Fetch the blobs from this bucket (where `broker run --blobs` put them), so every reader of "
              "the pulled vault (show, export, inspect, replay) finds them.")
@click.argument("sessions", nargs=-1)
def pull(source: str, target: str, no_blobs: bool, sessions: tuple[str, ...], blobs: str | None = None) -> int:
    """Copy a store (a PostgreSQL journal or a vault) into a file vault, byte for byte, and verify the result."""
    src, dst = open_store(source), open_store(target, create=True)
    if not isinstance(dst, FileStore):
        src.close()
        dst.close()
        raise click.BadParameter(f"{target!r} is not a vault directory: pull writes into a directory (use "
                                 "`broker push` to copy into a database)", param_hint="--to")
    try:
        from journal.store.url import open_blob_sink

        report = copy_store(src, dst, blobs=not no_blobs, sessions=list(sessions) or None,
                            blob_source=open_blob_sink(blobs) if blobs else None)
    finally:
        src.close()
    click.echo(one_line(f"pulled {report.lines} entries of {len(report.sessions)} sessions, {report.blobs} blobs, "
                        f"{report.tombstones} tombstones into {dst.url}"))
    broken = len(report.unmapped)
    for s, why in report.unmapped.items():
        click.echo(one_line(f"{s!r}: BROKEN at seq 1: contract_violation: {why}; not pulled"))
    for s in report.sessions:
        r = verify_session(dst.vault, s, check_blobs=not no_blobs)
        if not r.intact:
            broken += 1
            click.echo(one_line(f"{s}: BROKEN at seq {r.broken_at_seq}: {r.kind}: {r.detail}"))
    return 1 if broken else 0


@click.command()
@click.option("--from", "source", required=True, metavar="DIR", help="Vault directory (or store) to copy from.")
@click.option("--to", "target", required=True, metavar="URL", help="Store to copy into (postgresql://...).")
@click.argument("sessions", nargs=-1)
def push(source: str, target: str, sessions: tuple[str, ...]) -> int:
    """Migrate a file vault into a store. Only sessions that verify are pushed; the rest are named."""
    src, dst = open_store(source), open_store(target, create=True)
    names = list(sessions) or src.sessions()
    good = []
    vault = getattr(src, "vault", None)
    for s in names:
        if vault is not None:
            r = verify_session(vault, s)
            if not r.intact:
                click.echo(one_line(f"{s}: not pushed, BROKEN at seq {r.broken_at_seq}: {r.kind}: {r.detail}"))
                continue
        good.append(s)
    try:
        report = copy_store(src, dst, sessions=good)
    finally:
        dst.close()
    click.echo(one_line(f"pushed {report.lines} entries of {len(good)} sessions, {report.blobs} blobs, "
                        f"{report.tombstones} tombstones into {getattr(dst, 'shown', dst.url)}"))
    return 0 if len(good) == len(names) else 1


@click.group()
def store() -> None:
    """Maintain a store: a PostgreSQL schema and its roles; probe an S3 bucket's retention."""


@store.command()
@click.argument("url", metavar="s3://BUCKET/PREFIX")
@click.option("--retain-seconds", type=click.IntRange(1, 86400), default=60, show_default=True,
              help="Retention of the compliance-mode canary (it cannot be deleted before then).")
def probe(url: str, retain_seconds: int) -> int:
    """Write a canary and report, as observed facts, what the bucket refuses: an overwrite, a delete of a
    locked version, a shortened retention, a switch from compliance to governance. Exit 1 when it accepts any."""
    from journal.store.s3_probe import probe as run_probe

    facts = run_probe(url, retain_seconds=retain_seconds)
    for fact in facts:
        click.echo(one_line(fact.line()))
    if any(f.refused is False for f in facts):
        click.echo("this bucket is not write-once for what is marked ACCEPTED (an emulator may differ from AWS S3: "
                   "probe the production bucket)")
    return 1 if any(f.refused is not True for f in facts) else 0


def _database(url: str) -> PostgresStore:
    s = open_store(url)
    if not isinstance(s, PostgresStore):
        raise StoreError(f"{url} is a vault directory; `broker store` maintains postgresql:// stores")
    return s


@store.command()
@store_option
@click.option("--grant", "roles", multiple=True, metavar="ROLE",
              help="Also give ROLE (a broker's login) SELECT and INSERT on the journal tables, nothing more.")
def migrate(store: str | None, roles: tuple[str, ...]) -> int:
    """Create the journal schema, or upgrade it to this broker's version (run as the database owner)."""
    if not store:
        raise click.UsageError("give --store postgresql://... (or BROKER_STORE)")
    db = _database(store)
    before, after = db.migrate()
    click.echo(f"{db.shown}: schema version {before} -> {after}" if before != after
               else f"{db.shown}: schema is at version {after}")
    for role in roles:
        db.grant_writer(role)
        click.echo(f"{db.shown}: granted SELECT, INSERT to {role}")
    db.close()
    return 0


@click.command()
@store_option
@click.option("--vault", "vault_dir", envvar="BROKER_VAULT", default="./vault", show_default=True,
              type=click.Path(file_okay=False), help="Vault directory (also BROKER_VAULT).")
@click.option("--blob", "digest", required=True, metavar="SHA256", help="SHA-256 of the blob to erase.")
@click.option("--reason", required=True, help="Why (retention rule, a person's request ...); kept in the tombstone.")
@click.option("--by", "by", default=None, help="Who erases (default: user@host).")
@click.option("--signing-key", type=SIGNER_KEY, default=None,
              help="Erasure signer key (NAME.key from `broker keygen`): verifiers given its NAME.vkey as --erasure-key "
              "report the blob erased; an unsigned tombstone is reported missing.")
def erase(store: str | None, vault_dir: str, digest: str, reason: str, by: str | None,
          signing_key: Signer | None) -> int:
    """Delete a blob's bytes and leave a tombstone (sha256, when, by whom, why); the chain still verifies."""
    signer = signing_key
    target = open_store(store or vault_dir)
    who = by or f"{getpass.getuser()}@{socket.gethostname()}"
    t = target.erase_blob(digest.lower(), reason=reason, by=who, signer=signer)
    target.close()
    click.echo(one_line(f"erased blob {t.sha256} ({t.size} bytes) on {t.erased_at} by {t.erased_by}: {t.reason}"))
    return 0


COMMANDS = [pull, push, store, erase]
