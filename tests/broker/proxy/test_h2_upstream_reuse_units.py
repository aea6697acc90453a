"""broker/proxy/h2_upstream_reuse.py without a proxy: it refuses a mitmproxy other than the one it was written
against, applies once and comes off cleanly, keeps HTTP/1's rule for ending a connection, and only `broker run`
imports it (the behaviour through a real proxy is in tests/e2e/test_h2_upstream_reuse.py)."""

from __future__ import annotations

import logging

import pytest
from mitmproxy import http, version
from mitmproxy.proxy.layers.http import HttpLayer
from mitmproxy.proxy.layers.http._http1 import Http1Client, Http1Connection

from broker.proxy import h2_upstream_reuse as reuse
from broker.proxy.trailers import install as install_trailers
from tests.test_import_graph import import_graph

STOCK_GET_CONNECTION = HttpLayer.get_connection
STOCK_MARK_DONE = Http1Connection.mark_done


@pytest.fixture
def stock_afterwards():
    """Listed before monkeypatch, so that its undo runs first."""
    yield
    reuse.remove()
    assert "mark_done" not in Http1Client.__dict__ and HttpLayer.get_connection is STOCK_GET_CONNECTION


def test_the_installed_mitmproxy_is_the_one_it_was_written_against():
    assert reuse.refusal(version.VERSION, reuse.installed_sources()) is None


def test_the_brokers_own_http1_trailer_patch_does_not_hide_the_stock_methods():
    """broker.proxy.trailers wraps Http1Client.send when mitmproxy loads the addon, which may come first."""
    install_trailers()
    assert Http1Client.send.__name__ == "send" and hasattr(Http1Client.send, "__wrapped__")
    assert reuse.refusal(version.VERSION, reuse.installed_sources()) is None


def test_another_major_version_is_refused():
    assert "13.0.0 is not 12.x" in (reuse.refusal("13.0.0", reuse.installed_sources()) or "")


@pytest.mark.parametrize("name", sorted(reuse.SHAPES))
def test_a_changed_method_is_refused_by_name(name):
    sources = reuse.installed_sources()
    sources[name] = (sources[name] or "") + "    # a patch release changed this\n"
    assert name in (reuse.refusal("12.3.2", sources) or "")
    sources[name] = None  # no source to compare (a frozen build)
    assert "cannot be read" in (reuse.refusal("12.3.2", sources) or "")


def test_apply_refuses_in_one_line_and_leaves_mitmproxy_stock(stock_afterwards, monkeypatch, caplog):
    def register_connection(self, command):  # someone else's version of a method the change relies on
        yield from ()

    monkeypatch.setattr(HttpLayer, "register_connection", register_connection)
    with caplog.at_level(logging.WARNING, logger="broker"):
        assert reuse.apply() is False
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP/2 upstream connection reuse not applied: mitmproxy 12.3.1's HttpLayer.register_connection differs "
        "from 12.3.1's; each HTTP/2 call to an HTTP/1.1 upstream gets its own upstream connection, as in stock "
        "mitmproxy"]
    assert not reuse.applied()
    assert "mark_done" not in Http1Client.__dict__ and HttpLayer.get_connection is STOCK_GET_CONNECTION


def test_apply_refuses_when_someone_overrode_the_upstream_side(stock_afterwards, monkeypatch):
    def mark_done(self, *, request=False, response=False):
        yield from Http1Connection.mark_done(self, request=request, response=response)

    monkeypatch.setattr(Http1Client, "mark_done", mark_done, raising=False)
    assert reuse.apply() is False
    assert Http1Client.mark_done is mark_done and HttpLayer.get_connection is STOCK_GET_CONNECTION


def test_apply_once_and_remove(stock_afterwards):
    assert reuse.apply() is True
    patched = (Http1Client.mark_done, HttpLayer.get_connection)
    assert patched[0] is not STOCK_MARK_DONE and patched[1] is not STOCK_GET_CONNECTION
    assert reuse.apply() is True  # a second call changes nothing (no wrapper around the wrapper)
    assert (Http1Client.mark_done, HttpLayer.get_connection) == patched
    assert Http1Connection.mark_done is STOCK_MARK_DONE  # what the client side (Http1Server) runs stays stock
    reuse.remove()
    assert Http1Client.mark_done is STOCK_MARK_DONE and not reuse.applied()


def _exchange(response_headers: dict[str, str], *, method: str = "GET", response_version: str = "HTTP/1.1"):
    request = http.Request.make(method, "https://h1only.upstream.example/x")
    request.http_version = "HTTP/2.0"  # as an HTTP/2 client's request reaches Http1Client
    response = http.Response.make(200, b"body")
    del response.headers["content-length"]
    response.http_version = response_version
    response.headers.update(response_headers)
    return request, response


@pytest.mark.parametrize(("headers", "method", "response_version", "closes"), [
    ({"Content-Length": "4"}, "GET", "HTTP/1.1", False),
    ({"Transfer-Encoding": "chunked"}, "GET", "HTTP/1.1", False),
    ({}, "HEAD", "HTTP/1.1", False),  # no body at all
    ({}, "GET", "HTTP/1.1", True),  # no length: read until EOF
    ({"Content-Length": "4", "Connection": "close"}, "GET", "HTTP/1.1", True),
    ({"Content-Length": "4", "Connection": "keep-alive, Close"}, "GET", "HTTP/1.1", True),
    ({"Content-Length": "4"}, "GET", "HTTP/1.0", True),  # HTTP/1.0 without keep-alive
    ({"Content-Length": "4", "Connection": "keep-alive"}, "GET", "HTTP/1.0", False),
    ({"Content-Length": "4, 5"}, "GET", "HTTP/1.1", True),  # no telling where the body ends
])
def test_the_http1_rule_for_ending_a_connection(headers, method, response_version, closes):
    assert reuse.closes_after(*_exchange(headers, method=method, response_version=response_version)) is closes


@pytest.mark.parametrize("status", [100, 102, 103])
def test_an_interim_answer_ends_it(status):
    """mitmproxy 12 takes a 1xx for the final answer; the real one follows on the connection, for this request."""
    request, response = _exchange({"Content-Length": "0"})
    response.status_code = status
    assert reuse.closes_after(request, response) is True


def test_a_request_that_says_connection_close_ends_it_too():
    request, response = _exchange({"Content-Length": "4"})
    request.headers["Connection"] = "close"
    assert reuse.closes_after(request, response) is True


def test_only_broker_runs_process_imports_it():
    """`mitmdump -s addons/connector_journal.py` must never get the change: nothing it loads imports the module."""
    graph = import_graph()
    importers = {name for name, deps in graph.items() if "broker.proxy.h2_upstream_reuse" in deps}
    assert importers == {"broker.proxy.runner"}
    seen, todo = set(), ["addons.connector_journal", "broker.proxy.addon"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(d for d in graph.get(name, ()) if d in graph)
    assert "broker.proxy.h2_upstream_reuse" not in seen and "broker.proxy.runner" not in seen
