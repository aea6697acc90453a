"""The click types for option values that have a fixed set of spellings, checked as the command line is
parsed: a value outside them stops the command with one line saying what to give (exit 2), instead of
a filter that quietly matches nothing.

- `EFFECT`, `CAPTURE`, `ANSWERED_BY`: the contract's own values (journal/entry.py, journal/record.py).
- `UTC_TIME`: a time as `--since`/`--until` take it: a UTC time or a prefix of one as the journal writes
  it (`2026-09-22`, `2026-09-22T10`), an ISO 8601 time with an offset (turned into UTC), or a time back
  from now (`30m`, `1h`, `2d`, `1w`). The value the command gets is always a prefix of the journal's
  `ts` spelling (`2026-09-22T10:00:00.000Z`), so the search compares it as before.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import click

from journal.entry import CAPTURES, EFFECTS
from journal.record import ANSWERED_BY

EFFECT = click.Choice(EFFECTS)
CAPTURE = click.Choice(CAPTURES)
ANSWERED_BY_CHOICE = click.Choice(ANSWERED_BY)

# Prefixes of the journal's ts spelling, cut at a field boundary: 2026, 2026-09, 2026-09-22, ...T10, ...T10:05,
# ...T10:05:07, ...T10:05:07.123, ...T10:05:07.123Z (a trailing Z is accepted on any of the time forms).
_TS_PREFIX = re.compile(r"\d{4}(?:-\d{2}(?:-\d{2}(?:T\d{2}(?::\d{2}(?::\d{2}(?:\.\d{1,3})?)?)?Z?)?)?)?\Z")
_AGO = re.compile(r"(\d{1,6})([smhdw])\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def ts_text(moment: datetime) -> str:
    """`moment` in the journal's own `ts` spelling (UTC, milliseconds, Z)."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _valid_prefix(text: str) -> bool:
    """Whether the fields the prefix gives are a real date and time (no month 13, no hour 25)."""
    digits = text.rstrip("Z")
    template = "0000-01-01T00:00:00.000"
    filled = digits + template[len(digits):]
    try:
        datetime.strptime(filled, "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return False
    return True


class UtcTimeParam(click.ParamType):
    """A `--since`/`--until` value, turned into a prefix of the journal's `ts` spelling (see the module)."""

    name = "TIME"

    def __init__(self, now: datetime | None = None) -> None:
        self._now = now  # fixed only by tests

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if _TS_PREFIX.match(text) and _valid_prefix(text):
            return text.rstrip("Z")
        ago = _AGO.match(text)
        if ago:
            now = self._now or datetime.now(UTC)
            return ts_text(now - timedelta(seconds=int(ago.group(1)) * _UNIT_SECONDS[ago.group(2)]))
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return ts_text(moment)
        self.fail(f"{text!r}: give a UTC time or a prefix of one (2026-09-22, 2026-09-22T10:30), an ISO time "
                  "with its offset (2026-09-22T12:30+02:00), or a time back from now (30m, 1h, 2d, 1w)", param, ctx)


UTC_TIME = UtcTimeParam()

FILTER_TYPES: dict[str, click.ParamType] = {
    "effect": EFFECT, "capture": CAPTURE, "answered-by": ANSWERED_BY_CHOICE, "since": UTC_TIME, "until": UTC_TIME,
}
"""`broker search`'s filters (by option name) whose values are checked as the command line is parsed."""
