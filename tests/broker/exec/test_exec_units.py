"""`broker exec`'s parts that need no root: packet and netlink parsing, the rules, the files written
inside, the variables, the DNS relay, the upstream-name addon and the state files."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct

import pytest
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import tflow

from broker.cli.exec import exit_code
from broker.exec import capabilities, cleanup, firewall, names, refusals
from broker.exec.dns_relay import DnsRelay
from broker.exec.environment import CA_VARIABLES, client_environment, proxy_url
from broker.proxy.upstream_name import UpstreamName


def ipv4_packet(proto: int, dst: str, port: int) -> bytes:
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, proto, 0, socket.inet_aton("10.253.0.1"),
                       socket.inet_aton(dst))
    return head + struct.pack("!HH", 40000, port) + b"\0" * 16


def ipv6_packet(proto: int, dst: str, port: int) -> bytes:
    head = struct.pack("!IHBB16s16s", 6 << 28, 20, proto, 64, socket.inet_pton(socket.AF_INET6, "fd62::1"),
                       socket.inet_pton(socket.AF_INET6, dst))
    return head + struct.pack("!HH", 40000, port) + b"\0" * 16


def test_packets_parsed_to_protocol_destination_and_port() -> None:
    assert refusals.parse_packet(ipv4_packet(6, "192.0.2.10", 5432)) == refusals.Refusal("tcp", "192.0.2.10", 5432)
    assert str(refusals.parse_packet(ipv4_packet(17, "192.0.2.10", 53))) == "udp 192.0.2.10:53"
    assert str(refusals.parse_packet(ipv6_packet(6, "2001:db8::10", 22))) == "tcp [2001:db8::10]:22"
    assert str(refusals.parse_packet(ipv4_packet(1, "192.0.2.1", 0))) == "icmp 192.0.2.1"
    assert refusals.parse_packet(b"") is None and refusals.parse_packet(b"\x45\0") is None


def test_netlink_messages_with_several_packets_and_other_attributes() -> None:
    def message(packet: bytes) -> bytes:
        attrs = refusals._attr(10, b"broker-exec\0") + refusals._attr(refusals.NFULA_PAYLOAD, packet)
        body = struct.pack("=BBH", socket.AF_INET, 0, 0) + attrs
        return struct.pack("=IHHII", 16 + len(body), refusals.NFNL_SUBSYS_ULOG << 8, 0, 0, 0) + body

    data = message(ipv4_packet(6, "192.0.2.10", 5432)) + message(ipv4_packet(17, "192.0.2.11", 9999))
    assert [str(r) for r in refusals.parse_messages(data)] == ["tcp 192.0.2.10:5432", "udp 192.0.2.11:9999"]
    assert refusals.parse_messages(b"\0" * 8) == []


def test_ruleset_redirects_80_and_443_and_refuses_the_rest_after_logging() -> None:
    rules = firewall.ruleset(False, 41234).splitlines()
    assert "-A OUTPUT -p tcp -m multiport --dports 80,443 -j REDIRECT --to-ports 41234" in rules
    filt = rules[rules.index("*filter"):]
    order = [next(i for i, r in enumerate(filt) if key in r) for key in
             ("-d 127.0.0.0/8 -j ACCEPT", "ESTABLISHED", "NFLOG", "refused-tcp", "refused-udp", "refused-other")]
    assert order == sorted(order)
    assert "icmp6-port-unreachable" in firewall.ruleset(True, 1) and "::1/128" in firewall.ruleset(True, 1)


def test_refusal_counters_read_from_iptables_save() -> None:
    line = '[3:180] -A OUTPUT -p tcp -m comment --comment broker-exec-refused-tcp -j REJECT --reject-with tcp-reset'
    m = firewall._COUNTER.match(line)
    assert m and (m.group(1), m.group(2)) == ("3", "tcp")


def test_files_inside_keep_search_options_and_map_resolved_hosts_to_the_namespace() -> None:
    host = "# c\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\nsearch corp.example\noptions ndots:2\n"
    assert names.host_nameservers(host) == ["10.0.0.2", "fe80::1"]
    assert names.host_nameservers("") == ["127.0.0.1"]
    assert names.inner_resolv_conf(host) == "nameserver 127.0.0.1\nsearch corp.example\noptions ndots:2\n"
    from broker.exec.synthetic_names import SyntheticNames

    hosts = names.inner_hosts("127.0.0.1 localhost\n", SyntheticNames(["slack.com", "api.github.com", "Slack.com."]))
    assert hosts.splitlines()[0] == "127.0.0.1 localhost"
    assert hosts.splitlines()[-2:] == ["6.253.0.1 api.github.com", "6.253.0.2 slack.com"]


def test_environment_sets_every_ca_variable_and_clears_what_goes_around() -> None:
    base = {"PATH": "/bin", "NO_PROXY": "*", "ALL_PROXY": "socks5://x", "HTTPS_PROXY": "http://other"}
    env = client_environment(base, "/b.pem", None)
    assert {k: env[k] for k in CA_VARIABLES} == dict.fromkeys(CA_VARIABLES, "/b.pem")
    assert "HTTPLIB2_CA_CERTS" in env and "GIT_SSL_CAINFO" in env and "NODE_EXTRA_CA_CERTS" in env
    assert not {"NO_PROXY", "ALL_PROXY", "HTTPS_PROXY"} & set(env) and env["PATH"] == "/bin"
    with_proxy = client_environment(base, "/b.pem", proxy_url("127.0.0.1", 9, "s 1", "a"))
    assert with_proxy["HTTPS_PROXY"] == with_proxy["http_proxy"] == "http://s%201:a@127.0.0.1:9"


def test_exit_code_of_a_signalled_command() -> None:
    assert exit_code(7) == 7 and exit_code(-15) == 143


def test_capabilities_read_from_proc_status() -> None:
    assert capabilities.effective_capabilities("Name:\tx\nCapEff:\t0000000000201000\n") == (1 << 12) | (1 << 21)
    assert capabilities.effective_capabilities("Name:\tx\n") == 0


def dns_query(name: str, qtype: int = 1, *, edns: bool = False, qid: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split(".")) + b"\0"
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0) if edns else b""
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0) + labels + struct.pack("!HH", qtype, 1) + opt


def test_dns_relay_answers_usual_queries_unchanged_and_drops_the_rest() -> None:
    from broker.exec.dns_query import DnsPolicy

    async def run() -> None:
        loop = asyncio.get_running_loop()
        got: list[bytes] = []
        told: list[tuple] = []

        class Server(asyncio.DatagramProtocol):
            def connection_made(self, transport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr) -> None:
                got.append(data)
                self.transport.sendto(b"answer:" + data, addr)

        server, _ = await loop.create_datagram_endpoint(Server, local_addr=("127.0.0.1", 0))
        port = server.get_extra_info("sockname")[1]
        inside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        inside.bind(("127.0.0.1", 0))
        inside.setblocking(False)
        relay = DnsRelay(inside, ["127.0.0.1"], port=port, policy=DnsPolicy("connectors", ["allowed.example"]),
                         on_query=lambda *q: told.append(q))
        await relay.start()
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.settimeout(5)
        query = dns_query("allowed.example", 28, edns=True)
        for hostile in (b"\x12\x34query", dns_query("secret-token.evil.example", 16),
                        dns_query("allowed.example", 255), dns_query("allowed.example") + b"extra"):
            client.sendto(hostile, inside.getsockname())
        client.sendto(dns_query("gmail.googleapis.com"), inside.getsockname())
        client.sendto(dns_query("token1234.evil.example"), inside.getsockname())
        client.sendto(query, inside.getsockname())
        answers = [await loop.run_in_executor(None, client.recv, 512) for _ in range(3)]
        assert b"answer:" + query in answers  # relayed byte for byte, the answer likewise
        refusals = [a for a in answers if a != b"answer:" + query]
        assert len(refusals) == 2 and all(struct.unpack("!H", a[2:4])[0] & 0x000F == 5 for a in refusals)
        await relay.stop()
        server.close()
        client.close()
        assert query in got and not any(b"secret-token" in g or b"token1234" in g or b"query" in g for g in got)
        assert ("allowed.example", "AAAA", None) in told
        assert any(q[0] == "gmail.googleapis.com" and q[2] for q in told)  # no connector lookup given here
        assert any(q[0] == "token1234.evil.example" and q[2] for q in told)
        assert sum(1 for q in told if q[0] == "" and q[2]) == 4  # not DNS, TXT, ANY, trailing bytes: dropped

    asyncio.run(run())


def test_a_refused_name_gets_refused_at_once() -> None:
    from broker.exec.dns_query import parse_query, refused_answer

    q = dns_query("x.example", edns=True)
    answer = refused_answer(q)
    assert answer[:2] == q[:2] and struct.unpack("!H", answer[2:4])[0] & 0x800F == 0x8005
    assert parse_query(q).name == "x.example"


@pytest.mark.parametrize(("host_header", "sni", "expected"), [
    ("gmail.googleapis.com", "gmail.googleapis.com", "gmail.googleapis.com"),
    ("Slack.com:443", None, "slack.com"),
    (None, "api.github.com", "api.github.com"),
    ("192.0.2.7", None, "10.253.0.1"),  # an address: the original destination stays
    (None, None, "10.253.0.1"),
])
def test_transparent_requests_go_to_the_host_they_name(host_header, sni, expected) -> None:
    f = tflow.tflow()
    f.client_conn.proxy_mode = ProxyMode.parse("transparent")
    f.client_conn.sni = sni
    f.request.data.host = "10.253.0.1"
    if host_header is None:
        f.request.headers.pop("host", None)
    else:
        f.request.headers["host"] = host_header
    before = f.request.headers.get("host")
    UpstreamName().requestheaders(f)
    assert f.request.host == expected
    assert f.request.headers.get("host") == before  # the Host header is left as the client sent it


def test_regular_mode_requests_are_left_alone() -> None:
    f = tflow.tflow()
    f.request.headers["host"] = "elsewhere.example"
    UpstreamName().requestheaders(f)
    assert f.request.host == "address"


def test_stale_state_is_recognised_by_pid_and_start_time(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BROKER_EXEC_STATE_DIR", str(tmp_path))
    me = {"pid": os.getpid(), "start_time": cleanup.process_start_time(os.getpid())}
    assert cleanup._owner_alive(me)
    assert not cleanup._owner_alive({**me, "start_time": "1"})  # the pid was reused
    assert not cleanup._owner_alive({"pid": 2 ** 22 + 1, "start_time": "1"})
    # a stale claim whose namespace is already gone: only its files are removed
    claim_file = tmp_path / f"{cleanup.NAME_PREFIX}999999.json"
    claim_file.write_text(json.dumps({"pid": 2 ** 22 + 1, "start_time": "1"}))
    assert cleanup.recover_stale() == [f"{cleanup.NAME_PREFIX}999999"]
    assert not claim_file.exists()


def test_code_under_tmp_is_bound_back_read_only(monkeypatch) -> None:
    """A checkout under /tmp (as CI makes) stays visible to COMMAND: the private /tmp would hide it."""
    import json

    from broker.exec import confinement

    monkeypatch.setattr(confinement, "code_directories", lambda: ["/opt/app", "/run/x/venv", "/tmp/ci"])
    argv = confinement.Confinement(uid=65534, gid=65534).argv(["true"])
    plan = json.loads(next(a for a in argv if a.startswith("{")))
    assert plan["read_only"] == ["/opt/app", "/run/x/venv", "/tmp/ci"]
    assert plan["binds"] == ["/run/x/venv", "/tmp/ci"]  # bound again after the tmpfs (read-only, confine.py)
