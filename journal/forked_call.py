"""Run a function in a forked child process and collect its (pickled) result: how the verifier (verify.py)
and replay (replay/forked.py) use a second core on one session, without a process pool's start-up cost.

Only for single-threaded callers: a child forked from a process with other threads may find a lock
held forever (`can_fork` says whether it is safe here).
"""

from __future__ import annotations

import os
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
        import pickle  # here, before the fork (both processes use it): a caller that forks none loads none

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
                try:
                    payload = b"+" + pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                    status = 0
                except BaseException as exc:  # noqa: BLE001 - told to the parent, which does the work itself
                    payload = f"-{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:4000]
                with os.fdopen(write_fd, "wb") as out:
                    out.write(payload)
            finally:
                os._exit(status)
        os.close(write_fd)
        self._pid: int | None = pid
        self._fd: int | None = read_fd
        self.failure: str | None = None
        """Why `result()` gave None: the child's exception, or its exit status."""

    def result(self) -> object | None:
        assert self._fd is not None and self._pid is not None, "result() was already taken"
        with os.fdopen(self._fd, "rb") as f:
            self._fd = None
            payload = f.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        if status == 0 and payload[:1] == b"+":
            import pickle

            return pickle.loads(payload[1:])
        self.failure = payload[1:].decode("utf-8", "replace") or f"exit status {os.waitstatus_to_exitcode(status)}"
        return None

    def close(self) -> None:
        """Stop the child if it still runs (its result is not wanted) and reap it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._pid is not None:
            import signal  # only for a child still running

            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self._pid, 0)
            self._pid = None
