"""Every test in this folder starts a process (the broker, a shim, a server, a browser, a forked or
spawned worker), so each is marked `e2e`: `pytest -m "not e2e"` runs the unit tests alone."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks only this folder's items: the hook sees the whole session's items, not just ours."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)
