"""The recording service: a child process that turns the raw material of calls into durable entries.

mitmproxy runs every hook of every flow on one event-loop thread. Redacting, encoding bodies,
building the canonical form, hashing and waiting for the fsync there (or in a thread of the same
process, which needs the same GIL) slows every call the proxy carries. So the broker hands each
recorded call's raw material to this process over a socket pair and waits for its acknowledgement.
This process works through whatever has arrived as one batch (one write and one fsync per session,
with its code and data warm) while the proxy goes on with other flows on the other CPU.

Nothing here is specific to mitmproxy: `material_fields` is the whole mapping from a call's raw
material to entry fields, and the proxy uses it directly when it records in-process.

Wire format, both directions: frames of a 4-byte big-endian length and a pickle (protocol 5); the
socket pair is private to the two processes and nothing else ever writes to it.

- proxy -> service: `("call", call_id, material)`, with `material` as `material_fields` takes it; or
  the request half first, `("request", call_id, material)`, sent when the call goes upstream (the
  service prepares it meanwhile), then `("response", call_id, material)`; `("forget", call_id)` drops
  a request half whose call ends unrecorded (see `Service`);
- service -> proxy: a list of `(call_id, outcome, detail, stopped)`: outcome "ok" (entry durable,
  detail = its seq), "skip" (a token exchange: nothing recorded) or "error" (detail = the reason;
  `stopped` when the session's file is stopped and will take nothing more).

The material carries credentials (redaction happens here). They travel only over the socket; what
reaches the disk is the redacted entry and its blobs, as for every other capture point.

    python -m journal.service --fd N --vault DIR [--spill-threshold B] [--connectors FILE]

The service ignores SIGINT and SIGTERM: when the proxy is stopped, it still has calls to record.
It exits once the proxy closes its end (or dies) and everything received is recorded.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import signal
import socket
import struct
import sys
from collections import OrderedDict
from datetime import UTC, datetime

from journal.bodies import JSON_PARSE_LIMIT, SPILL_THRESHOLD, decoded_prefix
from journal.connectors import Registry
from journal.record import Recorder, RequestHalf, principal_fingerprint, text_pairs
from journal.redact import header_value
from journal.vault import VaultError
from journal.writer import JournalStopped

log = logging.getLogger("journal.service")

HEADER = struct.Struct(">I")
RECV_SIZE = 1 << 20


def frame(obj: object) -> bytes:
    payload = pickle.dumps(obj, protocol=5)
    return HEADER.pack(len(payload)) + payload


def split_frames(buf: bytearray) -> tuple[list, int]:
    """The complete frames at the start of `buf`, unpickled, and how many bytes they took."""
    out, pos, size = [], 0, len(buf)
    while size - pos >= 4:
        (n,) = HEADER.unpack_from(buf, pos)
        if size - pos - 4 < n:
            break
        out.append(pickle.loads(memoryview(buf)[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out, pos


def request_half(recorder: Recorder, m: dict) -> RequestHalf | None:
    """The request's half of an entry from a call's raw material (see `material_fields`), or None
    for a token exchange."""
    method, url = m["method"], m["url"]
    req_headers = text_pairs(m["request_headers"])
    connector, effect = m["connector"], m.get("effect")
    body = m.get("request_body")
    if effect is None:
        plain = None
        if isinstance(body, bytes):
            plain = decoded_prefix(body, header_value(req_headers, "content-encoding"), JSON_PARSE_LIMIT)
        cls = recorder.registry.classify(method, url, req_headers, plain)
        if cls is not None:
            effect = cls.effect
            if connector == "unknown":
                connector = cls.connector
        else:
            effect = "read" if method in ("GET", "HEAD", "OPTIONS") else "write"
    return recorder.prepare_request(
        session=m["session"], agent=m["agent"], principal=m.get("principal") or principal_fingerprint(req_headers, url),
        connector=connector, capture=m.get("capture", "broker"), effect=effect, method=method, url=url,
        request_headers=req_headers, request_body=body,
    )


def response_fields(recorder: Recorder, half: RequestHalf, m: dict) -> dict | None:
    """The entry fields from a request half and the response's raw material; None for a token grant."""
    return recorder.prepare_response(
        half, status=m.get("status"), response_headers=text_pairs(m.get("response_headers") or ()),
        response_body=m.get("response_body"), error=m.get("error"), ts=datetime.fromtimestamp(m["ts"], UTC),
        mcp=m.get("mcp"),
    )


