"""Checkpoint commands: verify against checkpoints, witness, prove, verify-proof (docs/checkpoints.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from broker.audit_commands import _progress, _select, _total_bytes, print_reports, vault_option
from broker.proxy_commands import parse_listen
from journal.checkpoint.audit import audit_vault, session_tree
from journal.checkpoint.note import load_signer, load_verifier
from journal.checkpoint.proof_bundle import check_bundle, make_bundle
from journal.checkpoint.witness import Witness, WitnessClient, app
from journal.vault import Vault


def verify_checkpoints(vault_dir: str, sessions: tuple[str, ...], as_json: bool, no_blobs: bool, seal_key: str,
                       witness_keys: tuple[str, ...], witness_urls: tuple[str, ...], require_sealed: bool,
                       erasure_keys: tuple[str, ...] = ()) -> int:
    """`broker verify --seal-key VKEY`: the chain of each session, then checkpoints, index and witnesses."""
    key = load_verifier(seal_key)
    wkeys = [load_verifier(k) for k in witness_keys]
    ekeys = [load_verifier(k) for k in erasure_keys]
    clients = [WitnessClient(u, None) for u in witness_urls]
    vault = Vault.open_existing(vault_dir)
    names = _select(vault, sessions)
    checked = {}
    with _progress(_total_bytes(vault, names), "verifying") as advance:
        for s in names:
            checked[s] = session_tree(vault, s, check_blobs=not no_blobs, progress=advance, erasure_keys=ekeys)
    audit = audit_vault(vault, checked, key, witness_keys=wkeys, witnesses=clients, require_sealed=require_sealed,
                        selected=list(sessions) or None)
    print_reports(audit.reports, as_json)
    for kind, detail in audit.vault_problems:
        if as_json:
            d = {"vault": str(vault.root), "intact": False, "kind": kind, "detail": detail}
            click.echo(orjson.dumps(d).decode())
        else:
            click.echo(f"vault: BROKEN: {kind}: {detail}")
    if not as_json:
        for note in audit.vault_notes:
            click.echo(f"vault: note: {note}")
        if audit.coverage:
            click.echo("declared coverage (what the capture points did not record):")
            for line in audit.coverage:
                click.echo(f"  {line}")
        elif not audit.vault_problems:
            click.echo("declared coverage: none declared (not accounted: counted only while the broker seals)")
    elif audit.coverage:
        click.echo(orjson.dumps({"vault": str(vault.root), "coverage": audit.coverage}).decode())
    return 0 if audit.intact else 1


@click.command()
@click.option("--listen", default="127.0.0.1:8787", show_default=True, help="HOST:PORT to serve on.")
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False),
              help="The witness's signer key (`broker keygen --cosigner`).")
@click.option("--state", "state_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the latest cosigned checkpoint of each log.")
@click.option("--log-key", "log_keys", multiple=True, required=True, metavar="VKEY",
              help="A log's verifier key (text or file); trusted for the origin of its name and below (repeatable).")
def witness(listen: str, key_path: str, state_dir: str, log_keys: tuple[str, ...]) -> int:
    """Serve the C2SP tlog-witness protocol: POST /add-checkpoint, GET /<origin hash>/checkpoint."""
    import asyncio
    import socket

    import uvicorn

    signer = load_signer(key_path)
    w = Witness(signer, state_dir, [load_verifier(k) for k in log_keys])
    host, port = parse_listen(listen)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app(w), log_level="warning", lifespan="off"))
    click.echo(f"witness: listening on http://{host}:{sock.getsockname()[1]}")
    click.echo(f"witness: cosigner key {signer.cosigner_verifier().vkey()}")
    sys.stdout.flush()
    asyncio.run(server.serve(sockets=[sock]))
    return 0


@click.command()
@vault_option
@click.argument("session")
@click.argument("seq", type=int)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write the bundle here.")
def prove(vault_dir: str, session: str, seq: int, out_path: str | None) -> int:
    """Write a self-contained proof of one entry: its line, its inclusion proof and the signed checkpoint."""
    vault = Vault.open_existing(vault_dir)
    vault.require_session(session)
    data = orjson.dumps(make_bundle(vault, session, seq), option=orjson.OPT_INDENT_2) + b"\n"
    if out_path:
        Path(out_path).write_bytes(data)
        click.echo(f"proof of {session} seq {seq} written to {out_path}")
    else:
        sys.stdout.buffer.write(data)
    return 0


@click.command("verify-proof")
@click.argument("bundle_path", type=click.Path(dir_okay=False, exists=True))
@click.option("--seal-key", required=True, metavar="VKEY", help="The vault's verifier key (text or file).")
@click.option("--witness-key", "witness_keys", multiple=True, metavar="VKEY",
              help="Also require a cosignature of this witness (repeatable).")
def verify_proof(bundle_path: str, seal_key: str, witness_keys: tuple[str, ...]) -> int:
    """Check a `broker prove` bundle with nothing but the keys. Exit 0 when it proves its entry, 1 when not."""
    from journal.checkpoint.proof_bundle import BundleError

    try:
        bundle = orjson.loads(Path(bundle_path).read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{bundle_path} is not JSON: {exc}") from None
    try:
        ok = check_bundle(bundle, load_verifier(seal_key), [load_verifier(k) for k in witness_keys])
    except BundleError as exc:
        click.echo(f"proof does NOT check out: {exc}")
        return 1
    by = f", cosigned by {', '.join(ok.cosigned_by)}" if ok.cosigned_by else ""
    click.echo(f"proof checks out: {ok.session} seq {ok.seq} is entry {ok.seq} of {ok.tree_size} under the "
               f"signed checkpoint{by}")
    return 0


COMMANDS = [witness, prove, verify_proof]
