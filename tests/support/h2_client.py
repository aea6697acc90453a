"""A raw HTTP/2 client through a broker's tunnel (the h2 library), for requests curl and httpx will not send:
a body with no content-length, a content-length that lies, headers in the order and case a test chooses."""

from __future__ import annotations

import socket
import ssl

import h2.config
import h2.connection
import h2.events


class H2Tunnel:
    """One CONNECT tunnel to `host` through the proxy at 127.0.0.1:`port`, HTTP/2 inside; one stream at a time."""

    def __init__(self, port: int, ca: str, host: str, timeout: float = 30) -> None:
        self.host = host
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        raw.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = raw.recv(4096)
            assert data, "the proxy closed the tunnel"
            answer += data
        assert answer.split(b" ", 2)[1] == b"200", answer
        ctx = ssl.create_default_context(cafile=ca)
        ctx.set_alpn_protocols(["h2"])
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def call(self, method: str, path: str, body: bytes = b"",
             headers: list[tuple[str, str]] | None = None) -> tuple[int | None, bytes, str]:
        """(status, body, how the stream ended: "ended", "reset" or "closed")."""
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", method), (":scheme", "https"), (":authority", self.host),
                                     (":path", path), *(headers or [])], end_stream=not body)
        if body:
            self.conn.send_data(sid, body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        status, got = None, b""
        while True:
            data = self.sock.recv(65536)
            if not data:
                return status, got, "closed"
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    status = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    if ev.stream_id == sid:
                        got += ev.data
                elif isinstance(ev, h2.events.StreamEnded | h2.events.StreamReset) and ev.stream_id == sid:
                    self.sock.sendall(self.conn.data_to_send())
                    return status, got, "ended" if isinstance(ev, h2.events.StreamEnded) else "reset"
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    return status, got, "closed"
            self.sock.sendall(self.conn.data_to_send())

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Tunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
