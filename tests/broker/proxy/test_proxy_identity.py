"""Who makes a call (broker.proxy.identity): proxy credentials, X-Broker-* headers, options; the
one implementation the HTTPS addon and the MCP gateway both read."""

from __future__ import annotations

import asyncio
import base64

import pytest
from mitmproxy import http

from broker.proxy.identity import NO_CLAIMS, BadProxyCredentials, Claims, parse_proxy_auth, take_identity
from journal.reader import iter_entries
from journal.vault import Vault


def basic(user_pass: bytes) -> bytes:
    return b"Basic " + base64.b64encode(user_pass)


def test_a_request_that_names_nobody_keeps_its_own_fields():
    fields = ((b"Host", b"gmail.googleapis.com"), (b"Authorization", b"Bearer x"))
    kept, claims = take_identity(fields)
    assert kept is fields and claims is NO_CLAIMS
    assert claims.resolve("opt-s", "opt-a", "") == ("opt-s", "opt-a", None)


def test_credentials_win_over_headers_and_both_are_taken_out():
    fields = ((b"Host", b"h"), (b"X-Broker-Session", b"from-header"), (b"Proxy-Authorization", basic(b"s1:agent1")),
              (b"x-broker-agent", b"header-agent"), (b"X-Broker-Principal", b"alice@example.com"), (b"Accept", b"*/*"))
    kept, claims = take_identity(fields)
    assert kept == ((b"Host", b"h"), (b"Accept", b"*/*"))  # nothing of the identity goes upstream
    assert claims.credentials == ("s1", "agent1")
    assert claims.resolve("opt", "opt", "opt-p") == ("s1", "agent1", "alice@example.com")


def test_a_header_that_lies_counts_once_and_never_over_the_credentials():
    # sent twice (a client library adding its own after the agent's): the first counts, both are removed
    twice = ((b"X-Broker-Session", b"first"), (b"X-BROKER-SESSION", b"second"), (b"Host", b"h"))
    kept, claims = take_identity(twice)
    assert kept == ((b"Host", b"h"),) and claims.session == "first"
    # a header claiming another session than the tunnel's credentials: the credentials decide
    lying = Claims(session="someone-else", agent="other-agent")
    assert lying.resolve("opt", "opt", connection=("s1", "a1")) == ("s1", "a1", None)
    # credentials with an empty part leave that part to the header, then the option
    assert Claims(session="hs", credentials=("", "")).resolve("opt", "") == ("hs", "unknown", None)
    # the same reading for text fields (the MCP gateway), where Proxy-Authorization is hop-by-hop
    kept, claims = take_identity([("x-broker-agent", "g1"), ("X-Broker-Agent", "g2"), ("Proxy-Authorization", "x")],
                                 proxy_auth=False)
    assert kept == (("Proxy-Authorization", "x"),) and claims.agent == "g1" and claims.credentials is None


@pytest.mark.parametrize("value", [
    b"Basic !!!not-base64!!!", b"Basic " + base64.b64encode(b"s\xff:a"), b"Bearer abc", b"", b"Basic",
])
def test_unreadable_credentials_are_refused_never_defaulted(value):
    with pytest.raises(BadProxyCredentials, match="Basic base64"):
        take_identity(((b"Proxy-Authorization", value),))
    with pytest.raises(BadProxyCredentials):
        parse_proxy_auth(value.decode("latin-1"))


def test_non_ascii_header_values_are_read_as_wire_text():
    _, claims = take_identity(((b"X-Broker-Agent", "agent-é".encode()), (b"X-Broker-Session", b"caf\xe9")))
    assert claims.agent == "agent-é" and claims.session == "café"  # UTF-8, else Latin-1 (nothing lost)


def _flow(headers):
    from mitmproxy.test import tflow

    f = tflow.tflow()
    f.client_conn.sni = "gmail.googleapis.com"  # not tflow's "address": the SNI must name the destination
    f.request = http.Request.make("GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels", b"", headers)
    return f


def test_the_addon_refuses_bad_credentials_and_records_the_credentials_identity(tmp_path):
    from mitmproxy.test import taddons

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline", broker_session="opt")
        bad = _flow([(b"Host", b"gmail.googleapis.com"), (b"Proxy-Authorization", b"Basic %%%")])
        addon.requestheaders(bad)
        assert bad.response is not None and bad.response.status_code == 400
        asyncio.run(addon.response(bad))  # issue 21: the refusal has its entry, in the default session
        (refused,) = iter_entries(Vault(tmp_path / "vault"), "opt")
        assert (refused["response"]["status"], refused["response"]["answered_by"]) == (400, "capture")
        assert "proxy credentials" in refused["response"]["error"]
        assert [k for k, _ in refused["request"]["headers"]] == ["Host", "content-length"]
        f = _flow([(b"Host", b"gmail.googleapis.com"), (b"X-Broker-Session", b"liar"),
                   (b"Proxy-Authorization", basic(b"s-cred:agent-cred")), (b"X-Broker-Principal", b"bob")])
        addon.requestheaders(f)
        addon.request(f)
        assert [k for k, _ in f.request.headers.fields] == [b"Host", b"content-length"]  # as it goes upstream
        f.response = http.Response.make(200, b"{}", [(b"Content-Type", b"application/json")])
        addon.responseheaders(f)
        asyncio.run(addon.response(f))
    (entry,) = iter_entries(Vault(tmp_path / "vault"), "s-cred")
    assert (entry["agent"], entry["principal"]) == ("agent-cred", "bob")
    assert entry["response"]["answered_by"] == "upstream"
    assert [k for k, _ in entry["request"]["headers"]] == ["Host", "content-length"]
    assert not (tmp_path / "vault" / "journal" / "liar.jsonl").exists()
