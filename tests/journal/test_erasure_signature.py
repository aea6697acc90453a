"""A tombstone counts as an erasure only with a signature over exactly its fields (journal/erasure_signature.py)."""

from __future__ import annotations

import pytest

from journal.checkpoint.note import Signer
from journal.erasure_signature import erasure_signer, sign_tombstone

ERASER = Signer.generate("eraser.example")
TOMBSTONE = {"sha256": "a" * 64, "size": 3, "erased_at": "2026-12-01T00:00:00Z", "erased_by": "dpo", "reason": "x"}


def test_the_signed_tombstone_names_its_signer():
    t = {**TOMBSTONE, "note": sign_tombstone(TOMBSTONE, ERASER)}
    assert erasure_signer(t, [ERASER.verifier()]) == "eraser.example"
    assert erasure_signer(t, [Signer.generate("other.example").verifier()]) is None  # another key
    assert erasure_signer(t, []) is None


@pytest.mark.parametrize("change", [
    {"sha256": "b" * 64},  # a real signature moved onto another blob's tombstone
    {"reason": "GDPR request #42"},
    {"size": 2**70},  # no canonical form: never an exception, never erased
    {"size": 1.5},
    {"note": None},
    {"note": "not a note"},
])
def test_a_copied_or_edited_tombstone_is_not_an_erasure(change):
    t = {**TOMBSTONE, "note": sign_tombstone(TOMBSTONE, ERASER), **change}
    assert erasure_signer(t, [ERASER.verifier()]) is None
