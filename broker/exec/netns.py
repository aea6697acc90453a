"""The namespace a contained command runs in, and the sockets the broker makes inside it.

No veth pair and no route out: the namespace has only its loopback, with one address of its own
and a default route onto that loopback, so every destination is routable (a connect reaches the
firewall instead of failing with "network unreachable") and nothing can leave: the only sockets
that reach the outside are the broker's, which live in the broker's own namespace. The broker's
listeners are made inside (a short-lived thread enters the namespace, makes the socket and exits;
the rest of the process never leaves its own namespace), so the NAT entry of a redirected
connection and the listening socket are in the same namespace, which SO_ORIGINAL_DST needs.
The addresses are private to each namespace, so concurrent runs need only distinct names.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import threading
from pathlib import Path

from broker.exec.cleanup import NETNS_DIR

ADDRESS_V4 = "10.253.0.1"  # the namespace's own address (--resolve names: synthetic_names.py)
ADDRESS_V6 = "fd62:726b:7278::1"


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if r.returncode:
        raise OSError(f"ip {' '.join(args)}: {r.stderr.strip() or 'failed'}")


def user_ids(user: str) -> tuple[int, int]:
    """(uid, gid) of a user name or number; OSError when there is no such user."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise OSError(f"--user {user!r}: no such user") from None
    return entry.pw_uid, entry.pw_gid


class Namespace:
    def __init__(self, name: str) -> None:
        self.name = name
        self.path = NETNS_DIR / name

    def create(self, ipv6: bool) -> None:
        _ip("netns", "add", self.name)
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("-n", self.name, "addr", "add", f"{ADDRESS_V4}/32", "dev", "lo")
        _ip("-n", self.name, "route", "add", "default", "dev", "lo", "src", ADDRESS_V4)
        if ipv6:
            _ip("-n", self.name, "addr", "add", f"{ADDRESS_V6}/128", "dev", "lo", "nodad")
            _ip("-n", self.name, "-6", "route", "add", "default", "dev", "lo", "src", ADDRESS_V6)

    def run_inside(self, work):
        """`work()` on a thread that has entered the namespace; its result (or exception)."""
        box: dict = {}

        def enter_and_work() -> None:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.setns(fd, os.CLONE_NEWNET)
                finally:
                    os.close(fd)
                box["result"] = work()
            except BaseException as exc:  # handed to the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=enter_and_work, name=f"netns-{self.name}")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["result"]

    def socket_inside(self, family: int, kind: int, address: tuple) -> socket.socket:
        """A socket bound (and, for TCP, listening) inside the namespace, non-blocking."""

        def make() -> socket.socket:
            # proto given explicitly: asyncio sets TCP_NODELAY on accepted sockets only when their proto
            # is IPPROTO_TCP, and without it each response's second write waited for a delayed ACK (40 ms)
            s = socket.socket(family, kind, socket.IPPROTO_TCP if kind == socket.SOCK_STREAM else 0)
            try:
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind(address)
                if kind == socket.SOCK_STREAM:
                    s.listen(1024)
                s.setblocking(False)
            except BaseException:
                s.close()
                raise
            return s

        return self.run_inside(make)

    def exists(self) -> bool:
        return Path(self.path).exists()
