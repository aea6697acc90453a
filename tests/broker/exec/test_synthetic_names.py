"""The addresses `--resolve` names get inside `broker exec`'s namespace: public to an SSRF guard, mapped
back to their name by the broker, answered by the DNS relay without asking a name server."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import tflow

from broker.exec.dns_query import parse_query, synthetic_answer
from broker.exec.synthetic_names import SYNTHETIC_V4, SyntheticNames
from broker.proxy.upstream_name import UpstreamName
from tests.broker.exec.test_exec_units import dns_query

# Special-purpose ranges that one SSRF guard or another refuses (mcp-server-fetch's list, ipaddr.js's
# reserved/as112/amt ranges, Python's non-global tables): the synthetic range must overlap none of them.
REFUSED_SOMEWHERE = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
                     "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24",
                     "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
                     "224.0.0.0/4", "240.0.0.0/4")


def private_address_guard(address: str) -> None:
    """What SSRF-guarded clients do with a resolved address (advocate, mcp-server-fetch, gradio's safehttpx)."""
    ip = ipaddress.ip_address(address)
    if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast or not ip.is_global:
        raise PermissionError(f"{address}: not a public address")


def test_each_name_gets_its_own_public_address_and_back() -> None:
    synthetic = SyntheticNames(["slack.com", "API.github.com.", "slack.com"])
    assert synthetic.by_name == {"api.github.com": "6.253.0.1", "slack.com": "6.253.0.2"}
    assert synthetic.name_of("6.253.0.2") == "slack.com" and synthetic.name_of("6.253.0.9") is None
    for address in synthetic.by_name.values():
        private_address_guard(address)
    for block in REFUSED_SOMEWHERE:
        assert not SYNTHETIC_V4.overlaps(ipaddress.ip_network(block)), block


def test_the_namespace_address_is_what_guards_refused() -> None:
    from broker.exec.netns import ADDRESS_V4

    with pytest.raises(PermissionError):
        private_address_guard(ADDRESS_V4)


@pytest.mark.parametrize(("host_header", "sni", "expected"), [
    (None, None, "slack.com"),  # named nothing: the name the address stood for
    ("api.github.com", None, "api.github.com"),  # the name the request carries decides
    (None, "api.github.com", "api.github.com"),
])
def test_a_transparent_request_to_a_synthetic_address_goes_to_a_name(host_header, sni, expected) -> None:
    synthetic = SyntheticNames(["slack.com", "api.github.com"])
    f = tflow.tflow()
    f.client_conn.proxy_mode = ProxyMode.parse("transparent")
    f.client_conn.sni = sni
    f.request.data.host = synthetic.by_name["slack.com"]
    f.request.headers.pop("host", None)
    if host_header:
        f.request.headers["host"] = host_header
    UpstreamName().requestheaders(f)
    synthetic.requestheaders(f)
    assert f.request.host == expected
    assert f.request.headers.get("host") == host_header


def test_regular_mode_is_left_alone() -> None:
    synthetic = SyntheticNames(["slack.com"])
    f = tflow.tflow()
    f.request.data.host = "6.253.0.1"
    synthetic.requestheaders(f)
    assert f.request.host == "6.253.0.1"


def test_the_relay_answers_a_resolve_name_itself() -> None:
    q = dns_query("slack.com", edns=True)
    a = synthetic_answer(q, parse_query(q).qtype, "6.253.0.2")
    _id, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", a[:12])
    assert a[:2] == q[:2] and flags & 0x800F == 0x8000 and (qd, an, ns, ar) == (1, 1, 0, 0)
    assert a.endswith(struct.pack("!HHIH", 1, 1, 60, 4) + bytes([6, 253, 0, 2]))
    q6 = dns_query("slack.com", 28)
    none = synthetic_answer(q6, "AAAA", "6.253.0.2")
    assert struct.unpack("!HHHHHH", none[:12])[3] == 0 and none[12:] == q6[12:]  # NODATA, the question kept
