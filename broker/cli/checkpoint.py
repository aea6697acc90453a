"""Checkpoint commands: verify against checkpoints, witness, prove, verify-proof (docs/checkpoints.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from broker.cli.options import SIGNER_KEY, VERIFIER_KEY, bind, parse_listen, reading_vault, store_option, vault_option
from broker.cli.terminal_text import one_line
from journal.checkpoint.note import Signer, Verifier
from journal.checkpoint.proof_bundle import check_bundle, make_bundle
from journal.checkpoint.witness import Witness, app
from journal.errors import InputError


@click.command()
@click.option("--listen", default="127.0.0.1:8787", show_default=True, help="HOST:PORT to serve on.")
@click.option("--key", "signer", required=True, type=SIGNER_KEY,
              help="The witness's signer key (`broker keygen --cosigner`).")
@click.option("--state", "state_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the latest cosigned checkpoint of each log.")
@click.option("--log-key", "log_keys", type=VERIFIER_KEY, multiple=True, required=True,
              help="A log's verifier key (text or file); trusted for the origin of its name and below (repeatable).")
def witness(listen: str, signer: Signer, state_dir: str, log_keys: tuple[Verifier, ...]) -> int:
    """Serve the C2SP tlog-witness protocol: POST /add-checkpoint, GET /<origin hash>/checkpoint."""
    import asyncio

    import uvicorn

    w = Witness(signer, state_dir, list(log_keys))
    host, port = parse_listen(listen)
    sock = bind(host, port)
    server = uvicorn.Server(uvicorn.Config(app(w), log_level="warning", lifespan="off"))
    click.echo(f"witness: listening on http://{host}:{sock.getsockname()[1]}")
    click.echo(f"witness: cosigner key {signer.cosigner_verifier().vkey()}")
    sys.stdout.flush()
    asyncio.run(server.serve(sockets=[sock]))
    return 0


@click.command()
@vault_option
@store_option
@click.argument("session")
@click.argument("seq", type=int)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write the bundle here.")
def prove(vault_dir: str, store: str | None, session: str, seq: int, out_path: str | None) -> int:
    """Write a self-contained proof of one entry: its line, its inclusion proof and the signed checkpoint."""
    vault = reading_vault(store, vault_dir)  # a database store's checkpoints: in --vault DIR
    vault.require_session(session)
    data = orjson.dumps(make_bundle(vault, session, seq), option=orjson.OPT_INDENT_2) + b"\n"
    if out_path:
        Path(out_path).write_bytes(data)
        click.echo(one_line(f"proof of {session} seq {seq} written to {out_path}"))
    else:
        sys.stdout.buffer.write(data)
    return 0


@click.command("verify-proof")
@click.argument("bundle_path", type=click.Path(dir_okay=False, exists=True))
@click.option("--seal-key", required=True, type=VERIFIER_KEY, help="The vault's verifier key (text or file).")
@click.option("--witness-key", "witness_keys", type=VERIFIER_KEY, multiple=True,
              help="Also require a cosignature of this witness (repeatable).")
def verify_proof(bundle_path: str, seal_key: Verifier, witness_keys: tuple[Verifier, ...]) -> int:
    """Check a `broker prove` bundle with nothing but the keys. Exit 0 when it proves its entry, 1 when not."""
    from journal.checkpoint.proof_bundle import BundleError

    try:
        bundle = orjson.loads(Path(bundle_path).read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{bundle_path} is not JSON ({exc}): give the file `broker prove` wrote") from None
    try:
        ok = check_bundle(bundle, seal_key, list(witness_keys))
    except BundleError as exc:
        click.echo(f"proof does NOT check out: {one_line(exc)}")
        return 1
    by = f", cosigned by {', '.join(ok.cosigned_by)}" if ok.cosigned_by else ""
    click.echo(one_line(f"proof checks out: {ok.session} seq {ok.seq} is entry {ok.seq} of {ok.tree_size} under the "
                        f"signed checkpoint{by}"))
    return 0


COMMANDS = [witness, prove, verify_proof]
