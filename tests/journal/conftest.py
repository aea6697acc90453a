"""The fixture that runs a test module on both implementations of journal/canonical.py's per-call proofs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from journal import canonical


@pytest.fixture(scope="module", params=["c", "python"])
def both_canonical_paths(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the module's tests with the C accelerator (skipped where it was not built) and again with the
    pure-Python fallback that BROKER_NO_SPEEDUPS=1 selects. Module-scoped, so Hypothesis's tests may use it."""
    was = canonical.SPEEDUPS
    if not canonical.use_speedups(request.param == "c") and request.param == "c":
        canonical.use_speedups(was)
        pytest.skip("the C accelerator is not built (see tests/journal/test_canonical_speedups.py)")
    yield request.param
    canonical.use_speedups(was)
