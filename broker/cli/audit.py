"""Commands auditors use on a vault: verify and sessions (`show`, which reads entries and checks none, is
broker/cli/show.py: it loads no verifier)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard, cast

import click
import orjson

from broker.cli.main import summary
from broker.cli.options import (
    ANY_VERIFIER_KEY,
    VERIFIER_KEY,
    blobs_option,
    reading_vault,
    store_option,
    unmapped_sessions,
    vault_option,
)
from broker.cli.progress import progress_bar
from broker.cli.terminal_text import one_line
from journal.reader import RowSource, session_size
from journal.summary import summarize_session
from journal.vault import Vault
from journal.vault_verify import verify_sessions
from journal.verify import SessionReport

if TYPE_CHECKING:  # the checkpoint audit (and cryptography) is loaded when a --seal-key asks for it
    from collections.abc import Callable

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.checkpoint.note import Verifier


def _select(vault: Vault, sessions: tuple[str, ...]) -> list[str]:
    if not sessions:
        return vault.sessions()
    for s in sessions:
        vault.require_session(s)
    return list(sessions)


def _total_bytes(vault: Vault, sessions: list[str]) -> int:
    """For the progress bar: 0 (no bar) for a database store, whose sizes would cost a pass of their own."""
    return 0 if isinstance(vault, RowSource) else sum(session_size(vault, s) for s in sessions)


def _where(vault: Vault) -> str:
    return str(getattr(vault, "label", vault.root))


@click.command(short_help=summary("verify"))
@vault_option
@store_option
@click.argument("sessions", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per session.")
@click.option("--no-blobs", is_flag=True, help="Skip re-hashing spilled blobs (faster, weaker).")
@blobs_option
@click.option("--seal-key", type=ANY_VERIFIER_KEY, default=None,
              help="Verifier key (text or file, from `broker keygen`, kept outside the vault): check checkpoints "
              "and the signed vault index. A legacy .pub key checks the old .seal files.")
@click.option("--witness-key", "witness_keys", type=VERIFIER_KEY, multiple=True,
              help="Require each checkpoint to be cosigned by this witness (repeatable).")
@click.option("--witness", "witness_urls", multiple=True, metavar="URL",
              help="Ask this witness for the newest size it cosigned per session (repeatable).")
@click.option("--require-sealed", is_flag=True, help="Entries after the last checkpoint are a break, not a note.")
@click.option("--erasure-key", "erasure_keys", type=VERIFIER_KEY, multiple=True,
              help="Honour a tombstone only when signed by this key (`broker erase --signing-key`; repeatable). "
              "Without one no tombstone counts: an erased blob is reported missing.")
def verify(vault_dir: str, store: str | None, sessions: tuple[str, ...], as_json: bool, no_blobs: bool,
           seal_key: Verifier | Ed25519PublicKey | None, witness_keys: tuple[Verifier, ...],
           witness_urls: tuple[str, ...], require_sealed: bool, erasure_keys: tuple[Verifier, ...],
           blobs: str | None = None) -> int:
    """Check every session's hash chain, canonical form, contract, blobs and (with --seal-key) checkpoints.

    Exit 0 when every session is intact, 1 when any is broken, 2 on a usage error.
    """
    # A database store is read in place; its checkpoints and seals stay in the --vault directory they were
    # written to (docs/postgres.md), which is read there, never written.
    vault = reading_vault(store, vault_dir)
    if seal_key is not None and _is_checkpoint_key(seal_key):
        return verify_checkpoints(vault, sessions, as_json, no_blobs, seal_key, witness_keys, witness_urls,
                                  require_sealed, erasure_keys, blobs)
    if witness_keys or witness_urls or require_sealed:
        raise click.UsageError("--witness-key, --witness and --require-sealed need a --seal-key verifier key")
    public = cast("Ed25519PublicKey | None", seal_key)  # a legacy .pub key checks the old .seal files
    names = _select(vault, sessions)
    facets = _stale_facets_started(vault, names)
    with progress_bar(_total_bytes(vault, names), "verifying") as advance:
        reports = verify_sessions(vault, names, check_blobs=not no_blobs, progress=advance, seal_key=public,
                                  erasure_keys=list(erasure_keys), blobs_url=blobs)
    print_reports(reports, as_json)
    unmapped = {} if sessions else unmapped_sessions(vault)
    for session, why in unmapped.items():  # rows of a database store no vault file can hold: not verified
        if as_json:
            click.echo(orjson.dumps({"session": session, "intact": False, "kind": "contract_violation",
                                     "broken_at_seq": 1, "detail": why}).decode())
        else:
            click.echo(f"{one_line(repr(session))}: BROKEN at seq 1: contract_violation: {one_line(why)}; not verified")
    lies = facets(as_json)
    if not names and not as_json and not unmapped:
        click.echo(f"no sessions in {one_line(_where(vault))}")
    return 0 if all(r.intact for r in reports) and not unmapped and not lies else 1


def _stale_facets_started(vault: Vault, sessions: list[str]) -> Callable[[bool], int]:
    """On a database store whose search indexes are trusted: ask the server, in a thread beside the chain's own
    check (the query waits on the server, which parses every line), for each session's rows whose stored search
    facets are not what its function gives their line (written while an owner's other function was in place:
    search could miss them though the chain is intact). Returns `report(as_json)`: prints what was found, returns
    the number of sessions with such rows."""
    check = getattr(getattr(vault, "store", None), "stale_facets", None)
    if check is None or not sessions:
        return lambda as_json: 0
    import threading

    found: dict[str, tuple[int, list[int]] | None] = {}
    failed: list[BaseException] = []

    def run() -> None:
        try:
            for session in sessions:
                found[session] = got = check(session)
                if got is None:
                    return  # the indexes are not used by search: nothing can be hidden through them
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="stale-facets", daemon=True)
    thread.start()

    def report(as_json: bool) -> int:
        thread.join()
        if failed:
            raise failed[0]
        lying = 0
        for session, got in found.items():
            if not got or not got[0]:
                continue
            lying += 1
            count, seqs = got
            detail = (f"{count} row(s) whose stored search facets are not what journal_facets(line) gives (seq "
                      f"{', '.join(map(str, seqs))}{', ...' if count > len(seqs) else ''}): written while the "
                      "function was another; `broker search` by connector, effect, agent or time may miss them")
            if as_json:
                click.echo(orjson.dumps({"session": session, "intact": False, "kind": "search_index",
                                         "broken_at_seq": seqs[0], "detail": detail}).decode())
            else:
                click.echo(f"{one_line(session)}: search index NOT intact: {detail}")
        return lying

    return report


def _is_checkpoint_key(key: object) -> TypeGuard[Verifier]:
    """A checkpoint verifier key (not a legacy .pub seal key); journal.checkpoint (and cryptography with it)
    is imported only when a key was given, which keeps a plain `broker verify`'s start-up short."""
    from journal.checkpoint.note import Verifier

    return isinstance(key, Verifier)


