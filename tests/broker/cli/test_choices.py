"""The option types of broker/cli/choices.py: a value outside the choices is a usage error, every accepted time
becomes a prefix of the journal's `ts` spelling that the search compares as before."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import pytest
from click.testing import CliRunner

from broker.cli.choices import EFFECT, FILTER_TYPES, UtcTimeParam, ts_text
from broker.cli.exit_codes import usage_line

NOW = datetime(2026, 12, 2, 4, 30, 15, 123456, tzinfo=UTC)
TIME = UtcTimeParam(now=NOW)


@pytest.mark.parametrize(("given", "expected"), [
    ("2026", "2026"),
    ("2026-09-22", "2026-09-22"),
    ("2026-09-22T10", "2026-09-22T10"),
    ("2026-09-22T10:05", "2026-09-22T10:05"),
    ("2026-09-22T10:05:07.1", "2026-09-22T10:05:07.1"),
    ("2026-09-22T10:05:07.123Z", "2026-09-22T10:05:07.123"),
    ("2026-09-22T10:05:07", "2026-09-22T10:05:07"),  # the journal's own spelling is UTC
    ("2026-09-22T12:30+02:00", "2026-09-22T10:30:00.000Z"),
    ("2026-09-22T00:30:00-05:00", "2026-09-22T05:30:00.000Z"),
    ("90s", "2026-12-02T04:28:45.123Z"),
    ("30m", "2026-12-02T04:00:15.123Z"),
    ("1h", "2026-12-02T03:30:15.123Z"),
    ("2d", "2026-11-30T04:30:15.123Z"),
    ("1w", "2026-11-25T04:30:15.123Z"),
])
def test_times_become_prefixes_of_the_ts_spelling(given, expected):
    got = TIME.convert(given, None, None)
    assert got == expected
    assert ts_text(NOW).startswith(got[:4])


@pytest.mark.parametrize("bad", ["yesterday", "", "2026-13-01", "2026-09-31", "2026-09-22T25", "2026-9-22",
                                 "1y", "-1h", "2026-09-22 10:00", "1h ago", "now"])
def test_anything_else_is_a_usage_error_naming_the_forms(bad):
    with pytest.raises(click.BadParameter) as err:
        TIME.convert(bad, None, None)
    assert "30m, 1h, 2d" in str(err.value) and "2026-09-22" in str(err.value)


def test_the_search_filters_with_fixed_values_are_checked():
    assert set(FILTER_TYPES) == {"effect", "capture", "answered-by", "since", "until"}
    assert list(EFFECT.choices) == ["read", "write"]


def test_a_usage_error_is_one_broker_error_line():
    @click.command()
    @click.option("--effect", type=EFFECT)
    def cmd(effect):
        pass

    with pytest.raises(click.UsageError) as err:
        cmd.main(["--effect", "banana"], prog_name="broker search", standalone_mode=False)
    line = usage_line(err.value)
    assert "\n" not in line and line.startswith("broker: error: ") and "'banana'" in line
    assert "broker search --help" in line
    assert CliRunner().invoke(cmd, ["--effect", "read"]).exit_code == 0