def material_fields(recorder: Recorder, m: dict) -> dict | None:
    """Entry fields for one call's raw material, or None for a token exchange.

    `m` holds: session, agent, connector, method, url, request_headers and response_headers (pairs
    of str or raw bytes), request_body and response_body (bytes, `Prepared` or None), status, error,
    ts (epoch seconds), mcp, and optionally principal and effect. A missing principal is the
    credential's fingerprint; a missing effect comes from the connector rules.
    """
    half = request_half(recorder, m)
    return None if half is None else response_fields(recorder, half, m)


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Service:
    """The service's state: request halves received ahead of their responses.

    Frames (tuples): ("call", id, material) records a whole call; ("request", id, material) is the
    request half of a call still upstream, prepared once the pending acknowledgements are sent, and
    ("response", id, material) completes it; ("forget", id) drops a request half whose call will
    not be recorded. "call" and "response" are acknowledged, in the order received.
    """

    MAX_HALVES = 65536
    """Request halves kept at most (calls upstream at once); beyond it the oldest are dropped."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.raw: dict[int, dict] = {}  # request material not prepared yet
        self.halves: OrderedDict[int, RequestHalf | None | str] = OrderedDict()  # str: why it failed

    def handle(self, frames: list[tuple]) -> list[tuple[int, str, object, bool]]:
        acks: list[tuple[int, str, object, bool]] = []
        appended: list[int] = []  # positions in `acks` waiting for the append
        batch = []
        for message in frames:
            if not (isinstance(message, tuple) and len(message) >= 2 and isinstance(message[1], int)):
                log.error("a message that is not (kind, call id, ...) was skipped")
                continue
            kind, call_id, *rest = message
            if kind == "request":
                self.raw[call_id] = rest[0]
                continue
            if kind == "forget":
                self.raw.pop(call_id, None)
                self.halves.pop(call_id, None)
                continue
            try:
                if kind == "call":
                    fields = material_fields(self.recorder, rest[0])
                elif kind == "response":
                    half = self._take(call_id)
                    if isinstance(half, str):
                        raise ValueError(half)
                    fields = None if half is None else response_fields(self.recorder, half, rest[0])
                else:
                    raise ValueError(f"unknown frame {kind!r}")
            except Exception as exc:  # noqa: BLE001 - every call gets an answer; a bad one must not stop the rest
                acks.append((call_id, "error", _failure(exc), False))
                continue
            if fields is None:
                acks.append((call_id, "skip", None, False))
            else:
                appended.append(len(acks))
                acks.append((call_id, "error", "not appended", False))
                batch.append(fields)
        if batch:
            for pos, result in zip(appended, self.recorder.writer.append_many(batch), strict=True):
                call_id = acks[pos][0]
                if isinstance(result, dict):
                    acks[pos] = (call_id, "ok", result["seq"], False)
                else:
                    acks[pos] = (call_id, "error", str(result), isinstance(result, JournalStopped))
        return acks

    def prepare_pending(self) -> None:
        """Prepare the request halves received so far (their calls are still upstream)."""
        while self.raw:
            call_id = next(iter(self.raw))
            self.halves[call_id] = self._prepare(self.raw.pop(call_id))
            while len(self.halves) > self.MAX_HALVES:
                dropped, _ = self.halves.popitem(last=False)
                log.warning("more than %d calls upstream at once: dropped the request of call %d",
                            self.MAX_HALVES, dropped)

    def _prepare(self, material: dict) -> RequestHalf | None | str:
        try:
            return request_half(self.recorder, material)
        except Exception as exc:  # noqa: BLE001 - reported when the response comes
            return _failure(exc)

    def _take(self, call_id: int) -> RequestHalf | None | str:
        """The request half of a call whose response has come, removed from the service's state."""
        if call_id in self.raw:  # request and response arrived in one batch
            return self._prepare(self.raw.pop(call_id))
        return self.halves.pop(call_id, "the request half of this call is not here (never sent, or dropped)")


def serve(sock: socket.socket, recorder: Recorder) -> None:
    """Record calls from `sock` until the other end closes it; answer each batch in one frame."""
    service = Service(recorder)
    buf = bytearray()
    while True:
        chunk = sock.recv(RECV_SIZE)
        if chunk:
            buf += chunk
        frames, used = split_frames(buf)
        if used:
            del buf[:used]
        if frames:
            acks = service.handle(frames)
            if acks:
                sock.sendall(frame(acks))
            service.prepare_pending()  # while those calls are upstream
        if not chunk:
            if buf:
                log.error("the proxy closed the connection in the middle of a call (%d bytes dropped)", len(buf))
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m journal.service", description=__doc__.split("\n\n")[0])
    p.add_argument("--fd", type=int, required=True, help="connected socket inherited from the proxy")
    p.add_argument("--vault", default=os.environ.get("BROKER_STORE"),
                   help="vault directory or store URL (default: BROKER_STORE)")
    p.add_argument("--spill-threshold", type=int, default=SPILL_THRESHOLD)
    p.add_argument("--connectors", default="", help="connectors TOML file applied on top of the built-in rules")
    args = p.parse_args(argv)
    if not args.vault:
        p.error("--vault DIR (or a store URL in BROKER_STORE) is required")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="recording service: %(message)s")
    sock = socket.socket(fileno=args.fd)
    try:
        registry = Registry.builtin()
        if args.connectors:
            registry = registry.with_file(args.connectors)
        recorder = Recorder(args.vault, spill_threshold=args.spill_threshold, registry=registry)
    except (OSError, ValueError, VaultError) as exc:  # the proxy reports the exit to every call waiting
        log.error("cannot start: %s", exc)
        sock.close()
        return 2
    try:
        serve(sock, recorder)
    finally:
        recorder.close()
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
