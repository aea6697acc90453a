"""`Recorder.json_value` skips the spilling walk for a value whose canonical form is no longer than the
spill threshold (no string in it can be longer): the same value as redacting, checking and spilling."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.bodies import spill_large_strings
from journal.record import Recorder
from journal.redact import redact_json_value

THRESHOLD = 64


@pytest.fixture(scope="module")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Recorder:
    return Recorder(Path(tmp_path_factory.mktemp("v")) / "vault", spill_threshold=THRESHOLD)


def _reference(recorder: Recorder, value: object) -> object:
    return spill_large_strings(redact_json_value(value), recorder.blobs, recorder.spill_threshold)


@pytest.mark.parametrize("n", [THRESHOLD - 3, THRESHOLD - 2, THRESHOLD - 1, THRESHOLD, THRESHOLD + 1])
@pytest.mark.parametrize("char", ["x", "é", "\U0001f600", '"', "\n"])
def test_strings_at_the_threshold(recorder: Recorder, n: int, char: str) -> None:
    text = (char * n)[: max(1, n // len(char.encode()))] if char in "é\U0001f600" else char * n
    for value in (text, [text], {"k": text}, {"a": [text, {"b": text}]}, {"token": text, "t": text}):
        assert recorder.json_value(value) == _reference(recorder, value)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=90),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                    max_leaves=8))
def test_any_value(recorder: Recorder, value: object) -> None:
    try:
        got = recorder.json_value(value)
    except ValueError:  # no canonical form (a lone surrogate): refused either way
        return
    assert got == _reference(recorder, value)
