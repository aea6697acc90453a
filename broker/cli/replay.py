"""Replay commands: `broker replay` (views of what the agent saw and changed) and `broker revert-plan`.

Both verify and fold the session in one pass (journal/replay). `replay` (re)writes the derived folder
`<out>/<session>/`: resource notes, index, timeline, `revert-plan.md`/`.json`, `views.json`, where `<out>`
is `--out DIR`, by default a folder of the user's cache (said on stderr): a reader never writes into the
vault or the store, which may be a read-only mount. `revert-plan` prints the plan and writes no view.
Exit 0 when the session's chain is intact, 1 when it is broken (the outputs are written with
everything from the broken seq on marked untrusted; `--require-intact` refuses instead), 2 on a
usage error. Nothing is ever executed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
import orjson

from broker.cli.main import summary
from broker.cli.options import ANY_VERIFIER_KEY, reading_vault, store_option, vault_option
from broker.cli.progress import progress_bar
from broker.cli.terminal_text import json_text, one_line
from journal.reader import session_size
from journal.replay import BrokenChainError, replay_session, write_outputs
from journal.replay.plan import ordered_steps, plan_json, step_dict
from journal.user_cache import views_home

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.checkpoint.note import Verifier

_require = click.option("--require-intact", is_flag=True,
                        help="Refuse (exit 1, nothing written) when the session's chain is broken.")
_seal_key = click.option("--seal-key", type=ANY_VERIFIER_KEY, default=None,
                         help="Verifier key (text or file, from `broker keygen`): also check the session's "
                         "checkpoint and the vault index, as `broker verify --seal-key` does. A legacy .pub key "
                         "checks the old .seal file.")


_out = click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                    help="Folder to write the views under (<out>/<session>/). Default: a folder of your cache "
                    "($XDG_CACHE_HOME/broker/views/..., said on stderr); never the vault.")


def _run(
    vault_dir: str, session: str, require_intact: bool, seal_key: Verifier | Ed25519PublicKey | None,
    store: str | None = None, out_dir: str | None = None, *, write: bool = True,
):
    vault = reading_vault(store, vault_dir)
    vault.require_session(session)
    out = Path(out_dir).absolute() if out_dir else views_home(vault)
    if write and not out_dir:
        click.echo(f"views go to {one_line(out)} (give --out DIR for another folder)", err=True)
    out.mkdir(parents=True, exist_ok=True)
    vault.views_dir = out  # replay's scratch store and views: never inside the vault
    total = 0 if getattr(vault, "label", None) else session_size(vault, session)
    with progress_bar(total, "replaying") as advance:
        rp = replay_session(vault, session, progress=advance, require_intact=require_intact, seal_key=seal_key,
                            views=write)
    if not write:
        return vault, rp, None, []
    folder, files = write_outputs(vault, rp)
    return vault, rp, folder, files


def _echo_chunks(chunks: Iterator[bytes], size: int = 1 << 18) -> None:
    """Print streamed bytes and a newline, in writes of about `size` bytes."""
    buf: list[bytes] = []
    held = 0
    for chunk in chunks:
        buf.append(chunk)
        held += len(chunk)
        if held >= size:
            click.echo(b"".join(buf), nl=False)
            buf.clear()
            held = 0
    buf.append(b"\n")
    click.echo(b"".join(buf), nl=False)


def _broken_line(rp) -> str:
    r = rp.report
    return one_line(f"WARNING: chain broken at seq {r.broken_at_seq} ({r.kind}): {r.detail}; everything from seq "
                    f"{rp.untrusted_from} on is marked UNTRUSTED")


@click.command(short_help=summary("replay"))
@vault_option
@store_option
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (views.json holds everything).")
@_require
@_seal_key
@_out
def replay(
    vault_dir: str, store: str | None, session: str, as_json: bool, require_intact: bool,
    seal_key: Verifier | Ed25519PublicKey | None, out_dir: str | None = None,
) -> int:
    """Rebuild views of every resource SESSION touched, under <out>/<session>/ (--out DIR, by default a
    folder of your cache; never inside the vault).

    One Markdown note per resource (state as last seen, the entries that read or changed it, and
    for each write its before-state, request, response and their differences), an index note,
    timeline pages, the revert plan and views.json. Deterministic: replaying again gives the
    same bytes.
    """
    try:
        _, rp, folder, files = _run(vault_dir, session, require_intact, seal_key, store, out_dir)
    except BrokenChainError as exc:
        click.echo(f"broker: {one_line(exc)}", err=True)
        return 1
    writes = rp.counts.writes
    summary = {
        "session": session, "views": str(folder), "files": len(files), "entries": len(rp.entries),
        "resources": len(rp.resources), "writes": writes, "plan_steps": len(rp.steps), "intact": rp.intact,
        "broken_at_seq": rp.report.broken_at_seq, "kind": rp.report.kind, "untrusted_from_seq": rp.untrusted_from,
    }
    if as_json:
        click.echo(orjson.dumps(summary).decode())
    else:
        click.echo(f"{one_line(session)}: {len(rp.entries)} entries, {len(rp.resources)} resources, {writes} writes, "
                   f"{len(rp.steps)} revert-plan steps")
        click.echo(f"views: {one_line(folder / 'index.md')}")
        if not rp.intact:
            click.echo(_broken_line(rp))
    return 0 if rp.intact else 1


@click.command("revert-plan", short_help=summary("revert-plan"))
@vault_option
@store_option
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help='Print {"session", "chain", "steps": [...]} as JSON.')
@_require
@_seal_key
def revert_plan(
    vault_dir: str, store: str | None, session: str, as_json: bool, require_intact: bool,
    seal_key: Verifier | Ed25519PublicKey | None,
) -> int:
    """The revert plan for SESSION: for each write, newest first, the inverse call or why there is none.

    Computed in one pass that keeps the plan alone: no view is written (`broker replay` writes revert-plan.md and
    revert-plan.json with the views). Never executes anything.
    """
    try:
        _, rp, _, _ = _run(vault_dir, session, require_intact, seal_key, store, write=False)
    except BrokenChainError as exc:
        click.echo(f"broker: {one_line(exc)}", err=True)
        return 1
    if as_json:
        _echo_chunks(plan_json(rp))
        return 0 if rp.intact else 1
    if not rp.intact:
        click.echo(_broken_line(rp))
    steps = ordered_steps(rp)
    click.echo(f"revert plan for {one_line(session)}: {len(rp.steps)} steps, newest first (never executed)")
    for i, s in enumerate(steps, 1):
        d = step_dict(rp, s)  # what the vault holds: escaped before it is padded (broker/cli/terminal_text.py)
        flags = ["revertible" if d["revertible"] else "NOT revertible"]
        flags += [f for f in ("blind", "approximate") if d[f]]
        if not d["trusted"]:
            flags.append("UNTRUSTED")
        click.echo(f"{i:>4}. seq {one_line(d['for_seq']):<5} {one_line(d['connector']):<9} {one_line(d['op']):<28} "
                   f"[{', '.join(flags)}] evidence={one_line(d['evidence'])}")
        if d["call"] is not None:
            body = "" if d["call"]["body"] is None else " " + json_text(orjson.dumps(d["call"]["body"]).decode())
            if len(body) > 300:
                body = body[:297] + "..."
            click.echo(one_line(f"        {d['call']['method']} {d['call']['url']}{body}"))
        click.echo(f"        {one_line(d['reason'])}")
    return 0 if rp.intact else 1


COMMANDS = [replay, revert_plan]
