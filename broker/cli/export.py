"""`broker export`: a session in a format other tools read (fixture, HAR, VCR cassette, OTLP/JSON, OCSF)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from broker.cli.options import reading_vault, store_option, vault_option
from journal.vault import Vault

FORMATS = ("fixture", "har", "vcr", "otel", "ocsf")


def _render(fmt: str, vault_dir: Vault, session: str, inline_blobs: bool, content: bool) -> bytes:
    if fmt == "fixture":
        from journal.export.fixture import build_fixture, fixture_bytes

        return fixture_bytes(build_fixture(vault_dir, session))
    if fmt == "har":
        from journal.export.har import build_har

        har = build_har(vault_dir, session, inline_blobs=inline_blobs)
        return orjson.dumps(har, option=orjson.OPT_INDENT_2) + b"\n"
    if fmt == "vcr":
        from journal.export.vcr import build_cassette, cassette_yaml

        return cassette_yaml(build_cassette(vault_dir, session))
    if fmt == "ocsf":
        from journal.export.ocsf import ocsf_lines

        return ocsf_lines(vault_dir, session)
    from journal.export.otel import build_otlp

    return orjson.dumps(build_otlp(vault_dir, session, content=content), option=orjson.OPT_INDENT_2) + b"\n"


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
def export(vault_dir: str, store: str | None, session: str, fmt: str, out: str | None, inline_blobs: bool,
           content: bool, otlp_url: str | None) -> int:
    """Write SESSION as a test fixture, HAR 1.2, a VCR.py cassette, OpenTelemetry spans (OTLP/JSON)
    or OCSF API Activity events (JSON lines).

    Redacted values stay as recorded. See docs/exports.md for each format's field mapping.
    """
    if inline_blobs and fmt != "har":
        raise click.UsageError("--inline-blobs applies to --format har (vcr always inlines)")
    if (content or otlp_url) and fmt != "otel":
        raise click.UsageError("--content and --otlp apply to --format otel")
    vault = reading_vault(store, vault_dir)
    if otlp_url:
        from journal.export.otel import build_otlp, send_otlp

        status = send_otlp(otlp_url, build_otlp(vault, session, content=content))
        click.echo(f"sent {session} to {otlp_url}: HTTP {status}", err=True)
        if out is None:
            return 0
    data = _render(fmt, vault, session, inline_blobs, content)
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(out).parent.mkdir(parents=True, exist_ok=True)  # `--out cassettes/s.yaml` makes cassettes/
        Path(out).write_bytes(data)
    return 0


COMMANDS = [export]
