"""The rule behind the `e2e` mark, checked for every test: a test not marked `e2e` starts no process.

Tests that start one (the broker, a shim, a server, a browser, curl, a spawned or forked worker) live
in tests/e2e/, whose conftest.py marks them, so `pytest -m "not e2e"` is the hermetic, in-process
part of the suite. Without this check a process could slip into a unit file unnoticed: every way
Python starts a process is watched (observed only, never changed) and a unit test that started one
fails at teardown, naming what it started and where its file belongs."""

from __future__ import annotations

import functools
import multiprocessing.process
import os
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

# The principal fingerprint's per-installation key (journal/fingerprint_key.py): the tests' own, never the
# key of the user running them; processes the tests start inherit it.
os.environ.setdefault("BROKER_FINGERPRINT_KEY_FILE", os.path.join(tempfile.mkdtemp(prefix="broker-fp-"), "fp.key"))

_started: list[str] = []
"""What the running test started, one line per process, cleared before each test."""


def _watch(owner: Any, name: str, describe: Callable[..., str]) -> None:
    """Wraps owner.name so that each call notes a process start, then does exactly what it did."""
    real = getattr(owner, name)

    @functools.wraps(real)
    def watched(*args: Any, **kwargs: Any) -> Any:
        _started.append(describe(*args, **kwargs))
        return real(*args, **kwargs)

    setattr(owner, name, watched)


def _argv(args: Any) -> str:
    return " ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)


def pytest_configure(config: pytest.Config) -> None:
    _watch(subprocess.Popen, "_execute_child", lambda self, args, *a, **k: f"subprocess: {_argv(args)}"[:200])
    _watch(multiprocessing.process.BaseProcess, "start", lambda self: f"multiprocessing: {self.name}")
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            _watch(os, name, lambda *a, _name=name, **k: f"os.{_name}({_argv(a[:2])})"[:200])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _started.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """Checks after every fixture's own teardown, so nothing is left running when it fails. After the last
    test the session's fixtures stop their servers too: what starts then is not this test's."""
    before = len(_started)
    yield
    if nextitem is None:
        del _started[before:]
    if _started and item.get_closest_marker("e2e") is None:
        started = "\n  ".join(dict.fromkeys(_started))
        _started.clear()
        pytest.fail(f"{item.nodeid} is not an end-to-end test but started a process:\n  {started}\n"
                    f"Move its file to tests/e2e/ (every test there is marked e2e), or keep the process out "
                    f"of the unit test.", pytrace=False)
