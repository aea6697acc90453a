"""`broker export` streams (issue 26): what the process writes to standard output and to `--out` is the
streamed document, byte for byte; an export that fails half-way leaves no partial `--out` file; and
`broker verify-export` checks what was written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from journal.export.fixture import fixture_chunks
from journal.export.har import har_chunks
from journal.export.ocsf import ocsf_chunks
from journal.export.otel import otlp_chunks
from journal.export.vcr import cassette_chunks
from tests.support.broker_harness import BIN
from tests.support.export_factories import SESSION, record_export_session

pytestmark = pytest.mark.e2e

CHUNKS = {
    "har": lambda v: har_chunks(v, SESSION),
    "otel": lambda v: otlp_chunks(v, SESSION),
    "ocsf": lambda v: ocsf_chunks(v, SESSION),
    "vcr": lambda v: cassette_chunks(v, SESSION),
    "fixture": lambda v: fixture_chunks(v, SESSION),
}


def _broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "broker"), *args], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def vault(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vault")
    record_export_session(root)
    return root


@pytest.mark.parametrize("fmt", list(CHUNKS))
def test_stdout_and_out_are_the_streamed_document(vault, tmp_path, fmt):
    want = b"".join(CHUNKS[fmt](vault))
    shown = _broker("export", SESSION, "--format", fmt, "--vault", str(vault))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == want
    out = tmp_path / "sub" / f"export.{fmt}"
    written = _broker("export", SESSION, "--format", fmt, "--vault", str(vault), "--out", str(out))
    assert written.returncode == 0, written.stderr
    assert out.read_bytes() == want
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left beside it
    if fmt in ("har", "otel", "ocsf"):
        checked = _broker("verify-export", str(out))
        assert checked.returncode == 0 and b"every chain intact" in checked.stdout, checked.stdout


def test_a_failed_export_leaves_no_partial_file(tmp_path):
    """A blob gone from the vault: `--inline-blobs` fails on the entry that needs it, after earlier entries
    were written; `--out` is then not created at all (as when the document was built before writing)."""
    vault = tmp_path / "vault"
    record_export_session(vault)
    blobs = sorted((vault / "blobs" / "sha256").rglob("*"))
    for blob in (b for b in blobs if b.is_file()):
        blob.unlink()
    out = tmp_path / "out" / "s.har"
    failed = _broker("export", SESSION, "--format", "har", "--inline-blobs", "--vault", str(vault), "--out", str(out))
    assert failed.returncode != 0
    assert b"missing" in failed.stderr, failed.stderr
    assert not out.exists() and list(out.parent.iterdir()) == []
