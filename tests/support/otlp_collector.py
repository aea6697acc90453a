"""A stand-in OTLP/HTTP traces receiver on loopback for the `--otlp` tests: it keeps every request it gets
and answers from a script (status, headers, body), then 200 with an empty ExportTraceServiceResponse."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: Iterable[bytes] | None = None  # written a piece at a time instead of `body` (a receiver that does not stop)
    length: int | None = None  # the Content-Length announced with `stream`


@dataclass
class Collector:
    url: str
    script: list[Answer]  # answers given in turn, then 200
    keep: bool = True  # False: bodies are counted (`sizes`), not kept (a test measuring this process's memory)
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)  # (path, content type, body) decoded
    sizes: list[int] = field(default_factory=list)  # bytes on the wire (compressed, when it was)
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's headers, names in lower case
    answered: list[int] = field(default_factory=list)

    def accepted(self) -> list[ExportTraceServiceRequest]:
        """The requests answered 2xx, decoded."""
        return [ExportTraceServiceRequest.FromString(body)
                for (_, _, body), status in zip(self.requests, self.answered, strict=True) if 200 <= status < 300]


@contextmanager
def otlp_collector(script: list[Answer] | None = None, keep: bool = True) -> Iterator[Collector]:
    """A receiver on 127.0.0.1 for the duration of the block (shut down, closed and its thread joined)."""
    lock = threading.Lock()
    collector = Collector(url="", script=list(script or []), keep=keep)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the exporter keeps its connection

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = wire = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding", "").lower() == "gzip":  # as the Collector's receiver decodes
                body = gzip.decompress(wire)
            with lock:
                answer = collector.script.pop(0) if collector.script else Answer(
                    headers={"Content-Type": "application/x-protobuf"},
                    body=ExportTraceServiceResponse().SerializeToString())
                collector.requests.append((self.path, self.headers.get("Content-Type", ""), body if keep else b""))
                collector.sizes.append(len(wire))
                collector.headers.append({k.lower(): v for k, v in self.headers.items()})
                collector.answered.append(answer.status)
            self.send_response(answer.status)
            for k, v in answer.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(answer.body) if answer.stream is None else answer.length))
            self.end_headers()
            try:
                for piece in [answer.body] if answer.stream is None else answer.stream:
                    self.wfile.write(piece)
                    self.wfile.flush()
            except OSError:  # the client stopped reading and hung up
                self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="otlp-collector", daemon=True)
    thread.start()
    collector.url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        yield collector
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
