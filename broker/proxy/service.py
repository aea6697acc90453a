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
- proxy -> service, never acknowledged: `("coverage", 0, [(session, url or host, what, n), ...])`, calls
  the proxy left unrecorded, for the declared coverage of the vault index (docs/checkpoints.md);
- service -> proxy: a list of `(call_id, outcome, detail, stopped)`: outcome "ok" (entry durable,
  detail = its seq), "skip" (a token exchange: nothing recorded), "noted" (the call could not be
  recorded and an entry saying so is durable; detail = why) or "error" (detail = the reason;
  `stopped` when the session's file is stopped and will take nothing more).

The material carries credentials (redaction happens here). They travel only over the socket; what
reaches the disk is the redacted entry and its blobs, as for every other capture point.

    python -m broker.proxy.service --fd N --vault DIR [--spill-threshold B] [--connectors FILE]

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
from dataclasses import dataclass
from datetime import UTC, datetime

from journal.bodies import JSON_PARSE_LIMIT, SPILL_THRESHOLD, decoded_prefix
from journal.checkpoint.autoseal import AutosealConfig
from journal.connectors import Registry
from journal.models.capture import complete as complete_prompt_capture
from journal.models.linking import links_for
from journal.record import Recorder, RequestHalf, decode_headers, principal_fingerprint, text_pairs, wire_field
from journal.redact import header_value
from journal.vault import VaultError
from journal.writer import JournalError, JournalStopped

log = logging.getLogger("broker.proxy.service")

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
        try:
            out.append(pickle.loads(memoryview(buf)[pos + 4 : pos + 4 + n]))
        except Exception as exc:  # noqa: BLE001 - one unreadable frame must not stop the others
            log.error("an unreadable frame of %d bytes was skipped: %s", n, _failure(exc))
        pos += 4 + n
    return out, pos


def request_half(recorder: Recorder, m: dict) -> RequestHalf | None:
    """The request's half of an entry from a call's raw material (see `material_fields`), or None
    for a token exchange."""
    if m.get("prompts"):  # prompt capture on (docs/prompts.md): prompt_ref, and a model call's references
        links_for(recorder).on_request(m)
        m = complete_prompt_capture(recorder, m, request=True)
    method, url = wire_field(m["method"])[0], wire_field(m["url"])[0]
    req_headers = decode_headers(m["request_headers"])  # once: prepare_request takes them as they are
    connector, effect = m["connector"], m.get("effect")
    basis = m.get("effect_basis", "rule")
    body = m.get("request_body")
    if effect is None:
        plain = None
        if isinstance(body, bytes):
            plain = decoded_prefix(body, header_value(req_headers, "content-encoding"), JSON_PARSE_LIMIT)
        cls = recorder.registry.classify(method, url, req_headers, plain)
        if cls is not None:
            effect, basis = cls.effect, "rule"
            if connector == "unknown":
                connector = cls.connector
        else:
            effect = "read" if method in ("GET", "HEAD", "OPTIONS") else "write"
            basis = "default"
    return recorder.prepare_request(
        session=m["session"], agent=m["agent"], principal=m.get("principal") or principal_fingerprint(req_headers, url),
        connector=connector, capture=m.get("capture", "broker"), effect=effect, method=m["method"], url=m["url"],
        request_headers=req_headers, request_body=body, effect_basis=basis,
        request_extra=m.get("request_extra"), prompt_ref=m.get("prompt_ref"),
    )


def response_fields(recorder: Recorder, half: RequestHalf, m: dict) -> dict:
    """The entry fields from a request half and the response's raw material."""
    if m.get("prompts"):
        m = complete_prompt_capture(recorder, m, request=False)
    return recorder.prepare_response(
        half, status=m.get("status"), response_headers=m.get("response_headers") or (),
        response_body=m.get("response_body"), error=m.get("error"), ts=datetime.fromtimestamp(m["ts"], UTC),
        mcp=m.get("mcp"), answered_by=m.get("answered_by"), response_extra=m.get("response_extra"),
    )


def material_fields(recorder: Recorder, m: dict) -> dict | None:
    """Entry fields for one call's raw material, or None for a token exchange.

    `m` holds: session, agent, connector, method, url, request_headers and response_headers (pairs
    of str or raw bytes), request_body and response_body (bytes, `Prepared` or None), status, error,
    ts (epoch seconds), mcp, and optionally principal, effect, effect_basis, answered_by,
    fail_closed (the capture point answers 502 when the call cannot be recorded) and request_extra
    (further request keys, e.g. `playback_of`). A missing principal is the credential's fingerprint;
    a missing effect comes from the connector rules.
    """
    half = request_half(recorder, m)
    return None if half is None else response_fields(recorder, half, m)


def failure_fields(recorder: Recorder, m: dict, why: str) -> dict | None:
    """Fields for an entry that says a call could not be recorded, built from what of its material
    can still be read safely (no bodies); None when not even that can be built (a session that
    cannot name a file, material that is not a mapping).

    Under `fail_closed` the client gets 502 from the capture point, which is what the entry says;
    otherwise the upstream's answer passed and the entry says that, with the error.
    """
    session, agent = m.get("session"), m.get("agent")
    if not (isinstance(session, str) and isinstance(agent, str)):
        return None
    try:
        status = m.get("status")
        upstream_status = status if isinstance(status, int) and 100 <= status <= 599 else None
        fail_closed = bool(m.get("fail_closed", True))
        error = f"the call could not be recorded ({why})"
        if fail_closed:
            error = f"response withheld: {error}"
            if upstream_status is not None:
                error += f"; the upstream answered {upstream_status}"
        extra = {"error": error}
        if fail_closed or upstream_status is None:
            status_out, answered = (502, "capture") if fail_closed else (None, "none")
        else:
            status_out, answered = upstream_status, "upstream"
        headers = m.get("request_headers") or ()
        try:
            req_headers = text_pairs(headers)
        except Exception:  # noqa: BLE001 - unreadable fields: record none rather than nothing at all
            req_headers = []
        principal = m.get("principal")
        ts = m.get("ts")
        when = datetime.fromtimestamp(ts, UTC) if isinstance(ts, int | float) else datetime.now(UTC)
        connector = m.get("connector")
        return recorder.prepare(
            session=session, agent=agent,
            principal=principal if isinstance(principal, str) and principal else "anonymous",
            connector=connector if isinstance(connector, str) and connector else "unknown",
            capture=m.get("capture", "broker") if m.get("capture") in ("broker", "gateway", "agent") else "broker",
            effect=m.get("effect") if m.get("effect") in ("read", "write") else "write",
            effect_basis="default" if m.get("effect") not in ("read", "write") else m.get("effect_basis", "rule"),
            method=_safe_wire(m.get("method")) or "?", url=_safe_wire(m.get("url")),
            request_headers=req_headers, request_body=None, status=status_out, response_headers=(),
            response_body=None, ts=when, answered_by=answered, response_extra=extra,
        )
    except Exception:  # noqa: BLE001 - the caller then acknowledges the failure without an entry
        log.exception("no entry could be built for a call that failed to record")
        return None


def _safe_wire(value: object) -> str:
    if isinstance(value, str | bytes):
        return wire_field(value)[0]
    return "" if value is None else repr(value)


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _Unprepared:
    """A request half that could not be prepared: why, and its material (for the failure entry)."""

    why: str
    material: dict


class Service:
    """The service's state: request halves received ahead of their responses.

    Frames (tuples): ("call", id, material) records a whole call; ("request", id, material) is the
    request half of a call still upstream, prepared once the pending acknowledgements are sent, and
    ("response", id, material) completes it; ("forget", id) drops a request half whose call will
    not be recorded. "call" and "response" are acknowledged, in the order received.

    Whatever one call's material holds, it fails that call alone: its acknowledgement says why,
    and an entry saying that it could not be recorded is written where one can still be built.
    """

    MAX_HALVES = 65536
    """Request halves kept at most (calls upstream at once); beyond it the oldest are dropped."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.raw: dict[int, dict] = {}  # request material not prepared yet
        self.halves: OrderedDict[int, RequestHalf | None | _Unprepared] = OrderedDict()

    def handle(self, frames: list) -> list[tuple[int, str, object, bool]]:
        acks: list[tuple[int, str, object, bool]] = []
        appended: list[tuple[int, str | None]] = []  # (position in `acks`, failure reason or None)
        batch: list[dict] = []
        for message in frames:
            if not (isinstance(message, tuple) and len(message) >= 2 and isinstance(message[1], int)):
                log.error("a message that is not (kind, call id, ...) was skipped")
                continue
            kind, call_id, *rest = message
            if kind in ("request", "call") and rest and isinstance(rest[0], dict) and rest[0].get("prompts"):
                try:
                    links_for(self.recorder).on_request(rest[0])  # prompt_ref as of its arrival
                except Exception as exc:  # noqa: BLE001 - the call is recorded all the same, without it
                    log.error("prompt_ref of call %d not linked: %s", call_id, _failure(exc))
            if kind == "forget":
                self.raw.pop(call_id, None)
                self.halves.pop(call_id, None)
                continue
            if kind == "coverage":  # declared coverage from the proxy: [(session, url, what, n), ...]
                self._note_coverage(rest[0] if rest else ())
                continue
            material = rest[0] if rest else None
            if kind == "request":
                if isinstance(material, dict):
                    self.raw[call_id] = material
                else:
                    self.halves[call_id] = _Unprepared("the request half is not a mapping", {})
                continue
            fields, failed = self._fields(kind, call_id, material)
            if failed is not None and fields is None:
                acks.append((call_id, "error", failed, False))
            elif fields is None:
                acks.append((call_id, "skip", None, False))
            else:
                appended.append((len(acks), failed))
                acks.append((call_id, "error", failed or "not appended", False))
                batch.append(fields)
        if batch:
            try:
                results = self.recorder.writer.append_many(batch)
            except Exception as exc:  # noqa: BLE001 - a writer bug fails this batch, not the service
                log.exception("the writer failed a whole batch")
                results = [JournalError(_failure(exc))] * len(batch)
            for (pos, failed), result in zip(appended, results, strict=True):
                call_id = acks[pos][0]
                if isinstance(result, dict) and "prompt_capture" in result["request"]:
                    links_for(self.recorder).on_recorded(result)
                if isinstance(result, dict) and failed is None:
                    acks[pos] = (call_id, "ok", result["seq"], False)
                elif isinstance(result, dict):
                    acks[pos] = (call_id, "noted", f"{failed} (entry {result['seq']} says so)", False)
                else:
                    why = str(result) if failed is None else f"{failed}; and its failure entry: {result}"
                    acks[pos] = (call_id, "error", why, isinstance(result, JournalStopped))
        return acks

    def _fields(self, kind: object, call_id: int, material: object) -> tuple[dict | None, str | None]:
        """(entry fields or None for a token exchange, None) for a call; for one that cannot be
        recorded, (its failure entry's fields or None, the reason)."""
        whole: dict = {}
        try:
            if not isinstance(material, dict):
                raise ValueError(f"the {kind} material is not a mapping")
            if kind == "call":
                whole = material
                return material_fields(self.recorder, material), None
            if kind != "response":
                raise ValueError(f"unknown frame {kind!r}")
            half = self._take(call_id)
            if isinstance(half, _Unprepared):
                whole = half.material | material
                raise ValueError(half.why)
            if half is None:
                return None, None
            whole = half.fields | material  # session and agent for a failure entry
            return response_fields(self.recorder, half, material), None
        except Exception as exc:  # noqa: BLE001 - every call gets an answer; a bad one must not stop the rest
            why = _failure(exc)
            log.error("call %d could not be recorded: %s", call_id, why)
            return (failure_fields(self.recorder, whole, why) if whole else None), why

    def _note_coverage(self, gaps: object) -> None:
        try:
            for session, url, what, n in gaps:  # type: ignore[union-attr]
                self.recorder.note_gap(session, url, what, n)
        except Exception as exc:  # noqa: BLE001 - a malformed count is logged, never fatal
            log.error("a coverage message could not be read: %s", _failure(exc))

    def prepare_pending(self) -> None:
        """Prepare the request halves received so far (their calls are still upstream)."""
        while self.raw:
            call_id = next(iter(self.raw))
            self.halves[call_id] = self._prepare(self.raw.pop(call_id))
            while len(self.halves) > self.MAX_HALVES:
                dropped, _ = self.halves.popitem(last=False)
                log.warning("more than %d calls upstream at once: dropped the request of call %d",
                            self.MAX_HALVES, dropped)

    def _prepare(self, material: dict) -> RequestHalf | None | _Unprepared:
        try:
            return request_half(self.recorder, material)
        except Exception as exc:  # noqa: BLE001 - reported when the response comes
            return _Unprepared(_failure(exc), material)

    def _take(self, call_id: int) -> RequestHalf | None | _Unprepared:
        """The request half of a call whose response has come, removed from the service's state."""
        if call_id in self.raw:  # request and response arrived in one batch
            return self._prepare(self.raw.pop(call_id))
        return self.halves.pop(
            call_id, _Unprepared("the request half of this call is not here (never sent, or dropped)", {})
        )


def serve(sock: socket.socket, recorder: Recorder) -> None:
    """Record calls from `sock` until the other end closes it; answer each batch in one frame."""
    service = Service(recorder)
    buf = bytearray()
    # One receive buffer for the connection: `sock.recv(RECV_SIZE)` would allocate (mmap) 1 MiB on
    # every call and shrink it again, about 8 us a receive against 1 us for recv_into.
    incoming = memoryview(bytearray(RECV_SIZE))
    while True:
        received = sock.recv_into(incoming)
        if received:
            buf += incoming[:received]
        frames, used = split_frames(buf)
        if used:
            del buf[:used]
        if frames:
            acks = service.handle(frames)
            if acks:
                sock.sendall(frame(acks))
            service.prepare_pending()  # while those calls are upstream
        if not received:
            if buf:
                log.error("the proxy closed the connection in the middle of a call (%d bytes dropped)", len(buf))
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m broker.proxy.service", description=__doc__.split("\n\n")[0])
    p.add_argument("--fd", type=int, required=True, help="connected socket inherited from the proxy")
    p.add_argument("--vault", default=os.environ.get("BROKER_STORE"),
                   help="vault directory or store URL (default: BROKER_STORE)")
    p.add_argument("--spill-threshold", type=int, default=SPILL_THRESHOLD)
    p.add_argument("--connectors", default="", help="connectors TOML file applied on top of the built-in rules")
    AutosealConfig.add_arguments(p)  # --seal-key FILE --checkpoint-entries N --checkpoint-seconds T --witness URL
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
        recorder = Recorder(args.vault, spill_threshold=args.spill_threshold, registry=registry,
                            autoseal=AutosealConfig.from_namespace(args))
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
