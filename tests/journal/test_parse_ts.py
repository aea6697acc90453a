"""`parse_ts` reads a time in the contract's form at its fixed places (strptime's first call costs some 7 ms
of locale set-up): for every string, the result, or the error and its words, must be what strptime gives."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from journal.entry import format_ts, parse_ts

FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def strptime(ts: object) -> datetime:
    return datetime.strptime(ts, FORMAT).replace(tzinfo=UTC)  # type: ignore[arg-type]


def outcome(read, ts: object) -> tuple[str, object]:
    try:
        return "value", read(ts)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc)


def same_as_strptime(ts: object) -> None:
    assert outcome(parse_ts, ts) == outcome(strptime, ts), ts


# Strings in the contract's shape, any digit in any place: out-of-range months, days, hours, seconds, year 0.
digits = st.text(alphabet="0123456789", min_size=1, max_size=1)
shaped = st.builds(lambda d: "{}{}{}{}-{}{}-{}{}T{}{}:{}{}:{}{}.{}{}{}Z".format(*d), st.lists(digits, min_size=17,
                                                                                            max_size=17))


@given(shaped)
def test_any_digits_in_the_contract_shape_read_as_strptime_reads_them(ts):
    same_as_strptime(ts)


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)))
def test_every_time_the_writer_writes_reads_back(when):
    ts = format_ts(when.replace(tzinfo=UTC))
    same_as_strptime(ts)
    assert parse_ts(ts) == when.replace(microsecond=when.microsecond // 1000 * 1000, tzinfo=UTC)


def test_near_misses_and_hostile_values_go_to_strptime():
    for ts in ["2026-02-29T10:00:00.000Z", "2024-02-29T10:00:00.000Z", "2026-13-01T00:00:00.000Z",
               "2026-01-01T24:00:00.000Z", "2026-01-01T23:60:00.000Z", "2026-01-01T23:59:60.000Z",
               "0000-01-01T00:00:00.000Z", "2026-1-01T00:00:00.000Z", "2026-01-01T00:00:00.5Z",
               "2026-01-01T00:00:00.123456Z", "2026-01-01T00:00:00.000Z\n", "2026-01-01T00:00:00.000",
               "\uff12026-01-01T00:00:00.000Z", "2026-01-01t00:00:00.000z", "", "2026-01-01T00:00:00.0000Z",
               5, None, b"2026-01-01T00:00:00.000Z"]:
        same_as_strptime(ts)


def test_a_contract_time_is_read_without_strptime(monkeypatch):
    """Fails when parse_ts goes back to strptime for every time (the start-up cost it saves)."""
    import journal.entry

    class NoStrptime(datetime):
        @classmethod
        def strptime(cls, *args: object) -> datetime:
            raise AssertionError("strptime called")

    monkeypatch.setattr(journal.entry, "datetime", NoStrptime)
    assert parse_ts("2026-09-22T10:00:10.042Z") == datetime(2026, 9, 22, 10, 0, 10, 42000, tzinfo=UTC)
