"""`broker export`: a session in a format other tools read (fixture, HAR, VCR cassette, OTLP/JSON, OCSF)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from broker.cli.options import reading_vault, store_option, vault_option
from broker.cli.terminal_text import one_line
from journal.export.otlp_send import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SPANS, DEFAULT_RETRIES
from journal.vault import Vault

FORMATS = ("fixture", "har", "vcr", "otel", "ocsf")


def _chunks(fmt: str, vault_dir: Vault, session: str, inline_blobs: bool, content: bool) -> Iterator[bytes]:
    """The export's bytes a piece at a time: every format streams (issue 26: memory holds an entry, not the session)."""
    if fmt == "fixture":
        from journal.export.fixture import fixture_chunks

        return fixture_chunks(vault_dir, session)
    if fmt == "har":
        from journal.export.har import har_chunks

        return har_chunks(vault_dir, session, inline_blobs=inline_blobs)
    if fmt == "vcr":
        from journal.export.vcr import cassette_chunks

        return cassette_chunks(vault_dir, session)
    if fmt == "ocsf":
        from journal.export.ocsf import ocsf_chunks

        return ocsf_chunks(vault_dir, session)
    from journal.export.otel import otlp_chunks

    return otlp_chunks(vault_dir, session, content=content)


def _write_file(out: str, chunks: Iterator[bytes]) -> None:
    """Write the export to `out` through a temporary file beside it, renamed when complete: a failed export
    leaves no partial file (as when the document was built whole before writing)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)  # `--out cassettes/s.yaml` makes cassettes/
    if path.exists() and not path.is_file():  # a FIFO, /dev/stdout: written as it is
        with open(path, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@click.command()
@vault_option
@store_option
@click.argument("session")
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="What to write.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write here instead of standard output.")
@click.option("--inline-blobs", is_flag=True, help="HAR: put spilled bodies in the file instead of referencing them.")
@click.option("--content", is_flag=True,
              help="otel: put request and response bodies on the spans (off by default: spans reference them).")
@click.option("--otlp", "otlp_url", default=None, metavar="URL",
              help="otel: send the spans to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318/v1/traces).")
@click.option("--batch-spans", type=click.IntRange(min=1), default=DEFAULT_BATCH_SPANS, show_default=True,
              help="--otlp: at most this many spans a request.")
@click.option("--batch-bytes", type=click.IntRange(min=1), default=DEFAULT_BATCH_BYTES, show_default=True,
              help="--otlp: at most this many bytes a request (a bigger span goes alone).")
@click.option("--otlp-retries", type=click.IntRange(min=0), default=DEFAULT_RETRIES, show_default=True,
              help="--otlp: how often a request is sent again after 429/502/503/504 or no answer.")
@click.option("--otlp-from-seq", type=click.IntRange(min=1), default=None, metavar="SEQ",
              help="--otlp: send the rest of an export that stopped (its message names SEQ), without the session "
                   "span it delivered.")
@click.option("--otlp-header", "otlp_header", multiple=True, metavar="NAME=VALUE",
              help="--otlp: a header every request carries (a receiver's API key), after those of "
                   "OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_TRACES_HEADERS; repeatable.")
@click.option("--otlp-compression", type=click.Choice(["gzip", "none"]), default=None,
              help="--otlp: gzip each request (default: OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION, else none).")
def export(vault_dir: str, store: str | None, session: str, fmt: str, out: str | None, inline_blobs: bool,
           content: bool, otlp_url: str | None, batch_spans: int, batch_bytes: int, otlp_retries: int,
           otlp_from_seq: int | None, otlp_header: tuple[str, ...], otlp_compression: str | None) -> int:
    """Write SESSION as a test fixture, HAR 1.2, a VCR.py cassette, OpenTelemetry spans (OTLP/JSON)
    or OCSF API Activity events (JSON lines).

    Redacted values stay as recorded. See docs/exports.md for each format's field mapping.
    """
    if inline_blobs and fmt != "har":
        raise click.UsageError("--inline-blobs applies to --format har (vcr always inlines)")
    if (content or otlp_url) and fmt != "otel":
        raise click.UsageError("--content and --otlp apply to --format otel")
    if (otlp_header or otlp_compression or otlp_from_seq) and not otlp_url:
        raise click.UsageError("--otlp-header, --otlp-compression and --otlp-from-seq apply to --otlp")
    vault = reading_vault(store, vault_dir)
    if otlp_url:
        from journal.export.otlp_send import otlp_batches, otlp_headers, send_otlp
        from journal.export.otlp_send import otlp_compression as compression_of
        from journal.shown_url import display_url

        headers = otlp_headers(otlp_header, os.environ)
        compression = compression_of(otlp_compression, os.environ)
        batches = otlp_batches(vault, session, content=content, max_spans=batch_spans, max_bytes=batch_bytes,
                               from_seq=otlp_from_seq)
        sent = send_otlp(otlp_url, batches, retries=otlp_retries, headers=headers, compression=compression,
                         warn=lambda message: click.echo(f"broker: warning: {one_line(message)}", err=True))
        rejected = f", {sent.rejected} of them rejected by the receiver" if sent.rejected else ""
        click.echo(one_line(f"sent {session} to {display_url(otlp_url)}: {sent.spans} spans in {sent.batches} "
                            f"request{'' if sent.batches == 1 else 's'}{rejected}"), err=True)
        if out is None:
            return 0
    chunks = _chunks(fmt, vault, session, inline_blobs, content)
    if out is None:
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    else:
        _write_file(out, chunks)
    return 0


COMMANDS = [export]
