"""The recording service: a child process that turns the proxy's calls into durable entries.

mitmproxy runs every hook of every flow on one event-loop thread. Redacting, encoding bodies,
building the canonical form, hashing and waiting for the fsync there (or in a thread of the same
process, which needs the same GIL) slows every call the proxy carries. So the broker hands each
recorded call (a `journal.call.Call`) to this process over a socket pair and waits for its
acknowledgement. This process works through whatever has arrived as one batch (one write and one fsync per session,
with its code and data warm) while the proxy goes on with other flows on the other CPU.

Nothing here is specific to mitmproxy: `call_fields` is the whole mapping from a `journal.call.Call`
to entry fields, and the proxy uses it directly when it records in-process. The wire format (frames
of MessagePack-encoded Calls and acknowledgements) is described in `broker.proxy.wire`.

    python -m broker.proxy.service --fd N --vault DIR [--spill-threshold B] [--connectors FILE]

The service ignores SIGINT and SIGTERM: when the proxy is stopped, it still has calls to record.
It exits once the proxy closes its end (or dies) and everything received is recorded.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections import OrderedDict
from dataclasses import dataclass

import msgspec

from broker.gc_freeze import freeze_startup_objects
from broker.log_lines import stderr_handler
from broker.proxy.wire import (
    Ack,
    Completion,
    Coverage,
    Forget,
    PreparedAhead,
    RequestAhead,
    ToService,
    Unreadable,
    WholeCall,
    frame,
    split_to_service,
)
from journal.bodies import SPILL_THRESHOLD
from journal.call import Call
from journal.checkpoint.autoseal import AutosealConfig
from journal.connectors import Registry
from journal.models.capture import complete as complete_prompt_capture
from journal.models.linking import links_for
from journal.record import Recorder, RequestHalf, decode_headers
from journal.redact import compile_for_capture
from journal.vault import VaultError
from journal.writer import JournalError, JournalStopped

log = logging.getLogger("broker.proxy.service")

RECV_SIZE = 1 << 20


def request_half(recorder: Recorder, call: Call, linked: bool = False, prepared: dict | None = None,
                 ) -> tuple[RequestHalf, Call] | None:
    """The request's half of a call's entry, and the call as prompt capture completed it (its
    response part is completed from that), or None for a token exchange. `linked`: its prompt_ref
    was already linked as it arrived (`Service.handle`). `prepared`: the half's fields as the proxy
    made them for the write's write-ahead record (`Recorder.prepare_request` of this call, but for the
    record's id among its further request keys and the prompt_ref linked here), taken as they are
    (`broker.proxy.wire` says why the proxy is trusted for them)."""
    if call.prompts:  # prompt capture on (docs/prompts.md): prompt_ref, and a model call's references
        if not linked:
            links_for(recorder).on_request(call)
        if prepared is not None and call.model_api:
            raise ValueError("a model call's request is prepared by the recording service (its texts referenced)")
        call = complete_prompt_capture(recorder, call, request=True)
    if prepared is not None:
        return RequestHalf.of({**prepared, "prompt_ref": call.prompt_ref}, call), call
    # decoded once: prepare_request takes them as they are
    call = msgspec.structs.replace(
        call, request=msgspec.structs.replace(call.request, headers=decode_headers(call.request.headers)))
    half = recorder.prepare_request(call)
    return None if half is None else (half, call)


def response_fields(recorder: Recorder, half: RequestHalf, call: Call) -> dict:
    """The entry fields from a request half and the call with its response part."""
    if call.prompts:
        call = complete_prompt_capture(recorder, call, request=False)
    return recorder.prepare_response(half, call)


def call_fields(recorder: Recorder, call: Call, prepared: dict | None = None) -> dict | None:
    """Entry fields for one whole call (`journal.call.Call`), or None for a token exchange. A missing
    principal is the credential's fingerprint; a missing effect comes from the connector rules.
    `prepared`: its request half's fields made already (`request_half`)."""
    half = request_half(recorder, call, prepared=prepared)
    return None if half is None else response_fields(recorder, half[0], half[1])


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _Unprepared:
    """A request half that could not be prepared: why, and its call (for the failure entry)."""

    why: str
    call: Call | None


