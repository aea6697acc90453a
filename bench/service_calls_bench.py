"""The recording service's own CPU per call, in-process, for broker_bench's calls as the proxy hands them over.

    python -m bench.service_calls_bench [N] [get|mix|post]

Each call's request half goes ahead (`request`, or for a write `prepared_request` with the fields the proxy made
for its write-ahead record, where the tree has that message), then its response (`response`); the service handles
them as it does in `broker run` (`Service.handle`, `prepare_pending`), hot, no fsync. Prints the thread CPU per
call, best of 7 rounds of N (default 1,000) calls. For an A/B, run this file with another tree's interpreter from
that tree (`cd /work/main && .venv/bin/python /path/to/bench/service_calls_bench.py 1000 post`): it imports that
tree's modules and uses `prepared_request` only where the tree has it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import msgspec

from bench.broker_bench import _sample_materials
from bench.capture_bench import to_call
from broker.proxy import wire
from broker.proxy.service import Service
from journal.call import Call
from journal.record import Recorder


def _halves(proxy: Recorder, calls: list[Call]) -> list[Call]:
    """The request halves as the addon sends them: classified already, no response."""
    out = []
    for call in calls:
        req = call.request
        cls = proxy.classify(req.method, req.url, [(k.decode(), v.decode()) for k, v in req.headers], req.body,
                             call.connector)
        out.append(msgspec.structs.replace(call, response=None, ts=None, connector=cls[0], effect=cls[1],
                                           effect_basis=cls[2]))
    return out


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 1000
    mode = argv[1] if len(argv) > 1 else "mix"
    samples = _sample_materials()
    calls = [to_call(samples[0]), to_call(samples[1])]  # Gmail labels GET, Slack chat.postMessage
    vault = Path(tempfile.mkdtemp()) / "vault"
    rec, proxy = Recorder(vault, durable=False), Recorder(vault, durable=False)
    halves = _halves(proxy, calls)
    prepared = getattr(wire, "PreparedAhead", None)
    post_fields = proxy.prepare_request(halves[1]).fields  # type: ignore[union-attr]
    bodiless = msgspec.structs.replace(halves[1], request=msgspec.structs.replace(halves[1].request, body=None))

    def ahead(i: int, k: int) -> object:
        if k == 1 and prepared is not None:
            return prepared(i, bodiless, post_fields)
        return wire.RequestAhead(i, halves[k])

    svc = Service(rec)
    clock = time.thread_time_ns

    def run(base: int) -> float:
        spent = 0
        for i in range(n):
            k = 1 if mode == "post" or (mode == "mix" and i % 4 == 3) else 0
            call = calls[k]
            assert call.response is not None
            data = wire.frame(ahead(base + i, k))  # type: ignore[arg-type]
            comp = wire.frame(wire.Completion(base + i, call.response, call.ts, None))
            a = clock()
            svc.handle(wire.split_to_service(bytearray(data))[0])
            svc.prepare_pending()
            acks = svc.handle(wire.split_to_service(bytearray(comp))[0])
            spent += clock() - a
            assert acks[0].outcome == "ok", acks
        return spent / n / 1e3

    run(10**7)  # warm
    best = min(run(10**8 * (r + 1)) for r in range(7))
    print(f"{mode}: service CPU per call {best:.1f} us (a write's half sent prepared: {prepared is not None})")
    rec.close()
    proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
