"""One effect rule for a call that brings none: the Recorder's (connector rules, then the method's
meaning with its override headers), whichever capture path records the call.

Regression tests for issue 20's drift: an unknown-host GET with `X-HTTP-Method-Override: DELETE` was
recorded `read` by the recording service while the registry says `write` (an understated write), and
lower-case `get` was `write` in one copy of the rule and `read` in another.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from mitmproxy import http

from broker.proxy.link import Recorded, RecorderLink
from broker.proxy.service import Service, call_fields
from broker.proxy.wire import WholeCall, frame, split_to_service
from journal.call import Call
from journal.connectors import Registry, effect_of_method, lower_headers
from journal.reader import iter_entries
from journal.record import Recorder
from journal.vault import Vault

UNKNOWN = "https://api.unknown-host.test/v1/things/7"
OVERRIDE = ((b"Host", b"api.unknown-host.test"), (b"X-HTTP-Method-Override", b"DELETE"))
PLAIN = ((b"Host", b"api.unknown-host.test"),)

# (method, headers, the effect the registry's own rule gives)
CASES = [
    ("GET", OVERRIDE, "write"),
    ("get", OVERRIDE, "write"),
    ("GET", PLAIN, "read"),
    ("get", PLAIN, "read"),
    ("head", PLAIN, "read"),
    ("post", PLAIN, "write"),
    ("G\u00e9T", PLAIN, "write"),  # not a method token: fail closed
]


def _call(method: str, headers, session: str = "eff") -> Call:
    return Call.make(session=session, agent="a", principal=None, connector="unknown", method=method, url=UNKNOWN,
                     request_headers=headers, status=200, response_headers=(), ts=1796000000.0)


def _registry_says(method: str, headers) -> str:
    text = [(k.decode(), v.decode()) for k, v in headers]
    assert Registry.builtin().classify(method, UNKNOWN, text, None) is None  # no connector knows the host
    return effect_of_method(method, lower_headers(text))[0]


@pytest.mark.parametrize(("method", "headers", "effect"), CASES)
def test_the_recorder_classifies_as_the_registry_does(tmp_path, method, headers, effect):
    assert _registry_says(method, headers) == effect
    rec = Recorder(tmp_path, durable=False)
    fields = call_fields(rec, _call(method, headers))
    assert (fields["effect"], fields["request"]["effect_basis"], fields["connector"]) == (effect, "default", "unknown")
    assert fields["request"]["method"] == method  # recorded as sent
    text = [(k.decode(), v.decode()) for k, v in headers]
    reported = rec.report_call(session="eff", agent="a", principal="p", method=method, url=UNKNOWN, status=200,
                               request_headers=text, connector="unknown")
    assert reported["effect"] == effect
    rec.close()


def test_a_service_frame_records_the_override_as_a_write(tmp_path):
    rec = Recorder(tmp_path)
    calls = [_call(m, h) for m, h, _ in CASES]
    data = b"".join(frame(WholeCall(i, c)) for i, c in enumerate(calls, 1))
    acks = Service(rec).handle(split_to_service(bytearray(data))[0])
    rec.close()
    assert [a.effect for a in acks] == [e for _, _, e in CASES]
    assert [e["effect"] for e in iter_entries(Vault(tmp_path), "eff")] == [e for _, _, e in CASES]


def test_the_real_service_process_tells_the_entrys_effect_back(tmp_path):
    async def main() -> list:
        link = RecorderLink(str(tmp_path / "vault"), 1 << 20)
        await link.connect()
        try:
            return [await link.record(_call(m, h)) for m, h, _ in CASES[:4]]
        finally:
            await link.aclose()

    got = asyncio.run(main())
    assert [r[:2] for r in got] == [(i, e) for i, (_, _, e) in enumerate(CASES[:4], 1)]
    assert all(isinstance(r, Recorded) and r.hash is not None and len(r.hash) == 64 for r in got)


@pytest.mark.parametrize(("method", "headers", "effect"), CASES[:4])
def test_the_inline_path_and_the_log_line_say_the_same(tmp_path, caplog, method, headers, effect):
    from mitmproxy.test import taddons, tflow

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx, caplog.at_level(logging.INFO, logger="broker"):
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline", broker_record_unknown=True,
                       broker_session="eff")
        f = tflow.tflow()
        f.request = http.Request.make("GET", UNKNOWN, b"", list(headers))
        f.request.method = method
        addon.requestheaders(f)
        ahead = addon.request(f)  # a write's record is made first (journal/write_ahead.py)
        if ahead is not None:
            asyncio.run(ahead)
        f.response = http.Response.make(200, b"{}", [(b"Content-Type", b"application/json")])
        addon.responseheaders(f)
        asyncio.run(addon.response(f))
    (entry,) = iter_entries(Vault(tmp_path / "vault"), "eff")
    assert (entry["effect"], entry["request"]["method"]) == (effect, f.request.method)  # mitmproxy upper-cases
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recorded seq=")]
    assert lines and f" effect={effect} {f.request.method} " in lines[-1]
