"""Run part of the view writing in a forked child, beside the parent's part (the second core).

The views of a replay are many independent files: the resource notes (with views.json's resource
lines) on one side; the timeline pages, the index and the revert plan on the other. Both halves
only read the replay's spill store, so after the fold the parent forks once: the child writes its
half through a connection of its own to the same database (the parent commits and drops its
exclusive lock first), the parent writes the other half, then waits. The files are the same bytes
whichever process writes them; `views.json`, which says an output is complete, is still written
last, by the parent, once the child is done.

A fork is only used where it is safe and available: a POSIX system and a process with no other
thread (a fork copies one thread; the inspector replays from a thread pool and writes no views).
When the child cannot run or fails, the parent writes the child's half itself: the outputs never
depend on whether a fork happened.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Callable

from .store import Store

ENABLED = True
"""Tests switch this off to compare the forked and the serial output byte for byte."""


class Child:
    """A forked child running some work; `join` waits for it and gives what it sent back, or why it failed
    (the caller then does the work itself)."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self._pipe = pipe

    def join(self) -> tuple[bytes | None, str | None]:
        """Wait for the child: (what it sent, None) when it succeeded, else (None, why not)."""
        with os.fdopen(self._pipe, "rb") as f:
            message = f.read()
        _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == 0 and message[:1] == b"+":
            return message[1:], None
        return None, message[1:].decode("utf-8", "replace") or f"exit status {code}"


    def abandon(self) -> None:
        """The parent gave up (an exception): stop the child and reap it, so no process is left behind."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self._pipe)


def can_fork() -> bool:
    return ENABLED and hasattr(os, "fork") and threading.active_count() == 1


def start(work: Callable[[], bytes], store: Store | None = None) -> Child | None:
    """Fork a child that runs `work` and sends back the bytes it returns (with `store`, reading it through
    a connection of its own); None when no fork is possible here (the caller runs `work` itself)."""
    if not can_fork():
        return None
    if store is not None:
        store.share()
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if pid == 0:  # the child: never returns
        os.close(read)
        code = 0
        try:
            if store is not None:
                # The inherited connection belongs to the parent: set aside, never used or closed here.
                store.inherited = store.db
                store.db = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
            out = b"+" + work()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which redoes the work
            code = 1
            out = f"-{type(exc).__name__}: {exc}".encode()[:4000]
        try:
            view = memoryview(out)
            while view:
                view = view[os.write(write, view) :]
        except OSError:
            code = 1
        os._exit(code)  # no finalizers: the store's folder and every open file belong to the parent
    os.close(write)
    return Child(pid, read)


__all__ = ["ENABLED", "Child", "can_fork", "start"]
