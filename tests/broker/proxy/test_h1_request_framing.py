"""broker/proxy/h1_request_framing.py without a proxy: which request gets which framing, and the wrapped send still
shows mitmproxy's own source to h2_upstream_reuse's shape check (through a real proxy:
tests/e2e/test_h2_reuse_attacks.py)."""

from __future__ import annotations

from mitmproxy import version
from mitmproxy.proxy.layers.http._http1 import Http1Client
from mitmproxy.test import tutils

from broker.proxy import h2_upstream_reuse as reuse
from broker.proxy.h1_request_framing import frame, install


def _request(http_version: str, content: bytes | None, **headers: str):
    req = tutils.treq(http_version=http_version.encode(), content=b"")
    req.headers.clear()
    req.headers.update(headers)
    req.data.content = content  # as mitmproxy's HTTP layer sets it: no header follows
    return req


def test_a_body_held_whole_gets_its_length():
    req = _request("HTTP/2.0", b"0123456789")
    frame(req)
    assert req.headers.get("content-length") == "10" and "transfer-encoding" not in req.headers


def test_a_streamed_body_is_sent_chunked():
    req = _request("HTTP/2.0", None)
    req.stream = True
    frame(req)
    assert req.headers.get("transfer-encoding") == "chunked" and "content-length" not in req.headers


def test_framing_the_client_gave_and_http1_requests_are_left_alone():
    given = _request("HTTP/2.0", b"0123456789", **{"content-length": "10"})
    http1 = _request("HTTP/1.1", b"0123456789")
    frame(given)
    frame(http1)
    assert given.headers.get_all("content-length") == ["10"] and "transfer-encoding" not in given.headers
    assert "content-length" not in http1.headers and "transfer-encoding" not in http1.headers


def test_the_wrapped_send_keeps_mitmproxys_name_and_source_for_the_shape_check():
    install()
    assert Http1Client.send.__name__ == "send" and hasattr(Http1Client.send, "__wrapped__")
    assert reuse.refusal(version.VERSION, reuse.installed_sources()) is None
