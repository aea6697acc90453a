"""`AppendPipeline._prepare` against its reference order: fit_entry (spill to the line limit), then link_pieces.

_prepare canonicalises first and skips fit_entry when the canonical bytes are orjson's and short enough that
fit_entry would return the fields unchanged. These tests check that it returns exactly what the reference
returns (the same fields object, or an equal copy where fit_entry copies, and the same pieces), raises what the
reference raises, and spills what the reference spills, also for entries made of floats, whose canonical form
is shorter than orjson's text (fit_entry measures orjson's text, so a shortcut taken on the canonical size would
skip fit_entry where fit_entry itself does not).
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal.bodies import fit_entry, fits_unspilled
from journal.canonical import CanonicalError, canonical_bytes
from journal.chain import link_pieces
from journal.entry import ContractError
from journal.writer import JournalWriter
from tests.journal.test_canonical import json_values, poisoned_values
from tests.support.journal_factories import fields

LIMIT = 80_000  # fit_entry leaves an entry as it is below LIMIT - 512 - 64 KiB = 13_952 bytes of orjson text
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def _reference(writer: JournalWriter, f: dict) -> tuple[dict, object]:
    """What _prepare did before: fit_entry, then link_pieces (a CanonicalError as ContractError)."""
    fitted = fit_entry(f, writer.blobs, writer.line_limit)
    try:
        return fitted, link_pieces(fitted)
    except CanonicalError as exc:
        raise ContractError(f"entry has no canonical form: {exc}") from None


def _outcome(fn, *args) -> tuple[str, object]:
    try:
        got = fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared below
        return "raised", (type(exc), str(exc))
    return "ok", got


def _same_as_reference(writer: JournalWriter, f: dict) -> None:
    kind, got = _outcome(writer._prepare, f)
    ref_kind, ref = _outcome(_reference, writer, f)
    assert kind == ref_kind, (got, ref)
    if kind == "raised":
        assert got == ref
        return
    assert (got.fields, got.pieces) == ref  # type: ignore[attr-defined]
    assert (got.fields is f) == (ref[0] is f)  # type: ignore[attr-defined]  # kept as given, or fit_entry's copy


@pytest.fixture
def writer(tmp_path):
    with JournalWriter(tmp_path, line_limit=LIMIT) as w:
        yield w


_bodies = json_values | poisoned_values | st.text(min_size=0, max_size=30).map(lambda s: s * 700)


@SETTINGS
@given(body=_bodies, mcp=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3))
def test_prepare_gives_what_fit_entry_then_link_pieces_give(writer, body, mcp):
    f = fields("p", 3, mcp=mcp, response={"status": 200, "headers": [], "body": body})
    _same_as_reference(writer, f)


@pytest.mark.parametrize("count", [2000, 2400, 2800, 3200])
def test_floats_whose_canonical_form_is_shorter_go_through_fit_entry(writer, count):
    """100.0 is `100.0` in orjson's text and `100` in JCS: around the threshold the canonical size says
    "as it is" while orjson's (fit_entry's measure) says "check": _prepare must follow fit_entry."""
    f = fields("p", 4, response={"status": 200, "headers": [], "body": [100.0] * count})
    _same_as_reference(writer, f)


def test_the_float_case_straddles_the_threshold(writer):
    """The parametrised counts above include one where the two measures disagree (else the test tests nothing)."""
    straddles = []
    for count in (2000, 2400, 2800, 3200):
        f = fields("p", 4, response={"status": 200, "headers": [], "body": [100.0] * count})
        straddles.append(fits_unspilled(len(canonical_bytes(f)), LIMIT) != fits_unspilled(len(orjson.dumps(f)), LIMIT))
    assert any(straddles)


def test_a_large_string_is_spilled_and_a_small_entry_kept(writer):
    big = fields("p", 5, response={"status": 200, "headers": [], "body": "x" * 100_000})
    prepared = writer._prepare(big)
    assert prepared.fields is not big and prepared.fields["response"]["body"] != "x" * 100_000
    _same_as_reference(writer, big)
    small = fields("p", 6)
    assert writer._prepare(small).fields is small


@pytest.mark.parametrize("bad", [{"k": 2**60}, {1: "non-string key"}, {"k": float("nan")}, {"k": (1, 2)}])
def test_values_without_a_canonical_form_fail_as_before(writer, bad):
    _same_as_reference(writer, fields("p", 7, response={"status": 200, "headers": [], "body": bad}))
