"""The fixture that runs a test module on both implementations of journal/canonical.py's per-call proofs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from journal import canonical


@pytest.fixture(scope="module", params=["c", "python"])
def both_canonical_paths(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the module's tests with the C accelerator (skipped where it was not built) and again with the
    pure-Python fallback that BROKER_NO_SPEEDUPS=1 selects. Module-scoped, so Hypothesis's tests may use it."""
    if request.param == "c":
        try:
            from journal import _canonical_speedups as c
        except ImportError:
            pytest.skip("the C accelerator is not built (see tests/journal/test_canonical_speedups.py)")
        fast, plain, line = canonical._fast_plain, c.plain_json, c.jcs_line
    else:
        fast, plain, line = canonical._fast_read_back, None, None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(canonical, "_fast", fast)
        mp.setattr(canonical, "_plain_json", plain)
        mp.setattr(canonical, "_jcs_line", line)
        yield request.param
