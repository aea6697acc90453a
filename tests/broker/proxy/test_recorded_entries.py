"""What the recording service writes for a fixed set of calls, compared with the entries recorded
before issue 30's cuts of the proxy path (branch proxy30: the remembered destination verdicts, the key
file's place, `RouteTable.find`, the possessive assignment trigger): each of them must leave every
entry as it was, redaction of secrets in headers, query, bodies and URLs included.

The expected entries (`data/recorded_entries.json`) were written by main at f03bd3c, before those cuts,
with `python -m tests.broker.proxy.test_recorded_entries`; a deliberate change of what is recorded
writes them again the same way (and says why in its commit).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from broker.proxy.service import Service
from broker.proxy.wire import Completion, RequestAhead, WholeCall
from journal.call import Call, Identity, Request, Response
from journal.record import Recorder

EXPECTED = Path(__file__).parent / "data" / "recorded_entries.json"
KEY = "5f" * 32  # the fingerprint key of this test's installation (journal/fingerprint_key.py)
TS = 1796220688.5

SECRETS = ("ya29.a0AfH6SMBx-test-access-token", "xoxb-1234567890-0987654321-abcdefABCDEF",
           "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "hunter2-password-value", "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
           "AIzaSyA-1234567890abcdefghijklmnopqrstu", "q-signature-secret-9f8e7d")


def _h(*pairs: tuple[str, str]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((k.encode(), v.encode()) for k, v in pairs)


def _json(value: object, indent: int | None = None) -> bytes:
    return json.dumps(value, indent=indent).encode()


def calls() -> list[Call]:
    """The calls, as the proxy hands them over (raw header fields, bodies as received)."""
    who = Identity("s1", "agent-a", None)
    labels = _json({"labels": [{"id": "INBOX", "name": "INBOX", "type": "system"},
                               {"id": "Label_1", "name": "work", "access_token": SECRETS[0]}]}, indent=2)
    pretty = _json({"ok": True, "note": "first line\n    export API_KEY=" + SECRETS[2] + "\n  password: " + SECRETS[3],
                    "nested": {"client_secret": SECRETS[3], "list": [1, 2.5, None, True]}}, indent=4)
    env_text = ("# settings\n  API_KEY=" + SECRETS[2] + "\n\t\tpassword = " + SECRETS[3] + "\n" + " " * 20
                + "token: " + SECRETS[4] + "\nplain text, no secret\n").encode()
    out = [
        Call(who, "gmail", Request("GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels?access_token="
                                   + SECRETS[0] + "&pageSize=5",
                                   _h(("Host", "gmail.googleapis.com"), ("Authorization", "Bearer " + SECRETS[0]),
                                      ("Accept", "application/json"), ("User-Agent", "python-httpx/0.29.0"))),
             Response(200, _h(("content-type", "application/json; charset=UTF-8"), ("content-encoding", "gzip"),
                              ("x-request-id", "3cf78a84"), ("set-cookie", "SID=" + SECRETS[5] + "; Secure")),
                      gzip.compress(labels, mtime=0))),
        Call(who, "slack", Request("POST", "https://slack.com/api/chat.postMessage",
                                   _h(("Host", "slack.com"), ("Authorization", "Bearer " + SECRETS[1]),
                                      ("Content-Type", "application/json; charset=utf-8")),
                                   _json({"channel": "#general", "text": "hello", "token": SECRETS[1]})),
             Response(200, _h(("content-type", "application/json; charset=utf-8")), pretty)),
        Call(who, "drive", Request("DELETE", "https://www.googleapis.com/drive/v3/files/trash",
                                   _h(("Authorization", "Bearer " + SECRETS[0]))), Response(204, ())),
        Call(who, "drive", Request("DELETE", "https://www.googleapis.com/drive/v3/files/1AbC",
                                   _h(("Authorization", "Bearer " + SECRETS[0]))), Response(204, ())),
        Call(who, "drive", Request("POST", "https://www.googleapis.com/drive/v3/files/1AbC/copy?key=" + SECRETS[5],
                                   _h(("Content-Type", "application/json")), _json({"name": "copy"})),
             Response(200, _h(("content-type", "application/json")), _json({"id": "2XyZ"}))),
        Call(who, "drive", Request("GET", "https://www.googleapis.com/drive/v3/files/1AbC?alt=media",
                                   _h(("Authorization", "Bearer " + SECRETS[0]))),
             Response(200, _h(("content-type", "text/plain")), env_text)),
        Call(Identity("s1", "agent-a", "alice"), "other",
             Request("POST", "https://api.example.com/v1/login?sig=" + SECRETS[6],
                     _h(("X-Api-Key", SECRETS[4]), ("Content-Type", "application/x-www-form-urlencoded")),
                     ("user=alice&password=" + SECRETS[3] + "&remember=1").encode()),
             Response(302, _h(("Location", "https://api.example.com/home?access_token=" + SECRETS[0] + "&x=1"),
                              ("Content-Type", "text/plain")), env_text)),
        Call(who, "github", Request("GET", "https://api.github.com/user/repos?per_page=2",
                                    _h(("Authorization", "token " + SECRETS[4]),
                                       ("Accept", "application/vnd.github+json"))),
             Response(200, _h(("content-type", "application/json")),
                      _json([{"name": "r1", "clone_url": f"https://x-access-token:{SECRETS[4]}@github.com/o/r1.git"},
                             {"name": "r2", "description": "\n  SECRET_KEY=" + SECRETS[2]}], indent=1))),
    ]
    return [Call(c.identity, c.connector, c.request, c.response, ts=TS + i) for i, c in enumerate(out)]


def recorded(vault: Path) -> list[dict]:
    """The entry fields the recording service appends for `calls()`: each call's request half sent
    ahead and its response after, as the proxy does, and once more whole (a call with no service)."""
    recorder = Recorder(vault, durable=False)
    service = Service(recorder)
    try:
        out = []
        for i, call in enumerate(calls(), 1):
            half = Call(call.identity, call.connector, call.request, None, ts=None)
            service.handle([RequestAhead(i, half)])
            service.prepare_pending()
            acks = service.handle([Completion(i, call.response, call.ts, None)])
            acks += service.handle([WholeCall(100 + i, call)])
            assert [a.outcome for a in acks] == ["ok", "ok"], acks
        from journal.reader import iter_entries
        from journal.vault import Vault

        for entry in iter_entries(Vault(vault), "s1"):
            out.append({k: v for k, v in entry.items() if k not in ("seq", "prev", "hash")})
        return out
    finally:
        recorder.close()


@pytest.fixture
def fixed_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "fp.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    monkeypatch.setenv("BROKER_FINGERPRINT_KEY_FILE", str(key))


def test_entries_are_recorded_as_before_the_cuts(tmp_path: Path, fixed_key: None) -> None:
    got = json.loads(json.dumps(recorded(tmp_path / "vault")))
    expected = json.loads(EXPECTED.read_text())
    assert len(got) == len(expected) == 2 * len(calls())
    for g, e in zip(got, expected, strict=True):
        assert g == e
    text = EXPECTED.read_text()
    for secret in SECRETS:  # and the entries hold none of the secrets
        assert secret not in text and secret not in json.dumps(got)


if __name__ == "__main__":  # write the expected entries with the code checked out
    with tempfile.TemporaryDirectory() as d:
        key_file = Path(d) / "fp.key"
        key_file.write_text(KEY + "\n")
        key_file.chmod(0o600)
        os.environ["BROKER_FINGERPRINT_KEY_FILE"] = str(key_file)
        entries = recorded(Path(d) / "vault")
    EXPECTED.parent.mkdir(exist_ok=True)
    EXPECTED.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"{len(entries)} entries written to {EXPECTED}\n")