def verify_checkpoints(vault: Vault, sessions: tuple[str, ...], as_json: bool, no_blobs: bool, key: Verifier,
                       witness_keys: tuple[Verifier, ...], witness_urls: tuple[str, ...], require_sealed: bool,
                       erasure_keys: tuple[Verifier, ...] = (), blobs_url: str | None = None) -> int:
    """`broker verify --seal-key VKEY`: the chain of each session, then checkpoints, index and witnesses."""
    from journal.checkpoint.audit import audit_vault, session_tree
    from journal.checkpoint.witness import WitnessClient

    wkeys = list(witness_keys)
    clients = [WitnessClient(u, None) for u in witness_urls]
    names = _select(vault, sessions)
    facets = _stale_facets_started(vault, names)
    checked = {}
    with progress_bar(_total_bytes(vault, names), "verifying") as advance:
        for s in names:
            checked[s] = session_tree(vault, s, check_blobs=not no_blobs, progress=advance,
                                      erasure_keys=list(erasure_keys), blobs_url=blobs_url)
    audit = audit_vault(vault, checked, key, witness_keys=wkeys, witnesses=clients, require_sealed=require_sealed,
                        selected=list(sessions) or None)
    print_reports(audit.reports, as_json)
    for kind, detail in audit.vault_problems:
        if as_json:
            d = {"vault": str(vault.root), "intact": False, "kind": kind, "detail": detail}
            click.echo(orjson.dumps(d).decode())
        else:
            click.echo(f"vault: BROKEN: {kind}: {one_line(detail)}")
    if not as_json:
        for note in audit.vault_notes:
            click.echo(f"vault: note: {one_line(note)}")
        if audit.coverage:
            click.echo("declared coverage (what the capture points did not record):")
            for line in audit.coverage:
                click.echo(f"  {one_line(line)}")
        elif not audit.vault_problems:
            click.echo("declared coverage: none declared (not accounted: counted only while the broker seals)")
    elif audit.coverage:
        click.echo(orjson.dumps({"vault": str(vault.root), "coverage": audit.coverage}).decode())
    lies = facets(as_json)
    return 0 if audit.intact and not lies else 1


def print_reports(reports: list[SessionReport], as_json: bool) -> None:
    for r in reports:
        if as_json:
            d = {k: getattr(r, k) for k in ("session", "entries", "intact", "broken_at_seq", "kind", "detail", "head")}
            d["notes"] = r.notes
            click.echo(orjson.dumps(d).decode())
        elif r.intact:
            click.echo(f"{one_line(r.session)}: intact ({r.entries} entries)")
        else:
            click.echo(f"{one_line(r.session)}: BROKEN at seq {r.broken_at_seq}: {r.kind}: {one_line(r.detail)}")
        if not as_json:
            for note in r.notes:
                click.echo(f"  note: {one_line(note)}")


@click.command(short_help=summary("sessions"))
@vault_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per session.")
def sessions(vault_dir: str, store: str | None, as_json: bool) -> int:
    """List sessions: entries, first and last time, connectors, writes, and whether each verifies."""
    vault = reading_vault(store, vault_dir)
    names = vault.sessions()
    keys = ("session", "entries", "first_ts", "last_ts", "connectors", "writes", "verifies", "broken_at_seq", "kind",
            "sealed", "checkpoint")
    with progress_bar(_total_bytes(vault, names), "reading") as advance:
        rows = [{k: row[k] for k in keys} for row in (summarize_session(vault, s, progress=advance) for s in names)]
    if as_json:
        for row in rows:
            click.echo(orjson.dumps(row).decode())
        return 0
    if not rows:
        click.echo(f"no sessions in {one_line(_where(vault))}")
        return 0
    header = f"{'SESSION':<28} {'ENTRIES':>7} {'FIRST':<24} {'LAST':<24} {'WRITES':>6}  VERIFIES  CONNECTORS"
    click.echo(header)
    for row in rows:  # what the vault holds, escaped before it is padded (broker/cli/terminal_text.py)
        status = "yes" if row["verifies"] else one_line(f"NO (seq {row['broken_at_seq']}: {row['kind']})")
        first, last = one_line(row["first_ts"] or "-"), one_line(row["last_ts"] or "-")
        click.echo(
            f"{one_line(row['session']):<28} {row['entries']:>7} {first:<24} {last:<24} "
            f"{row['writes']:>6}  {status:<8}  {one_line(','.join(map(str, row['connectors'])))}"
        )
    return 0


COMMANDS = [verify, sessions]
