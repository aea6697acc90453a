"""Issue 23 corpus, a slice through the real `broker run`: samples of every shape sent by a real client in
headers, query, JSON and form bodies; then every file under the broker's folder (vault, blobs, confdir,
logs) and everything it printed is scanned for the secrets (raw, URL-encoded, JSON-escaped, base64 at
three alignments): none may be found."""

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
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join([*files, output])
    needles = [(s, n) for s, _t, n in corpus] + [(f"key {k}", v) for k, v in keywords]
    assert [(s, n) for s, n in needles if any(f in haystack for f in written_forms(n))] == []
