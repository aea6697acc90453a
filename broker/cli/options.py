"""The options several commands share, and how each is read: one place for each.

- `--vault DIR` and `--store URL` (see journal/store/): a command given `--store` (or BROKER_STORE)
  uses it; otherwise `--vault DIR` as before. Readers of a PostgreSQL store read it in place
  (journal/store/database_vault.py): the same lines a pulled vault would hold, in seq order, paged.
- `--seal-key` and the checkpoint options `broker run` and `broker mcp` share (journal/checkpoint/autoseal.py).
- every key option (`--seal-key`, `--witness-key`, `--log-key`, `--key`): read by journal/checkpoint/keys.py.
- `--listen HOST:PORT` and the socket it binds.
- `--pass-unknown HOST_PATTERN` (and the old `--record-unknown`): which hosts no connector knows pass
  unrecorded (broker/proxy/passed_hosts.py), for every command that runs the proxy.
- `--ack-deadline SECONDS`: how long a capture point waits for its recording service (broker/proxy/link.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from journal.vault import Vault

if TYPE_CHECKING:
    import socket

    from journal.checkpoint.autoseal import AutosealConfig

# The recording stack (broker.proxy.link, journal.checkpoint.autoseal -> journal.writer) is imported by the
# options of the commands that record, when those commands are built: read-only commands (verify, show,
# search, ...) import this module too and never load it. Nor do they load what only a listening command
# (socket: `bind`) or a --store URL (journal.store: `reading_vault`) needs: each is imported where it is used.

vault_option = click.option(
    "--vault", "vault_dir", envvar="BROKER_VAULT", default="./vault", show_default=True,
    type=click.Path(file_okay=False), help="Vault directory (also BROKER_VAULT).",
)

store_option = click.option(
    "--store", "store", envvar="BROKER_STORE", default=None, metavar="URL",
    help="Journal store: a vault directory or postgresql://... (also BROKER_STORE); overrides --vault.",
)

blobs_option = click.option(
    "--blobs", "blobs", envvar="BROKER_BLOBS", default=None, metavar="s3://BUCKET/PREFIX",
    help="Blob store for spilled bodies (also BROKER_BLOBS): an S3 bucket prefix; endpoint, region and "
    "credentials from the usual AWS variables and files. Default: the blobs stay with the store.",
)


def checked_blobs(blobs: str | None) -> str | None:
    """The --blobs URL once its bucket answered (one clear error at start otherwise), exported as BROKER_BLOBS
    so that every process the command starts (recording service, workers) writes blobs to the same place."""
    import os

    if not blobs:
        return None
    from journal.store.url import open_blob_sink

    sink = open_blob_sink(blobs)
    sink.check_reachable()  # type: ignore[attr-defined]
    os.environ["BROKER_BLOBS"] = blobs
    return blobs


def store_or_vault(store: str | None, vault_dir: str) -> str:
    """What a writer records into: the --store URL when given, else the --vault directory."""
    return store or vault_dir


def reading_vault(store: str | None, vault_dir: str, *, blobs: bool = True) -> Vault:
    """The vault a reader reads: --vault DIR, --store DIR, or a --store database read in place (rows in seq
    order, a page at a time: journal/store/database_vault.py), with --vault DIR as the folder of its
    checkpoints and seals. Nothing is copied and nothing is written. (`blobs` is kept for old callers: a
    database's blobs are read from it as they are needed.)"""
    if not store:
        return Vault.open_existing(vault_dir)
    from journal.store import is_database_url, open_store

    if not is_database_url(store):
        return Vault.open_existing(store)
    from journal.store.database_vault import DatabaseVault

    db = open_store(store)
    click.get_current_context().call_on_close(db.close)
    return DatabaseVault(db, vault_dir)  # type: ignore[arg-type]


def unmapped_sessions(vault: Vault) -> dict[str, str]:
    """Session ids a database store holds but no vault file can be named for -> why (findings for the reader
    to report: such a row was not verified); none for a file vault."""
    return dict(getattr(vault, "unmapped", {}))


class KeyParam(click.ParamType):
    """A key option's value, parsed when the command line is (journal/checkpoint/keys.py): a file that is
    not the key asked for stops the command with one line saying what to give, before anything runs."""

    def __init__(self, parse: Callable[[str], object], metavar: str) -> None:
        self.parse, self.name = parse, metavar

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.name

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        return self.parse(value) if isinstance(value, str) else value


def _key_reader(name: str) -> Callable[[str], object]:
    """journal/checkpoint/keys.py's reader `name`, imported when a key option is given: the key modules (and
    cryptography) are not loaded by the commands that run without a key (`broker verify`, `show`, ...)."""
    def read(value: str) -> object:
        from journal.checkpoint import keys

        return getattr(keys, name)(value)

    return read


def _checked_signer_path(path: str) -> str:
    """The path, once it holds a signer key: the recording process reads the key itself."""
    _key_reader("load_signer")(path)
    return path


VERIFIER_KEY = KeyParam(_key_reader("load_verifier"), "VKEY")
"""A checkpoint verifier key (NAME.vkey), as a file or its text: a journal.checkpoint.note.Verifier."""
ANY_VERIFIER_KEY = KeyParam(_key_reader("any_verifier"), "VKEY")
"""VERIFIER_KEY, or a legacy seal public key (.pub: an Ed25519PublicKey) that checks the old .seal files."""
SIGNER_KEY = KeyParam(_key_reader("load_signer"), "KEY")
"""A checkpoint signer key file (NAME.key): a journal.checkpoint.note.Signer."""
ANY_SIGNER_KEY = KeyParam(_key_reader("any_signer"), "KEY")
"""SIGNER_KEY, or a legacy PEM private key (an Ed25519PrivateKey) that writes the old .seal files."""
SIGNER_KEY_FILE = KeyParam(_checked_signer_path, "KEY")
"""A checkpoint signer key file, checked, kept as its path."""


def seal_options(f: Callable) -> Callable:
    """--seal-key (a signer key file: the recording process reads it itself), --checkpoint-entries,
    --checkpoint-seconds and --witness, for the commands that record."""
    from journal.checkpoint.autoseal import DEFAULT_ENTRIES, DEFAULT_SECONDS

    f = click.option("--witness", "witness", multiple=True, metavar="URL",
                     help="tlog-witness to cosign each checkpoint (repeatable); one that is down never blocks.")(f)
    f = click.option("--checkpoint-seconds", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_SECONDS,
                     show_default=True, help="With --seal-key: a checkpoint at least every T seconds.")(f)
    f = click.option("--checkpoint-entries", type=click.IntRange(min=1), default=DEFAULT_ENTRIES, show_default=True,
                     help="With --seal-key: a checkpoint every N entries of a session.")(f)
    return click.option("--seal-key", type=SIGNER_KEY_FILE, default=None,
                        help="Signer key (`broker keygen`): write checkpoints while recording and at a clean stop. "
                        "Keep it outside the vault.")(f)


def autoseal_config(seal_key: str | None, entries: int, seconds: float, witness: tuple[str, ...],
                    store: str | None = None, vault_dir: str = "") -> AutosealConfig | None:
    """The settings (the key was checked as the command line was parsed, before anything listens). With a
    database `store` the checkpoints go into the --vault directory, where `broker verify --store URL --vault
    DIR --seal-key VKEY` reads them."""
    if not seal_key:
        if witness:
            raise click.UsageError("--witness needs --seal-key")
        return None
    from journal.checkpoint.autoseal import AutosealConfig
    from journal.store import is_database_url

    home = str(Path(vault_dir).resolve()) if store and is_database_url(store) else ""
    return AutosealConfig(seal_key, entries, seconds, list(witness), vault_dir=home)


def _pass_unknown_patterns(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    from broker.proxy.passed_hosts import check_patterns

    try:
        return tuple(check_patterns(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def unknown_host_options(f: Callable) -> Callable:
    """--pass-unknown HOST_PATTERN (repeatable) and --record-unknown (the default now, kept for old scripts):
    every host no connector knows is recorded (connector `other`) unless passed here."""
    f = click.option("--record-unknown", is_flag=True, hidden=True,
                     help="Record traffic no connector recognises: the default now (kept for old scripts).")(f)
    return click.option(
        "--pass-unknown", "pass_unknown", multiple=True, metavar="HOST_PATTERN", callback=_pass_unknown_patterns,
        help="Let calls to this host pass unrecorded when no connector knows it: a host name, a glob such as "
        "'*.corp.example', or 'all' (repeatable). Every other unknown host is recorded (connector 'other'); "
        "each passed host is said once on stderr and counted in the checkpoints' declared coverage.",
    )(f)


def ack_deadline_option(f: Callable) -> Callable:
    """--ack-deadline SECONDS (broker/proxy/link.py), for the commands that run the proxy."""
    from broker.proxy.link import ACK_DEADLINE

    return click.option(
        "--ack-deadline", type=click.FloatRange(min=0, min_open=True), default=ACK_DEADLINE, show_default=True,
        metavar="SECONDS",
        help="Seconds a call waits for the recording service's acknowledgement; past it the service is treated "
        "as dead (killed and replaced) and the proxy records the waiting calls itself.",
    )(f)


def parse_listen(listen: str, param_hint: str = "--listen") -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) -> (host, port); a usage error naming the option otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{listen!r}: give HOST:PORT, e.g. 127.0.0.1:8090", param_hint=param_hint)
    return host.strip("[]"), int(port)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server starts, so that port 0 gives the real port to print."""
    import socket

    from broker.listen_failure import listen_error

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise listen_error(host, port, exc) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
