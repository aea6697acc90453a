"""A TCP relay on loopback that counts the connections made through it, and an upstream reached through one:
how many upstream connections the broker opens (tests/e2e/test_h2_upstream_reuse.py, bench/h2_reuse_bench.py)."""

from __future__ import annotations

import socket
import threading

from tests.support.upstreams import Upstream


class CountingRelay:
    """A TCP relay on loopback in front of the fake upstream that counts the connections made to it."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.accepted = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            server = socket.create_connection(("127.0.0.1", self.target))
            for s in (client, server):  # no Nagle delay on what is relayed in pieces (it would add ~40 ms a call)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Shutdown first: closing a listening socket does not wake a thread blocked in accept on Linux,
        and a thread left running keeps every later forking test from forking (tests/e2e/conftest.py)."""
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the relay's accept thread did not stop"


class RelayedUpstream:
    """The fake upstream as the broker's harness sees it, reached through the relay."""

    def __init__(self, up: Upstream, relay: CountingRelay) -> None:
        self.ca_pem, self.hosts, self.port = up.ca_pem, up.hosts, relay.port

    def resolve_args(self) -> list[str]:
        return [a for h in self.hosts for a in ("--resolve", f"{h}=127.0.0.1:{self.port}")]
