"""Issue 21 units: the destination decides (broker/proxy/destination.py), --pass-unknown patterns
(broker/proxy/passed_hosts.py), and the proxy variables `broker env` exports."""

from __future__ import annotations

import logging

import pytest
from mitmproxy import http

from broker.exec.environment import proxy_variables
from broker.proxy.destination import misdirected
from broker.proxy.passed_hosts import PassedHosts, check_patterns


def _req(url: str, headers: list[tuple[bytes, bytes]], authority: str = "") -> http.Request:
    req = http.Request.make("POST", url, b"")
    req.headers.fields = tuple(headers)  # as sent (make would put the URL's host in Host)
    req.authority = authority
    return req


@pytest.mark.parametrize("host", [b"gmail.googleapis.com", b"GMAIL.googleapis.COM", b"gmail.googleapis.com.",
                                  b"gmail.googleapis.com:443"])
def test_spellings_of_the_destination_are_accepted(host):
    assert misdirected(_req("https://gmail.googleapis.com/x", [(b"Host", host)]), "gmail.googleapis.com.") is None


@pytest.mark.parametrize(("headers", "authority", "sni"), [
    ([(b"Host", b"evil.example")], "", None),
    ([(b"Host", b"gmail.googleapis.com:8443")], "", None),  # another port is another destination
    ([(b"Host", b"gmail.googleapis.com"), (b"Host", b"evil.example")], "", None),  # a second Host header
    ([(b"Host", b"gmail.googleapis.com")], "evil.example", None),  # absolute-form target
    ([(b"Host", b"gmail.googleapis.com")], "", "evil.example"),  # TLS SNI
    ([(b"Host", b"gmail.googleapis.com@evil")], "", None),
])
def test_a_name_for_another_destination_is_misdirected(headers, authority, sni):
    why = misdirected(_req("https://gmail.googleapis.com/x", headers, authority), sni)
    assert why is not None and "gmail.googleapis.com:443" in why


def test_an_address_sni_and_no_names_are_not_misdirected():
    assert misdirected(_req("https://10.0.0.1/x", []), "10.0.0.1") is None
    assert misdirected(_req("https://10.0.0.1/x", [(b"Host", b"gmail.googleapis.com")]), None) is not None


def test_pass_unknown_patterns(caplog):
    passed = PassedHosts(["Jira.Example.", "*.corp.example"])
    with caplog.at_level(logging.WARNING, logger="broker"):
        assert passed.passes("jira.example") and passed.passes("JIRA.example:443")
        assert passed.passes("wiki.corp.example") and not passed.passes("corp.example")
        assert not passed.passes("notion.example")
    assert sum("jira.example" in r.getMessage() for r in caplog.records) == 1  # said once per host
    assert passed.summary() == ("passed unrecorded (--pass-unknown): 3 call(s) to 2 host(s): jira.example (2), "
                                "wiki.corp.example (1)")
    assert PassedHosts(["ALL"]).passes("anything.example")
    assert not PassedHosts().passes("anything.example") and PassedHosts().summary() is None


@pytest.mark.parametrize("bad", ["", "https://x.example/", "a b", "user@host"])
def test_pass_unknown_refuses_what_names_no_host(bad):
    with pytest.raises(ValueError, match="--pass-unknown"):
        check_patterns([bad])


def test_broker_env_tells_git_to_send_the_session():
    assert proxy_variables("http://s:a@127.0.0.1:8080")["GIT_HTTP_PROXY_AUTHMETHOD"] == "basic"


def test_a_remembered_verdict_is_the_verdict_for_exactly_those_names():
    """The accepted names are remembered (broker.proxy.destination): the same request again is accepted,
    and any one name changed is judged anew, never taken for the remembered request."""
    ok = _req("https://gmail.googleapis.com/x", [(b"Host", b"gmail.googleapis.com")])
    assert misdirected(ok, "gmail.googleapis.com") is None
    assert misdirected(ok, "gmail.googleapis.com") is None  # remembered
    assert misdirected(ok, "evil.example") is not None  # another SNI
    assert misdirected(_req("https://gmail.googleapis.com/x", [(b"Host", b"evil.example")]),
                       "gmail.googleapis.com") is not None  # another Host
    assert misdirected(_req("https://gmail.googleapis.com/x", [(b"Host", b"gmail.googleapis.com"),
                                                               (b"Host", b"evil.example")]),
                       "gmail.googleapis.com") is not None  # one more Host
    assert misdirected(_req("https://gmail.googleapis.com/x", [(b"Host", b"gmail.googleapis.com")], "evil.example"),
                       "gmail.googleapis.com") is not None  # an absolute-form target
    other_port = _req("https://gmail.googleapis.com:8443/x", [(b"Host", b"gmail.googleapis.com")])
    assert misdirected(other_port, "gmail.googleapis.com") is not None  # the destination's port
    for _ in range(2):  # refused requests are judged every time, the same way
        assert "evil.example" in misdirected(_req("https://gmail.googleapis.com/x", [(b"Host", b"evil.example")]), None)
