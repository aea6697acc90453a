"""The checkpoint options `broker run` and `broker mcp` share (journal/checkpoint/autoseal.py)."""

from __future__ import annotations

from collections.abc import Callable

import click

from journal.checkpoint.autoseal import DEFAULT_ENTRIES, DEFAULT_SECONDS, AutosealConfig
from journal.checkpoint.note import load_signer


def seal_options(f: Callable) -> Callable:
    f = click.option("--witness", "witness", multiple=True, metavar="URL",
                     help="tlog-witness to cosign each checkpoint (repeatable); one that is down never blocks.")(f)
    f = click.option("--checkpoint-seconds", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_SECONDS,
                     show_default=True, help="With --seal-key: a checkpoint at least every T seconds.")(f)
    f = click.option("--checkpoint-entries", type=click.IntRange(min=1), default=DEFAULT_ENTRIES, show_default=True,
                     help="With --seal-key: a checkpoint every N entries of a session.")(f)
    return click.option("--seal-key", type=click.Path(dir_okay=False, exists=True), default=None,
                        help="Signer key (`broker keygen`): write checkpoints while recording and at a clean stop. "
                        "Keep it outside the vault.")(f)


def autoseal_config(seal_key: str | None, entries: int, seconds: float, witness: tuple[str, ...],
                    ) -> AutosealConfig | None:
    """The settings, the key checked now (one clear error before anything listens)."""
    if not seal_key:
        if witness:
            raise click.UsageError("--witness needs --seal-key")
        return None
    load_signer(seal_key)
    return AutosealConfig(seal_key, entries, seconds, list(witness))
