"""Playback and diff end to end: the demo agent recorded through a real broker, then run again
against `broker run --playback` (no call reaches the upstreams), unchanged (diff exit 0) and changed
(diff exit 1, the unmatched call answered 502)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.support.broker_harness import BIN, ROOT, BrokerProcess
from tests.support.upstreams import Upstream, big_body_sha256

_spec = importlib.util.spec_from_file_location("demo_agent", ROOT / "scripts" / "demo_agent.py")
assert _spec is not None and _spec.loader is not None
demo_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_agent)
AGENT = demo_agent.AGENT
CHANGED_AGENT = AGENT.replace('f"Triaged: {msg', 'f"Triaged (v2): {msg').replace(
    'print("agent: done")',
    'r = c.get(f"{gmail}/labels", headers=auth)\n    print("labels", r.status_code, r.headers.get("x-broker-error"))\n'
    '    print("agent: done")',
)


BIG = 3 << 20
BIG_AGENT = f"""
import hashlib, httpx, os
with httpx.Client(verify=os.environ["SSL_CERT_FILE"], timeout=60) as c:
    auth = {{"Authorization": "Bearer ya29.demo"}}
    body = bytes(range(256)) * (2 << 12)  # 2 MiB upload, over the spill threshold
    up = c.post("https://www.googleapis.com/upload/drive/v3/files?uploadType=media", content=body,
                headers={{**auth, "Content-Type": "application/octet-stream"}})
    down = c.get("https://www.googleapis.com/drive/v3/files/big?alt=media&size={BIG}", headers=auth)
    print(up.status_code, down.status_code, hashlib.sha256(down.content).hexdigest())