_Half = tuple[RequestHalf, Call] | None | _Unprepared


class Service:
    """The service's state: request halves received ahead of their responses.

    Messages (`broker.proxy.wire`): `WholeCall` records a whole call; `RequestAhead` is the request
    half of a call still upstream, prepared once the pending acknowledgements are sent (`PreparedAhead`:
    one the proxy prepared already, taken as it is), and `Completion` completes it; `Forget` drops a
    request half whose call will not be recorded.
    Whole calls and completions are acknowledged, in the order received.

    Whatever one call holds, it fails that call alone: its acknowledgement says why, and an entry
    saying that it could not be recorded is written where one can still be built.
    """

    MAX_HALVES = 65536
    """Request halves kept at most (calls upstream at once); beyond it the oldest are dropped."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.raw: dict[int, tuple[Call, dict | None]] = {}  # request halves not prepared yet (and their
        # fields when the proxy prepared them)
        self.halves: OrderedDict[int, _Half] = OrderedDict()

    def handle(self, messages: list[ToService | Unreadable]) -> list[Ack]:
        acks: list[Ack] = []
        appended: list[tuple[int, str | None]] = []  # (position in `acks`, failure reason or None)
        batch: list[dict] = []
        for message in messages:
            if isinstance(message, WholeCall | RequestAhead | PreparedAhead) and message.call.prompts:
                try:
                    links_for(self.recorder).on_request(message.call)  # prompt_ref as of its arrival
                except Exception as exc:  # noqa: BLE001 - the call is recorded all the same, without it
                    log.error("prompt_ref of call %d not linked: %s", message.id, _failure(exc))
            if isinstance(message, Forget):
                self.raw.pop(message.id, None)
                self.halves.pop(message.id, None)
                continue
            if isinstance(message, Coverage):  # declared coverage from the proxy
                try:
                    for session, url, what, n in message.gaps:
                        self.recorder.note_gap(session, url, what, n)
                except Exception as exc:  # noqa: BLE001 - a count that cannot be kept is logged, never fatal
                    log.error("a coverage message could not be noted: %s", _failure(exc))
                continue
            if isinstance(message, RequestAhead):
                self.raw[message.id] = (message.call, None)
                continue
            if isinstance(message, PreparedAhead):
                self.raw[message.id] = (message.call, message.fields)
                continue
            if isinstance(message, Unreadable) and message.id is None:
                continue  # logged where it was read; no call waits on an id nobody can read
            assert message.id is not None  # only an Unreadable may lack one (skipped just above)
            fields, failed = self._fields(message)
            if failed is not None and fields is None:
                acks.append(Ack(message.id, "error", failed))
            elif fields is None:
                acks.append(Ack(message.id, "skip"))
            else:
                appended.append((len(acks), failed))
                acks.append(Ack(message.id, "error", failed or "not appended"))
                batch.append(fields)
        if batch:
            try:
                results = self.recorder.writer.append_many(batch)
            except Exception as exc:  # noqa: BLE001 - a writer bug fails this batch, not the service
                log.exception("the writer failed a whole batch")
                results = [JournalError(_failure(exc))] * len(batch)
            for (pos, failed), result in zip(appended, results, strict=True):
                call_id = acks[pos].id
                if isinstance(result, dict) and "prompt_capture" in result["request"]:
                    links_for(self.recorder).on_recorded(result)
                if isinstance(result, dict) and failed is None:
                    acks[pos] = Ack(call_id, "ok", result["seq"], False, result["effect"], result["hash"])
                elif isinstance(result, dict):
                    acks[pos] = Ack(call_id, "noted", f"{failed} (entry {result['seq']} says so)")
                else:
                    why = str(result) if failed is None else f"{failed}; and its failure entry: {result}"
                    acks[pos] = Ack(call_id, "error", why, isinstance(result, JournalStopped))
        return acks

    def _fields(self, message: WholeCall | Completion | Unreadable) -> tuple[dict | None, str | None]:
        """(entry fields or None for a token exchange, None) for a call; for one that cannot be
        recorded, (its failure entry's fields or None, the reason)."""
        call: Call | None = None
        try:
            if isinstance(message, Unreadable):
                call = message.call
                raise ValueError(f"the message could not be read ({message.why})")
            if isinstance(message, WholeCall):
                call = message.call
                prepared = request_half(self.recorder, call, linked=True)
                return (None if prepared is None else response_fields(self.recorder, *prepared)), None
            half = self._take(message.id)
            if isinstance(half, _Unprepared):
                call = half.call
                raise ValueError(half.why)
            if half is None:
                return None, None
            call = msgspec.structs.replace(half[1], response=message.response, ts=message.ts, mcp=message.mcp)
            return response_fields(self.recorder, half[0], call), None
        except Exception as exc:  # noqa: BLE001 - every call gets an answer; a bad one must not stop the rest
            why = _failure(exc)
            log.error("call %d could not be recorded: %s", message.id, why)
            return (self.recorder.prepare_unrecorded(call, why) if call is not None else None), why

    def prepare_pending(self) -> None:
        """Prepare the request halves received so far (their calls are still upstream)."""
        while self.raw:
            call_id = next(iter(self.raw))
            self.halves[call_id] = self._prepare(*self.raw.pop(call_id))
            while len(self.halves) > self.MAX_HALVES:
                dropped, _ = self.halves.popitem(last=False)
                log.warning("more than %d calls upstream at once: dropped the request of call %d",
                            self.MAX_HALVES, dropped)

    def _prepare(self, call: Call, prepared: dict | None) -> _Half:
        try:
            return request_half(self.recorder, call, linked=True, prepared=prepared)
        except Exception as exc:  # noqa: BLE001 - reported when the response comes
            return _Unprepared(_failure(exc), call)

    def _take(self, call_id: int) -> _Half:
        """The request half of a call whose response has come, removed from the service's state."""
        if call_id in self.raw:  # request and response arrived in one batch
            return self._prepare(*self.raw.pop(call_id))
        return self.halves.pop(
            call_id, _Unprepared("the request half of this call is not here (never sent, or dropped)", None)
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
        messages, used = split_to_service(buf)
        if used:
            del buf[:used]
        if messages:
            acks = service.handle(messages)
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
    logging.basicConfig(level=logging.INFO, handlers=[
        stderr_handler("recording service", logging.Formatter("recording service: %(message)s"))])
    sock = socket.socket(fileno=args.fd)
    try:
        registry = Registry.builtin()
        if args.connectors:
            registry = registry.with_file(args.connectors)
        recorder = Recorder(args.vault, spill_threshold=args.spill_threshold, registry=registry,
                            autoseal=AutosealConfig.from_namespace(args))
    except (OSError, ValueError, VaultError) as exc:  # the proxy reports the exit to every call waiting
        log.error("cannot start: %s", exc)
        logging.shutdown()
        # Exit now, closing the socket as the process ends: the proxy sees the hang-up and reads the
        # exit code at once (an interpreter's orderly shutdown after the close can take longer than
        # the moment it waits for the code, and it would then report a hang-up without the code).
        os._exit(2)
    compile_for_capture()  # before the first call (journal.redact)
    freeze_startup_objects()  # (broker.gc_freeze)
    try:
        sock.sendall(frame([]))  # ready: an empty batch of acknowledgements (the proxy's deadline starts now)
        serve(sock, recorder)
    finally:
        recorder.close()
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
