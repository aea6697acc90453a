"""`redact_json_value` keeps the short strings it found clean (`_CLEAN_TEXTS`) and answers them from there:
the same output as redacting them again, and no string the rules change is ever kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import redact
from journal.redact import REDACTED, StreamingRedactor, redact_json_value

SECRETS = [
    "ghp_" + "a" * 36,
    "Bearer abcdefghijklmnopqrstuvwxyz0123456789",
    "token=abc",
    "password=hunter2",
    '{"access_token": "s3cret"}',
    "xoxb-1234567890-abcdefghij",
    "AIza" + "b" * 35,
]
MESSAGE = {
    "jsonrpc": "2.0", "id": 7, "method": "tools/call",
    "params": {"name": "login", "arguments": {"user": "a", "password": "hunter2", "note": SECRETS[0],
                                              "list": SECRETS, "token": {"nested": "x"}, "ok": True}},
}


class _Never(dict):
    """A memo that holds nothing: every string is redacted afresh (the reference)."""

    def __contains__(self, key: object) -> bool:
        return False

    def __setitem__(self, key: object, value: object) -> None:
        return None


def _reference(value: object, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(redact, "_CLEAN_TEXTS", _Never())
        return redact_json_value(value)


def test_the_same_output_cold_and_warm(monkeypatch: pytest.MonkeyPatch) -> None:
    want = _reference(MESSAGE, monkeypatch)
    redact._CLEAN_TEXTS.clear()
    cold = redact_json_value(MESSAGE)
    warm = redact_json_value(MESSAGE)
    assert cold == want and warm == want
    assert "jsonrpc" in redact._CLEAN_TEXTS and "tools/call" in redact._CLEAN_TEXTS  # the memo is in use
    assert want["params"]["arguments"]["password"] == REDACTED
    assert all(s not in repr(warm) for s in ("hunter2", "a" * 36, "s3cret", "abcdefghijklmnop"))


def test_no_string_the_rules_change_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    redact._CLEAN_TEXTS.clear()
    for _ in range(2):
        out = redact_json_value([*SECRETS, MESSAGE])
        assert all(a != b for a, b in zip(out, SECRETS, strict=False))  # each redacted, the second time too
    kept = list(redact._CLEAN_TEXTS)
    assert kept and not set(SECRETS) & set(kept)
    assert _reference(kept, monkeypatch) == kept  # every kept string is one the rules leave as it is


def test_a_memo_planted_with_a_secret_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above is real: a memo that held a secret lets it through (so the memo must only keep clean text)."""
    monkeypatch.setitem(redact._CLEAN_TEXTS, SECRETS[0], None)
    assert redact_json_value([SECRETS[0]]) == [SECRETS[0]]
    monkeypatch.setattr(StreamingRedactor, "_use_triggers", False)  # the plain search never reads the memo
    assert redact_json_value([SECRETS[0]]) != [SECRETS[0]]


def test_full_memo_is_emptied_not_grown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "_CLEAN_TEXTS_MAX", 8)
    redact._CLEAN_TEXTS.clear()
    redact_json_value([f"word{i}" for i in range(50)])
    assert len(redact._CLEAN_TEXTS) <= 8
    long = "x" * (redact._CLEAN_TEXT_MAX_LEN + 1)
    redact_json_value([long])
    assert long not in redact._CLEAN_TEXTS


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.sampled_from(SECRETS),
                          st.builds(lambda a, b: a + b, st.sampled_from(SECRETS), st.text(max_size=8))),
                max_size=12))
def test_any_strings_twice_give_the_reference(strings: list[str]) -> None:
    value = {s: s for s in strings}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(redact, "_CLEAN_TEXTS", _Never())
        want = redact_json_value(value)
    assert redact_json_value(value) == want
    assert redact_json_value(value) == want