"""


def run_agent(broker: BrokerProcess, session: str, code: str) -> str:
    out = subprocess.run(
        [str(BIN / "broker"), "env", "--listen", f"127.0.0.1:{broker.port}", "--confdir", str(broker.confdir),
         "--session", session, "--agent", "triage-bot"], capture_output=True, text=True, check=True,
    ).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.strip("'")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"agent failed:\n{r.stderr}\nbroker output:\n{broker.output.decode(errors='replace')}"
    return r.stdout


def broker(*args: str, vault) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "broker"), *args, "--vault", str(vault)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("playback")
    vault = tmp / "vault"
    with Upstream() as upstream:
        (tmp / "rec").mkdir()
        with BrokerProcess(tmp / "rec", upstream, vault=vault) as rec:
            assert "agent: done" in run_agent(rec, "incident", AGENT)
            assert len(rec.entries("incident", 4)) == 4
            assert run_agent(rec, "incident-big", BIG_AGENT).split()[:2] == ["200", "200"]
            assert len(rec.entries("incident-big", 2)) == 2
        yield tmp, vault, upstream


@pytest.mark.parametrize("recorder", ["process", "inline"])
def test_playback_of_the_same_agent_matches(recorded, recorder):
    tmp, vault, upstream = recorded
    seen = len(upstream.requests)
    session = f"rerun-{recorder}"
    (tmp / session).mkdir()
    with BrokerProcess(tmp / session, upstream, "--playback", "incident", "--recorder", recorder, vault=vault) as pb:
        assert "agent: done" in run_agent(pb, session, AGENT)
        entries = pb.entries(session, 4)
    assert len(upstream.requests) == seen  # nothing reached the platform
    assert [e["request"]["playback_of"] for e in entries] == [f"incident#{i}" for i in range(1, 5)]
    assert [e["response"]["status"] for e in entries] == [200, 200, 200, 200]
    d = broker("diff", "incident", session, vault=vault)
    assert d.returncode == 0, d.stdout + d.stderr
    assert "same calls, same statuses" in d.stdout
    assert broker("verify", session, vault=vault).returncode == 0


def test_playback_of_a_changed_agent_differs(recorded):
    tmp, vault, upstream = recorded
    seen = len(upstream.requests)
    (tmp / "changed").mkdir()
    with BrokerProcess(tmp / "changed", upstream, "--playback", "incident", vault=vault) as pb:
        out = run_agent(pb, "rerun-changed", CHANGED_AGENT)
        entries = pb.entries("rerun-changed", 5)
    assert len(upstream.requests) == seen
    assert "labels 502 playback: unmatched call: no gmail call GET to this URL" in out
    slack = entries[3]
    assert slack["response"]["status"] == 502 and "playback_of" not in slack["request"]
    assert b"differ in request body" in (slack["response"]["body"] or "").encode()
    d = broker("diff", "incident", "rerun-changed", vault=vault)
    assert d.returncode == 1, d.stdout + d.stderr
    assert "~ seq 4 / seq 4: request_body_sha256, status differ" in d.stdout
    assert "+ seq 5 only in rerun-changed: gmail read GET https://gmail.googleapis.com/gmail/v1/users/me/labels" \
        in d.stdout
    j = broker("diff", "incident", "rerun-changed", "--json", vault=vault)
    assert j.returncode == 1 and '"same":false' in j.stdout


def test_playback_refuses_a_missing_session_and_its_own_name(recorded):
    _, vault, _ = recorded
    r = subprocess.run([str(BIN / "broker"), "run", "--vault", str(vault), "--listen", "127.0.0.1:0",
                        "--playback", "nope"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no session 'nope'" in r.stderr
    r = subprocess.run([str(BIN / "broker"), "run", "--vault", str(vault), "--listen", "127.0.0.1:0",
                        "--playback", "incident", "--session", "incident"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "another --session" in r.stderr


class MitmdumpPlayback(BrokerProcess):
    """Stock mitmdump with the playback and journal scripts, in the given order."""

    def __init__(self, tmp, upstream, scripts: list[str], *, vault) -> None:
        super().__init__(tmp, upstream, flavour="mitmdump", vault=vault)
        self.scripts = scripts

    def command(self) -> list[str]:
        cmd = [str(BIN / "mitmdump"), "--set", "flow_detail=0", "--listen-host", "127.0.0.1", "--listen-port", "0"]
        for script in self.scripts:
            cmd += ["-s", str(ROOT / "addons" / script)]
        sets = [f"vault={self.vault}", f"confdir={self.confdir}", "broker_playback=incident",
                f"ssl_verify_upstream_trusted_ca={self.upstream.ca_pem}"]
        sets += [f"broker_resolve={h}=127.0.0.1:{self.upstream.port}" for h in self.upstream.hosts]
        for s in sets:
            cmd += ["--set", s]
        return cmd


PROBE = '''
import httpx, os
with httpx.Client(verify=os.environ["SSL_CERT_FILE"], timeout=30) as c:
    r = c.get("https://gmail.googleapis.com/gmail/v1/users/me/messages", params={"q": "is:unread"},
              headers={"Authorization": "Bearer ya29.other"})
    print(r.status_code, r.headers.get("x-broker-error"))
'''


def test_stock_mitmdump_plays_back_with_playback_loaded_first(recorded):
    tmp, vault, upstream = recorded
    seen = len(upstream.requests)
    (tmp / "dump").mkdir()
    with MitmdumpPlayback(tmp / "dump", upstream, ["playback.py", "connector_journal.py"], vault=vault) as pb:
        assert run_agent(pb, "rerun-mitmdump", PROBE).strip() == "200 None"
        (entry,) = pb.entries("rerun-mitmdump", 1)
    assert entry["request"]["playback_of"] == "incident#1"
    (tmp / "dump-wrong").mkdir()
    # In the wrong order the journal could not see what playback decides: the addon refuses, and
    # mitmdump, which stops on an error logged at start-up, exits.
    wrong = MitmdumpPlayback(tmp / "dump-wrong", upstream, ["connector_journal.py", "playback.py"], vault=vault)
    try:
        wrong.start()
        assert wrong.proc is not None and wrong.proc.wait(30) != 0
    finally:
        wrong.stop()
    assert b"playback: load addons/playback.py before addons/connector_journal.py" in wrong.output
    assert len(upstream.requests) == seen


def test_big_bodies_play_back_whole(recorded):
    """A spilled upload body is matched by its blob, and a streamed 3 MiB download is answered whole."""
    tmp, vault, upstream = recorded
    seen = len(upstream.requests)
    (tmp / "big").mkdir()
    with BrokerProcess(tmp / "big", upstream, "--playback", "incident-big", vault=vault) as pb:
        out = run_agent(pb, "rerun-big", BIG_AGENT)
        entries = pb.entries("rerun-big", 2)
    assert out.split() == ["200", "200", big_body_sha256(BIG)]
    assert len(upstream.requests) == seen
    assert [e["request"]["playback_of"] for e in entries] == ["incident-big#1", "incident-big#2"]
    original = {e["seq"]: e for e in pb.entries("incident-big")}
    assert entries[0]["request"]["body"] == original[1]["request"]["body"]  # the same blob reference
    assert entries[1]["response"]["body"] == original[2]["response"]["body"]
    assert entries[1]["response"]["body"]["size"] == BIG
    assert broker("diff", "incident-big", "rerun-big", vault=vault).returncode == 0
