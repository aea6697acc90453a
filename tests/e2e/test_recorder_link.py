"""The proxy's end of the recording service: frames leave through an outbox, once per loop turn, in order."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from broker.proxy.link import Recorded, RecorderLink, ServiceLost, ServiceUnavailable
from broker.proxy.wire import Ack, split_to_service
from journal.reader import iter_entries
from journal.vault import Vault
from journal.verify import verify_session
from tests.e2e.test_service import ahead, material


class _Transport(asyncio.Transport):
    """Records every write; the service's side of the socket, seen from the proxy."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False
        self.eof = False

    def write(self, data) -> None:
        assert not self.eof, "written after the end"
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def get_extra_info(self, name, default=None):
        return default

    def abort(self) -> None:
        self.closing = True


def _frames(data: bytes) -> list[tuple[str, int]]:
    """(kind, id) of each message in `data`."""
    messages, used = split_to_service(bytearray(data))
    assert used == len(data)
    return [(type(m).__struct_config__.tag, getattr(m, "id", 0)) for m in messages]


def _linked(transport: _Transport) -> RecorderLink:
    link = RecorderLink("unused", 1 << 20)
    link._transport = transport
    link._generation = 1
    return link


def test_frames_of_one_turn_leave_in_one_write_in_order_after_the_turn():
    async def main():
        t = _Transport()
        link = _linked(t)
        order: list[str] = []
        sent = link.send_request(ahead(material(0)))
        # mitmproxy continues the request hook with a callback queued after it: that continuation
        # (which writes the request upstream) must come before the request half is written
        asyncio.get_running_loop().call_soon(lambda: order.append(f"continuation, {len(t.writes)} writes"))
        link.forget((1, 99))
        assert link.send_coverage([("svc", "https://x.test", "passed", 2)])
        assert t.writes == []  # nothing written inside the hook
        for _ in range(3):
            await asyncio.sleep(0)
        assert order == ["continuation, 0 writes"]
        assert len(t.writes) == 1  # one write for the whole turn
        assert _frames(t.writes[0]) == [("request", sent[1]), ("forget", 99), ("coverage", 0)]
        link._acknowledged([Ack(sent[1], "ok", 7)])

    asyncio.run(main())


def test_a_frame_a_call_waits_on_leaves_at_once_after_what_is_queued():
    async def main():
        t = _Transport()
        link = _linked(t)
        other = link.send_request(ahead(material(1)))  # queued, of another flow
        sent = (1, 50)
        answer = asyncio.ensure_future(link.finish(sent, material(0)))
        await asyncio.sleep(0)  # the response half's task has run once: written, not held for the turn
        assert [_frames(w) for w in t.writes] == [[("request", other[1]), ("response", 50)]]
        link._acknowledged([Ack(50, "ok", 3, False, "read")])
        assert await answer == Recorded(3, "read")

    asyncio.run(main())


def test_request_halves_of_each_turn_get_their_own_write():
    async def main():
        t = _Transport()
        link = _linked(t)
        first = link.send_request(ahead(material(0)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        second = link.send_request(ahead(material(1)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [[i for _, i in _frames(w)] for w in t.writes] == [[first[1]], [second[1]]]

    asyncio.run(main())


def test_the_end_follows_what_is_queued_and_a_lost_service_drops_the_queue():
    async def main():
        t = _Transport()
        link = _linked(t)
        link.send_request(ahead(material(0)))
        link._shut_write(drain=True)  # closing: what is queued is written first, then the end
        assert len(t.writes) == 1 and t.eof

        t2 = _Transport()
        link = _linked(t2)
        call = material(1)
        sent = link.send_request(ahead(call))
        answer = asyncio.ensure_future(link.finish(sent, call))
        await asyncio.sleep(0)  # the response half is written (with the request half before it)
        link.send_request(ahead(material(2)))  # queued for the next turn
        link._lost(t2)  # the service hung up meanwhile
        with pytest.raises(ServiceLost):
            await answer
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(t2.writes) == 1  # nothing more for a service that is gone

    asyncio.run(main())


def test_queued_halves_reach_a_real_service_and_closing_records_them(tmp_path):
    vault = tmp_path / "vault"

    async def main():
        link = RecorderLink(str(vault), 1 << 20)
        await link.connect()
        calls = []
        for i in range(20):  # twenty calls in one turn: one write, one batch for the service
            call = material(i)
            calls.append(asyncio.ensure_future(link.finish(link.send_request(ahead(call)), call)))
        assert sorted(r.seq for r in await asyncio.gather(*calls)) == list(range(1, 21))
        call = material(20)
        last = asyncio.ensure_future(link.finish(link.send_request(ahead(call)), call))
        await asyncio.sleep(0)  # the response half is queued: closing now must still send it
        await link.aclose()
        assert (await last).seq == 21

    asyncio.run(main())
    assert verify_session(Vault(vault), "svc").intact
    assert len(list(iter_entries(Vault(vault), "svc"))) == 21


def test_a_service_killed_with_frames_queued_fails_the_waiting_calls(tmp_path):
    async def main():
        link = RecorderLink(str(tmp_path / "vault"), 1 << 20)
        await link.connect()
        os.kill(link.proc.pid, signal.SIGKILL)
        call = material(0)
        answer = asyncio.ensure_future(link.finish(link.send_request(ahead(call)), call))
        with pytest.raises(ServiceLost):
            await asyncio.wait_for(answer, 10)
        await link.aclose()

    asyncio.run(main())


def test_a_call_the_wire_cannot_carry_is_left_to_the_proxy_not_half_sent():
    """A value MessagePack cannot encode (a lone surrogate in an error text, an integer past 64 bits)
    never reaches the socket: `send_request` says not sent, and `record`/`finish` raise
    ServiceUnavailable, on which the addon records the call in its own process."""
    async def main():
        t = _Transport()
        link = _linked(t)
        odd = material(0, error="reset by peer \udcff")
        assert link.send_request(ahead(material(1, url=2**70))) is None
        with pytest.raises(ServiceUnavailable, match="cannot be sent"):
            await link.record(odd)
        with pytest.raises(ServiceUnavailable):
            await link.finish((1, 5), odd)
        await asyncio.sleep(0)
        assert t.writes == [] and not link._waiting

    asyncio.run(main())
