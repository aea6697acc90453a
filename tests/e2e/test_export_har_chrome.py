"""HAR export imported by Chrome DevTools' own HAR importer (the `models/har` module bundled in the
system's Chromium), run in the DevTools frontend page of headless Chromium. Skipped, saying so, when
no Chromium is installed (.ci/run installs Debian's `chromium`)."""

from __future__ import annotations

import base64
import json
import time

import pytest

from journal.export.har import build_har
from tests.support.chromium_cdp import Chromium, chromium_binary
from tests.support.export_factories import BIG, PNG, SESSION, record_export_session

DEVTOOLS = "devtools://devtools/bundled/devtools_app.html"
IMPORT = """
(async () => {
  const har = await import('./models/har/har.js');
  const root = new har.HARFormat.HARRoot(%s);
  const requests = har.Importer.Importer.requestsFromHARLog(root.log);
  const out = [];
  for (const r of requests) {
    const content = await r.requestContentData();
    out.push({method: r.requestMethod, url: r.url(), status: r.statusCode, mimeType: r.mimeType,
              headers: r.requestHeaders().map(h => [h.name, h.value]),
              base64: content.isTextContent ? null : content.base64,
              text: content.isTextContent ? content.text : null});
  }
  return out;
})()
"""


@pytest.fixture(scope="module")
def devtools(tmp_path_factory):
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium installed (apt-get install chromium) for the DevTools HAR import test")
    browser = Chromium(binary, tmp_path_factory.mktemp("chromium") / "chromium.log")
    try:
        target = browser.send("Target.createTarget", {"url": DEVTOOLS})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for _ in range(100):
            if browser.evaluate(session, "document.readyState") == "complete":
                break
            time.sleep(0.1)
        yield browser, session
    finally:
        browser.close()


@pytest.mark.parametrize("inline", [False, True])
def test_chrome_devtools_imports_the_har(tmp_path, devtools, inline):
    browser, session = devtools
    record_export_session(tmp_path)
    har = build_har(tmp_path, SESSION, inline_blobs=inline)
    got = browser.evaluate(session, IMPORT % json.dumps(har))
    assert [(r["method"], r["url"]) for r in got] == [
        (e["request"]["method"], e["request"]["url"]) for e in har["log"]["entries"]]
    assert [r["status"] for r in got] == [200, 200, 200, 200, 200, 0, 200, 200]  # seq 7: MCP over stdio
    assert got[6]["url"] == "mcp+stdio://notes/tools/call"
    first = got[0]
    assert ["Authorization", "[never captured]"] in first["headers"]
    assert json.loads(first["text"]) == {"messages": [{"id": "m1"}]}
    assert base64.b64decode(got[3]["base64"]) == PNG and got[3]["mimeType"] == "image/png"
    if inline:
        assert json.loads(got[2]["text"])["data"] == BIG and got[4]["text"] == "x" * 500
    else:
        assert json.loads(got[2]["text"])["data"]["size"] == 300  # the reference object, as in _blobs
