"""Issue 23 corpus, a slice through the real `broker run`: samples of every shape sent by a real client in
headers, query, JSON and form bodies; then every file under the broker's folder (vault, blobs, confdir,
logs), everything it printed, and what every reader makes of the vault (show, search, the exports, the
inspector's answers) is scanned for the secrets (raw, URL-encoded, JSON-escaped, base64 at three
alignments): none may be found."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import httpx
import pytest

from journal.fingerprint_key import KEY_FILE_ENV
from tests.support.broker_harness import BrokerProcess
from tests.support.secret_samples import keyword_samples, samples, written_forms
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
SLACK = "https://slack.com/api"
DRIVE = "https://www.googleapis.com/drive/v3"


def test_broker_run_writes_no_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "fingerprint.key"))
    corpus = samples(per_shape=1, seed=31)
    keywords = keyword_samples(seed=32)
    with Upstream() as up, BrokerProcess(tmp_path, up) as b:
        ctx = ssl.create_default_context(cafile=b.ca)
        with httpx.Client(proxy=b.proxy_url("s23", "corpus"), verify=ctx, timeout=60) as c:
            for _shape, text, _needle in corpus:
                # a header cannot hold a line break: multi-line texts (PEM, INI) ride everywhere else
                headers = {} if "\n" in text else {"X-Note": text, "Authorization": f"Bearer {text}"}
                c.get(f"{DRIVE}/files", params={"q": text}, headers=headers)
                c.post(f"{DRIVE}/files", json={"name": "n", "description": {"deep": [text]},
                                                "meta": json.dumps({"text": text})})
                c.post(f"{SLACK}/chat.postMessage", data={"channel": "C1", "text": text})
            for name, value in keywords:
                c.post(f"{DRIVE}/files", json={"cfg": {name: value}})
                c.post(f"{SLACK}/chat.postMessage", data={"channel": "C1", name: value})
                c.get(f"{DRIVE}/files", params={name: value})
        got = b.entries("s23", count=3 * len(corpus) + 3 * len(keywords))
        assert len(got) == 3 * len(corpus) + 3 * len(keywords)
        output = bytes(b.output)
    readers = _reader_outputs(tmp_path / "vault", "s23", len(got))
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join([*files, output, *readers])
    needles = [(s, n) for s, _t, n in corpus] + [(f"key {k}", v) for k, v in keywords]
    assert [(s, n) for s, n in needles if any(f in haystack for f in written_forms(n))] == []


def _reader_outputs(vault: Path, session: str, entries: int) -> list[bytes]:
    """What the readers print or serve for the session: every CLI reader and every inspector answer."""
    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from broker.cli import cli
    from broker.inspector.app import create_app
    from journal.vault import Vault

    out: list[bytes] = []
    runner = CliRunner()
    v = ["--vault", str(vault)]
    commands = [["show", *v, session], ["show", *v, "--json", session], ["search", *v, "--json"],
                ["sessions", *v], ["verify", *v]]
    commands += [["export", *v, "--format", f, session] for f in ("fixture", "har", "vcr", "otel", "ocsf")]
    commands += [["export", *v, "--format", "har", "--inline-blobs", session],
                 ["export", *v, "--format", "otel", "--content", session]]
    commands += [["show", *v, "--seq", str(n), session] for n in range(1, entries + 1)]
    for args in commands:
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, (args, result.output[-500:])
        out.append(result.stdout_bytes)
    q = f"session={session}"
    with TestClient(create_app(Vault(vault)), base_url="http://127.0.0.1") as web:
        paths = ["/api/sessions", f"/api/session/entries?{q}&limit=1000", f"/api/session/raw?{q}",
                 f"/api/session/fixture?{q}", "/api/search?limit=1000"]
        for n in range(1, entries + 1):
            paths += [f"/api/session/entry?{q}&seq={n}", f"/api/session/writes?{q}&seq={n}"]
            paths += [f"/api/session/body?{q}&seq={n}&part={part}" for part in ("request", "response")]
        for path in paths:
            answer = web.get(path)
            assert answer.status_code in (200, 404), (path, answer.text[:300])  # 404: no such body
            out.append(answer.content)
    assert len(out) > 3 * entries
    return out
