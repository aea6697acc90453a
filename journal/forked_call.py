"""Run a function in a forked child process and collect its (pickled) result: the verifier's way to
use more than one core on one session file (verify.py), without a process pool's start-up cost.

Only for single-threaded callers: a child forked from a process with other threads may find a lock
held forever (`can_fork` says whether it is safe here).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """True when a forked child cannot inherit a lock another thread holds: no other Python thread."""
    return hasattr(os, "fork") and threading.active_count() == 1


class ForkedCall:
    """`fn()` running in a child process; `result()` waits for it and returns its value, or None when
    the child failed in any way (the caller then does the work itself)."""

    def __init__(self, fn: Callable[[], object]) -> None:
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child: never return into the caller's code, never run its exit handlers
            status = 1
            try:
                os.close(read_fd)
                payload = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(payload)
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        self._pid: int | None = pid
        self._fd: int | None = read_fd

    def result(self) -> object | None:
        assert self._fd is not None and self._pid is not None, "result() was already taken"
        with os.fdopen(self._fd, "rb") as f:
            self._fd = None
            payload = f.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        if status != 0 or not payload:
            return None
        return pickle.loads(payload)

    def close(self) -> None:
        """Stop the child if it still runs (its result is not wanted) and reap it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self._pid, 0)
            self._pid = None
