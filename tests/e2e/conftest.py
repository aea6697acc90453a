"""Every test in this folder starts a process (the broker, a shim, a server, a browser, a forked or
spawned worker), so each is marked `e2e`: `pytest -m "not e2e"` runs the unit tests alone."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks only this folder's items: the hook sees the whole session's items, not just ours."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def only_main_thread():
    """For the tests that check a fork happened: the code forks only in a process with no other thread
    (journal/forked_call.can_fork), so a thread an earlier test left running would turn them into
    confusing counts of 0. Waits a little for such a thread, then fails naming it."""
    deadline = time.monotonic() + 10
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        pytest.fail(f"threads left running by an earlier test: {others}; nothing forks while they run")
