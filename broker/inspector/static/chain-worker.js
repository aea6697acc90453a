// The browser's chain check off the page's main thread: fetches a session's raw bytes from an offset
// and feeds them to one Canonical.ChainCheck, kept between messages so a growing file is checked as
// it grows. Posts progress, then the verdict and the hashes of the lines verified since last time.
"use strict";
importScripts("/static/canonical.js");

let check = null;
let sent = 0;

function post(type) {
  const hashes = check.hashes.slice(sent);
  sent = check.hashes.length;
  self.postMessage({ type, verdict: check.verdict(), entries: check.entries, bytes: check.bytes, hashes });
}

self.onmessage = async (ev) => {
  const m = ev.data;
  if (!check) check = new Canonical.ChainCheck(m.session);
  try {
    if (!Canonical.hasCrypto()) throw new Error("no Web Crypto in the worker");
    const query = new URLSearchParams({ session: m.session, offset: m.offset });
    const resp = await fetch(`/api/session/raw?${query}`, { headers: m.token ? { Authorization: "Bearer " + m.token } : {} });
    if (!resp.ok) throw new Error(`raw lines: HTTP ${resp.status}`);
    const reader = resp.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      await check.feed(value, () => post("progress"));
    }
    post("done");
  } catch (err) {
    self.postMessage({ type: "error", message: err.message });
  }
};
