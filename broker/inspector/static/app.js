// The inspector page. Everything recorded is put on the page as text (textContent / text nodes),
// never as HTML; links are only ever built to the inspector's own routes.
"use strict";

(() => {
  const PAGE = 200;
  const POLL_MS = 2000;
  const TOKEN_KEY = "broker-inspector-token";
  const main = document.getElementById("main");

  // -- the token: taken from ?token= on the first load, then carried by the page itself ------------
  {
    const q = new URLSearchParams(location.search);
    if (q.has("token")) {
      sessionStorage.setItem(TOKEN_KEY, q.get("token"));
      q.delete("token");
      history.replaceState(null, "", "/" + (q.toString() ? "?" + q : ""));
    }
  }
  const token = sessionStorage.getItem(TOKEN_KEY);
  const authHeaders = () => (token ? { Authorization: "Bearer " + token } : {});

  async function api(path, query = {}) {
    const resp = await fetch(`/api/${path}?${new URLSearchParams(query)}`, { headers: authHeaders() });
    const data = await resp.json().catch(() => ({ error: `${resp.status} ${resp.statusText}` }));
    if (!resp.ok) {
      const err = new Error(data.error || `HTTP ${resp.status}`);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  // A replay (the views, what a write changed, the revert plan) is folded in the background on the server: it
  // answers 202 {pending, done, total} until the fold is done, holding each request up to a second, so this asks
  // again at once, telling `say` how far the fold has read. The pending answer comes back when `stopped()`.
  async function folded(path, query, say, stopped) {
    let got;
    for (got = await api(path, query); got.pending && !stopped(); got = await api(path, query)) {
      say(got.total ? ` (${Math.min(99, Math.floor((100 * got.done) / got.total))}% of the session read)` : "");
    }
    return got;
  }
  // What a replay answered with `current: false` is: the session's replay before it grew, served while the fold
  // of the grown file runs (a session being written). Said above what it shows.
  function asOf(got) {
    if (got.current !== false) return null;
    return el("p", { class: "muted as-of", role: "note" }, `Replayed as of the first ${fmt(got.replay_of.entries)} entries: `
      + "the session has grown since and its replay is being built again; reload to see it.");
  }

  // -- building the page (text only) --------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (tag === "pre") node.tabIndex = 0; // a scrolling box must be reachable by keyboard
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") { for (const [dk, dv] of Object.entries(v)) if (dv !== null && dv !== undefined) node.dataset[dk] = dv; }
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    append(node, children);
    return node;
  }
  function append(node, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const pageUrl = (query) => "/" + (Object.keys(query).length ? "?" + new URLSearchParams(query) : "");
  const apiUrl = (path, query) => `/api/${path}?${new URLSearchParams(query)}`;
  function nav(query, text, props = {}) {
    const href = pageUrl(query);
    return el("a", { ...props, href, onclick: (ev) => {
      if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button) return;
      ev.preventDefault();
      go(query);
    } }, text);
  }
  function go(query, replace = false) {
    const href = pageUrl(query);
    if (replace) history.replaceState(null, "", href);
    else history.pushState(null, "", href);
    route();
  }
  const fmt = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
  const show = (v) => (v === null || v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v));
  function gap(prevTs, ts) {
    if (!prevTs || !ts) return "-";
    const s = (Date.parse(ts) - Date.parse(prevTs)) / 1000;
    if (!Number.isFinite(s)) return "?";
    if (s < 60) return `+${s.toFixed(3)}s`;
    if (s < 3600) return `+${(s / 60).toFixed(1)}m`;
    return `+${(s / 3600).toFixed(1)}h`;
  }
  function clear(node, ...children) { node.replaceChildren(); return append(node, children); }
  function failure(err) { return el("p", { class: "error", role: "alert" }, err.message || String(err)); }

  // "Copy as": the command for a call (static/copy-as.js), shown as text, with what is redacted named.
  function copyBlock(call, id, label) {
    const out = el("pre", { class: "copy-text", hidden: true });
    const note = el("p", { class: "copy-note", hidden: true });
    const copyBtn = el("button", { class: "copy-button", hidden: true, onclick: () => {
      const done = () => { copyBtn.textContent = "copied"; setTimeout(() => { copyBtn.textContent = "copy to clipboard"; }, 1500); };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(out.textContent).then(done, () => selectText(out));
      else selectText(out);
    } }, "copy to clipboard");
    const buttons = CopyAs.TOOLS.map(([tool, name]) => el("button", { dataset: { tool }, onclick: () => {
      const got = CopyAs.build(call, tool);
      for (const b of buttons) b.classList.toggle("active", b.dataset.tool === tool);
      if (got.error) { out.hidden = true; copyBtn.hidden = true; note.hidden = false; note.className = "copy-note muted"; note.textContent = got.error; return; }
      out.textContent = got.text;
      out.hidden = false;
      copyBtn.hidden = false;
      const says = [];
      if (got.redacted.length) says.push(`redacted when recorded, left as recorded: ${got.redacted.join(", ")} (put the real value in yourself)`);
      says.push(...got.notes);
      note.hidden = !says.length;
      note.className = got.redacted.length ? "copy-note redacted" : "copy-note muted";
      note.textContent = says.join("; ");
    } }, name));
    return el("div", { class: "copy-as", id }, el("span", { class: "muted" }, label || "Copy as "), buttons, copyBtn, note, out);
  }
  function selectText(node) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  // -- routing --------------------------------------------------------------------------------------
  let current = null; // the session page shown (its timers stop when another page is shown)
  let vaultInfo = null;

  async function route() {
    if (current) { current.stop(); current = null; }
    const q = Object.fromEntries(new URLSearchParams(location.search));
    if (!vaultInfo) {
      try {
        vaultInfo = await api("vault");
        document.getElementById("vault-root").textContent = vaultInfo.root;
      } catch (err) { clear(main, failure(err)); return; }
    }
    if (q.view === "search") return searchPage(q);
    if (q.view === "diff") return diffPage(q);
    if (q.session) { current = new SessionPage(q); return current.start(); }
    return sessionsPage(q);
  }
  window.addEventListener("popstate", route);
  document.getElementById("home").addEventListener("click", (ev) => { ev.preventDefault(); go({}); });
  document.getElementById("nav-search").addEventListener("click", (ev) => { ev.preventDefault(); go({ view: "search" }); });
  document.getElementById("nav-diff").addEventListener("click", (ev) => { ev.preventDefault(); go({ view: "diff" }); });

  // -- sessions list ----------------------------------------------------------------------------------
  const SESSION_COLS = [
    ["session", "Session", (r) => r.session],
    ["entries", "Entries", (r) => r.entries, "num"],
    ["first_ts", "First (UTC)", (r) => r.first_ts || ""],
    ["last_ts", "Last (UTC)", (r) => r.last_ts || ""],
    ["connectors", "Connectors", (r) => r.connectors.join(", ")],
    ["writes", "Writes", (r) => r.writes, "num"],
    ["captures", "Evidence", (r) => Object.entries(r.captures).map(([g, n]) => `${g} ${n}`).join(", ")],
    ["verifies", "Chain", (r) => (r.verifies ? "intact" : `broken at seq ${r.broken_at_seq}`)],
    ["sealed", "Seal", sealText],
  ];

  // What the session's checkpoint (or legacy seal) file claims; checking its signatures takes the
  // log's public key, so the inspector says "claims" and `broker verify --seal-key` checks it.
  function sealText(r) {
    const cp = r.checkpoint;
    const parts = [];
    if (cp && cp.error) parts.push(`checkpoint unreadable: ${cp.error}`);
    else if (cp) {
      const witnesses = cp.signers.slice(1);
      parts.push(`checkpoint claims ${cp.size}` + (witnesses.length ? `, cosigned by ${witnesses.join(", ")}` : ""));
    }
    if (r.sealed !== null && r.sealed !== undefined) parts.push(`sealed at ${r.sealed}`);
    return parts.length ? parts.join("; ") : "none";
  }

  async function sessionsPage(q) {
    clear(main, el("h1", {}, "Sessions"), el("p", { class: "loading" }, "Reading the vault…"));
    let rows;
    // The names come at once; each session's summary (one verifying pass over its file) follows.
    try { rows = await api("sessions", { names: 1 }); } catch (err) { clear(main, el("h1", {}, "Sessions"), failure(err)); return; }
    rows = rows.map((r) => ({ ...r, pending: true, entries: null, first_ts: null, last_ts: null, connectors: [], writes: null,
      captures: {}, verifies: null, sealed: null, checkpoint: null }));
    if (!rows.length) {
      clear(main, el("h1", {}, "Sessions"), el("p", { id: "empty" }, "This vault has no sessions yet."));
      const waiting = { timer: null, stop() { clearInterval(this.timer); } };
      current = waiting;
      waiting.timer = setInterval(async () => {
        const now = await api("sessions", { names: 1 }).catch(() => []);
        if (now.length && current === waiting) route();
      }, POLL_MS);
      return;
    }
    let sortKey = q.sort || "last_ts";
    let desc = q.dir ? q.dir === "desc" : true;
    const filter = el("input", { id: "filter", type: "search", placeholder: "filter: session, connector…", value: q.filter || "",
      "aria-label": "filter the sessions by session or connector" });
    const chain = el("select", { id: "chain-filter", "aria-label": "chain state" }, el("option", { value: "" }, "any chain"),
      el("option", { value: "intact" }, "intact"), el("option", { value: "broken" }, "broken"));
    chain.value = q.chain || "";
    const tbody = el("tbody");
    const head = el("tr");
    const table = el("table", { id: "sessions" }, el("thead", {}, head), tbody);
    const draw = () => {
      const needle = filter.value.trim().toLowerCase();
      const col = SESSION_COLS.find((c) => c[0] === sortKey) || SESSION_COLS[0];
      const shown = rows.filter((r) => (!needle || r.session.toLowerCase().includes(needle) ||
        r.connectors.some((c) => c.includes(needle))) &&
        (!chain.value || (chain.value === "intact") === r.verifies));
      shown.sort((a, b) => {
        const x = col[2](a), y = col[2](b);
        const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return desc ? -c : c;
      });
      clear(head, SESSION_COLS.map(([key, label, , cls]) => el("th", {
        class: `sortable ${cls || ""} ${key === sortKey ? (desc ? "sorted-desc" : "sorted-asc") : ""}`,
        dataset: { key }, onclick: () => { desc = key === sortKey ? !desc : false; sortKey = key; draw(); },
      }, label)));
      clear(tbody, shown.map((r) => el("tr", { class: r.verifies === false ? "untrusted" : "", dataset: { session: r.session, pending: r.pending ? "1" : null } },
        SESSION_COLS.map(([key, , get, cls]) => el("td", { class: cls || "" },
          key === "session" ? nav({ session: r.session }, r.session)
            : r.pending ? (key === "verifies" ? el("span", { class: "badge info" }, "verifying…") : "…")
              : key === "verifies" ? el("span", { class: `badge ${r.verifies ? "ok" : "bad"}` }, get(r)) : get(r))))));
      const left = rows.filter((r) => r.pending).length;
      count.textContent = `${shown.length} of ${rows.length} sessions` + (left ? `, ${left} still being verified` : "");
      table.dataset.loaded = String(!left);
    };
    const count = el("span", { class: "muted" });
    filter.addEventListener("input", draw);
    chain.addEventListener("change", draw);
    clear(main, el("h1", {}, "Sessions"), el("div", { class: "toolbar" }, filter, chain, count), table);
    draw();
    const shownNow = () => main.contains(table) && !live.stopped;
    // Live, as the timeline is: every POLL_MS the names and sizes are read again; a new session gets a
    // row, a session whose file grew or changed is summarized (and verified) again.
    const live = { stopped: false, timer: null, stop() { this.stopped = true; clearInterval(this.timer); } };
    current = live;
    const queue = rows.map((r) => r.session);
    const busy = new Set();
    const summarize = async (sid) => {
      busy.add(sid);
      try {
        const got = await api("session/summary", { session: sid });
        const i = rows.findIndex((r) => r.session === sid);
        if (i >= 0) rows[i] = { ...got, pending: false, bytes: rows[i].bytes };
      } catch (err) {
        const i = rows.findIndex((r) => r.session === sid);
        if (i >= 0) rows[i] = { ...rows[i], pending: false, verifies: false, broken_at_seq: "?", detail: err.message };
      } finally { busy.delete(sid); }
      if (shownNow()) draw();
    };
    const worker = async () => {
      while (queue.length && shownNow()) await summarize(queue.shift());
    };
    const poll = async () => {
      if (!shownNow()) return;
      let now;
      try { now = await api("sessions", { names: 1 }); } catch (_) { return; }
      let changed = false;
      for (const n of now) {
        const r = rows.find((x) => x.session === n.session);
        if (!r) {
          rows.push({ ...n, pending: true, entries: null, first_ts: null, last_ts: null, connectors: [], writes: null, captures: {},
            verifies: null, sealed: null, checkpoint: null });
          queue.push(n.session);
          changed = true;
        } else if (r.bytes !== n.bytes && !busy.has(n.session) && !queue.includes(n.session)) {
          r.bytes = n.bytes; // the row keeps its last summary until the new one is in
          queue.push(n.session);
          changed = true;
        }
      }
      if (changed) { draw(); await Promise.all([worker(), worker()]); }
    };
    live.timer = setInterval(poll, POLL_MS);
    await Promise.all([worker(), worker()]);
  }

  // -- the browser's chain check in a Web Worker (same Canonical.ChainCheck, off the main thread) ----------
  class WorkerCheck {
    constructor(session) {
      this.session = session;
      this.worker = new Worker("/static/chain-worker.js");
      this.entries = 0;
      this.bytes = 0;
      this.hashes = [];
      this.last = { intact: true, entries: 0, broken_at_seq: null, kind: null, detail: null };
    }
    verdict() { return this.last; }
    terminate() { this.worker.terminate(); }
    run(offset, onProgress) {
      return new Promise((resolve, reject) => {
        this.worker.onmessage = (ev) => {
          const m = ev.data;
          if (m.type === "error") { reject(new Error(m.message)); return; }
          this.last = m.verdict;
          this.entries = m.entries;
          this.bytes = m.bytes;
          for (const h of m.hashes) this.hashes.push(h);
          if (m.type === "done") resolve(); else onProgress();
        };
        this.worker.onerror = (ev) => reject(new Error(ev.message || "the chain-check worker failed"));
        this.worker.postMessage({ session: this.session, offset, token });
      });
    }
  }

  // -- the keys (shown with ?) ----------------------------------------------------------------------------
  const KEYS = [["j  or  ↓", "next row"], ["k  or  ↑", "previous row"], ["Enter", "open the row"], ["/", "filter the timeline"],
    ["Esc", "close the entry, this list or leave the filter"], ["?", "show or hide these keys"]];
  function closeKeyHelp() {
    const d = document.getElementById("key-help");
    if (!d) return false;
    d.remove();
    return true;
  }
  function toggleKeyHelp() {
    if (closeKeyHelp()) return;
    const close = el("button", { onclick: closeKeyHelp }, "Close");
    const d = el("div", { id: "key-help", role: "dialog", "aria-modal": "false", "aria-labelledby": "key-help-title", class: "dialog" },
      el("h2", { id: "key-help-title" }, "Keys"),
      el("table", {}, el("tbody", {}, KEYS.map(([k, what]) => el("tr", {}, el("th", { scope: "row" }, el("kbd", {}, k)), el("td", {}, what))))),
      el("p", { class: "muted" }, "Filter: ~c connector, ~e read|write, ~m method, ~s 404|4xx|none, ~h host, ~t tool, bare text; ! not, & and, | or, ( )."),
      close);
    document.body.append(d);
    close.focus();
  }

  // -- one session ------------------------------------------------------------------------------------
  class SessionPage {
    constructor(q) {
      this.session = q.session;
      this.tab = q.tab || "timeline";
      this.seq = q.seq ? parseInt(q.seq, 10) : null;
      this.total = 0;
      this.from = 1;
      this.timers = [];
      this.stopped = false;
      this.check = null; // the browser's chain check
      this.server = null; // the server's verdict
      this.checking = false;
    }
    stop() {
      this.stopped = true;
      if (this.keys) document.removeEventListener("keydown", this.keys);
      closeKeyHelp();
      this.timers.forEach(clearInterval);
      if (this.check instanceof WorkerCheck) this.check.terminate();
    }
    query(extra = {}) {
      const q = { session: this.session };
      if (this.tab !== "timeline") q.tab = this.tab;
      return { ...q, ...extra };
    }

    async start() {
      this.badges = el("div", { class: "verdicts", id: "verdicts" });
      this.banner = el("div");
      this.body = el("div");
      const tabs = el("nav", { class: "tabs", "aria-label": "session views" }, [["timeline", "Timeline"], ["conversation", "Conversation"], ["views", "Views"], ["plan", "Revert plan"], ["evidence", "Evidence"]].map(
        ([t, label]) => nav(t === "timeline" ? { session: this.session } : { session: this.session, tab: t }, label,
          { class: t === this.tab ? "active" : "", id: `tab-${t}` })));
      const tools = el("div", { class: "toolbar" });
      if (vaultInfo.fixture_export) {
        tools.append(el("a", { id: "fixture", href: apiUrl("session/fixture", { session: this.session }), download: "" },
          "Download as test fixture"));
      }
      tools.append(el("a", { href: apiUrl("session/raw", { session: this.session }), download: "" }, "Download the raw session file"));
      tools.append(nav({ view: "diff", a: this.session }, "Compare with another session…", { id: "compare" }));
      clear(main, el("h1", {}, "Session ", el("span", { id: "session-name" }, this.session)),
        this.badges, this.banner, tabs, tools, this.body);
      this.drawVerdicts();
      if (this.tab !== "timeline") {
        this.runChecks();
        const tab = { views: () => this.viewsTab(), plan: () => this.planTab(), conversation: () => this.conversationTab(),
          evidence: () => this.evidenceTab() }[this.tab] || (() => this.planTab());
        return tab();
      }
      await this.timelineTab(); // the first screen first; then both checks of the chain
      if (!this.stopped) this.runChecks();
    }

    // -- the two verdicts ----------------------------------------------------------------------------
    async runChecks() {
      const crypto_ok = Canonical.hasCrypto();
      const serverP = api("session/verdict", { session: this.session }).then((v) => { this.server = v; this.drawVerdicts(); })
        .catch((err) => { this.serverError = err.message; this.drawVerdicts(); });
      if (crypto_ok) {
        this.check = typeof Worker === "function" ? new WorkerCheck(this.session) : new Canonical.ChainCheck(this.session);
        await this.feedRaw(0);
      }
      await serverP;
      this.drawVerdicts();
      if (this.afterCheck) this.afterCheck();
    }

    async feedRaw(offset) {
      if (this.checking) return;
      this.checking = true;
      try {
        if (this.check instanceof WorkerCheck) {
          await this.check.run(offset, () => this.drawVerdicts());
          return;
        }
        const resp = await fetch(apiUrl("session/raw", { session: this.session, offset }), { headers: authHeaders() });
        if (!resp.ok) throw new Error(`raw lines: HTTP ${resp.status}`);
        const reader = resp.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done || this.stopped) break;
          await this.check.feed(value, () => this.drawVerdicts());
          this.drawVerdicts();
        }
      } catch (err) {
        this.checkError = err.message;
      } finally {
        this.checking = false;
        this.drawVerdicts();
      }
    }

    drawVerdicts() {
      const s = this.server;
      const serverBadge = this.serverError
        ? el("span", { class: "badge warn", id: "server-verdict", dataset: { state: "error" } }, `server: ${this.serverError}`)
        : !s ? el("span", { class: "badge info", id: "server-verdict", dataset: { state: "checking" } }, "server: verifying…")
          : el("span", { class: `badge ${s.intact ? "ok" : "bad"}`, id: "server-verdict",
            dataset: { state: s.intact ? "intact" : "broken", seq: s.broken_at_seq ?? "", kind: s.kind ?? "" },
            title: s.detail || "" }, s.intact ? `server (broker verify): intact, ${fmt(s.entries)} entries`
            : `server (broker verify): broken at seq ${s.broken_at_seq} (${s.kind})`);
      let browserBadge, agreement = null;
      const untrusted = [];
      if (!Canonical.hasCrypto()) {
        browserBadge = el("span", { class: "badge warn", id: "browser-verdict", dataset: { state: "unavailable" } },
          "browser check unavailable (no Web Crypto on this connection): server verdict only");
      } else if (this.checkError) {
        browserBadge = el("span", { class: "badge bad", id: "browser-verdict", dataset: { state: "error" } }, `browser check failed: ${this.checkError}`);
        untrusted.push("the browser could not check the chain");
      } else {
        const b = this.check ? this.check.verdict() : null;
        if (!b || this.checking) { // no verdict, partial or not, until the whole file is read
          const read = this.check ? this.check.bytes : 0;
          const pct = this.fileBytes ? ` (${Math.min(100, Math.floor((100 * read) / this.fileBytes))}% of ${fmt(this.fileBytes)} bytes)` : "";
          browserBadge = el("span", { class: "badge info", id: "browser-verdict", dataset: { state: "checking", bytes: String(read) } },
            `browser: checking the chain… ${fmt(this.check ? this.check.entries : 0)} entries${pct}`);
        } else {
          browserBadge = el("span", { class: `badge ${b.intact ? "ok" : "bad"}`, id: "browser-verdict",
            dataset: { state: b.intact ? "intact" : "broken", seq: b.broken_at_seq ?? "", kind: b.kind ?? "" }, title: b.detail || "" },
          b.intact ? `browser (recomputed here): intact, ${fmt(b.entries)} entries` : `browser (recomputed here): broken at seq ${b.broken_at_seq} (${b.kind})`);
          if (s) {
            const c = Canonical.compare(b, s);
            agreement = el("span", { class: `badge ${c.agree ? "ok" : "bad"}`, id: "agreement", dataset: { agree: String(c.agree) }, title: c.why },
              c.agree ? "verdicts agree" : "verdicts DISAGREE");
            if (!c.agree) untrusted.push(`the browser and the server disagree: ${c.why}`);
          }
        }
      }
      const broken = (s && !s.intact) || (this.check && !this.check.verdict().intact && !this.checking);
      this.brokenAt = Math.min(s && !s.intact ? s.broken_at_seq : Infinity,
        this.check && !this.checking && !this.check.verdict().intact ? this.check.verdict().broken_at_seq : Infinity);
      clear(this.badges, browserBadge, serverBadge, agreement);
      clear(this.banner, untrusted.length
        ? el("div", { class: "banner bad", id: "untrusted" }, `Untrusted session: ${untrusted.join("; ")}.`)
        : broken ? el("div", { class: "banner bad", id: "broken" }, `Chain broken at seq ${this.brokenAt}: this and every later entry is unverified.`)
          : null);
      if (this.rowsDrawn) this.markUntrusted();
    }

    // Each row shows its raw line (from /api/session/entries) only; it is trusted when the hash recomputed
    // here from that line is the hash the chain checked in this browser holds at its seq. Until the check
    // has reached it, it is unchecked; a row that is not the chain's entry is untrusted, whatever the
    // verdicts say (a server serving one file to the check and another to the timeline is caught here).
    markUntrusted() {
      const crypto = Canonical.hasCrypto();
      const hashes = this.check && crypto ? this.check.hashes : null;
      for (const tr of this.body.querySelectorAll("tr[data-line]")) {
        const line = Number(tr.dataset.line);
        let state;
        if (line >= this.brokenAt || this.checkError) state = "untrusted";
        else if (!crypto || tr.dataset.hash === undefined) state = "trusted"; // no Web Crypto: the verdicts alone
        else if (!hashes) state = "unchecked"; // the check has not started
        else {
          const chained = hashes[line - 1];
          if (chained === undefined) state = this.checking ? "unchecked" : "untrusted";
          else state = chained === tr.dataset.hash ? "trusted" : "untrusted";
        }
        tr.dataset.chain = state;
        tr.classList.toggle("untrusted", state === "untrusted");
        tr.classList.toggle("unchecked", state === "unchecked");
        tr.title = state === "untrusted" ? "not the entry the chain checked in this browser holds at this seq"
          : state === "unchecked" ? "not yet checked by this browser" : "";
      }
    }

    // -- timeline --------------------------------------------------------------------------------------
    async timelineTab() {
      this.rowsBox = el("tbody");
      this.pager = el("div", { class: "pager" });
      this.entryBox = el("section", { class: "entry", id: "entry" });
      this.filterBox = el("input", { id: "timeline-filter", type: "search", value: this.filterText || "", autocomplete: "off",
        "aria-label": "filter the timeline (~c connector, ~e effect, ~m method, ~s status, ~h host, ~t tool, text; ! & | ( ))",
        placeholder: "filter: ~c slack & ~e write, ~s 4xx, ~t tool  (? keys)" });
      this.filterNote = el("span", { id: "filter-note", class: "muted", "aria-live": "polite" });
      this.filterBox.addEventListener("input", () => this.applyFilter());
      this.filterBox.addEventListener("keydown", (ev) => {
        if (ev.key === "Escape" || ev.key === "Enter") { ev.preventDefault(); this.filterBox.blur(); }
      });
      this.split = el("div", { class: "split closed" },
        el("div", {}, el("div", { class: "toolbar" }, this.filterBox, this.filterNote), this.pager,
          el("table", { id: "timeline" }, el("thead", {}, el("tr", {},
            ["Seq", "Time (UTC)", "Gap", "Connector", "Effect", "Capture", "Method / tool", "Status", "URL", "Answered by"].map(
              (h, i) => el("th", { class: i === 0 || i === 7 ? "num" : "", scope: "col", title: i === 9 ? "answered by / error" : h }, h)))), this.rowsBox)), this.entryBox);
      clear(this.body, this.split);
      this.keys = (ev) => this.onKey(ev);
      document.addEventListener("keydown", this.keys);
      const head = await api("session/head", { session: this.session }).catch((err) => { clear(this.body, failure(err)); return null; });
      if (!head) return;
      this.total = head.lines;
      this.fileBytes = head.bytes;
      this.from = this.seq ? Math.floor((this.seq - 1) / PAGE) * PAGE + 1 : 1;
      await this.loadRows();
      if (this.seq) await this.openEntry(this.seq, false);
      this.timers.push(setInterval(() => this.poll(), POLL_MS));
    }

    async loadRows() {
      const page = await api("session/entries", { session: this.session, from: this.from, limit: PAGE });
      if (this.stopped) return;
      this.total = page.total;
      let prevTs = page.prev_ts;
      const rows = await Promise.all(page.rows.map((r) => rowFromRaw(r)));
      if (this.stopped) return;
      clear(this.rowsBox, rows.map((r) => {
        const g = gap(prevTs, r.ts);
        prevTs = r.ts;
        if (r.unreadable) {
          return el("tr", { class: "row untrusted", dataset: { line: r.line, hash: "" }, onclick: () => this.openEntry(r.line) },
            el("td", { class: "num" }, r.line), el("td", { colspan: 9 }, "(this line is not a JSON object)"));
        }
        const answered = r.answered_by === null || r.answered_by === undefined ? "" : r.answered_by;
        const data = r.hash === undefined ? { line: r.line } : { line: r.line, hash: r.hash };
        return el("tr", { class: `row ${r.line === this.seq ? "selected" : ""}`, dataset: data, onclick: () => this.openEntry(r.line) },
          el("td", { class: "num" }, r.seq === r.line ? r.line : `${r.line} (claims ${show(r.seq)})`), el("td", {}, show(r.ts)), el("td", {}, g),
          el("td", {}, show(r.connector)), el("td", {}, show(r.effect)), el("td", {}, show(r.capture)),
          el("td", { title: r.target ? `${show(r.method)} ${show(r.target)}` : show(r.method) }, r.target ? `${show(r.method)} ${show(r.target)}` : show(r.method)),
          el("td", { class: "num" }, r.status === null ? "—" : show(r.status)), el("td", { class: "url", title: show(r.url) }, show(r.url)),
          el("td", { title: r.error ? `${answered}${answered ? ": " : ""}${show(r.error)}` : answered }, r.error ? `${answered}${answered ? ": " : ""}${show(r.error)}` : answered));
      }));
      this.rowData = new Map(rows.map((r) => [r.line, r]));
      this.rowsDrawn = true;
      this.markUntrusted();
      this.drawPager();
      this.applyFilter();
    }

    // The filter narrows the rows of the page shown (drawn from their raw lines); new rows of a live
    // session are filtered as they arrive. An expression that does not parse hides nothing and says why.
    applyFilter() {
      if (!this.filterBox || !this.rowData) return;
      this.filterText = this.filterBox.value;
      let test;
      try {
        test = TimelineFilter.parse(this.filterText);
        this.filterBox.removeAttribute("aria-invalid");
      } catch (err) {
        this.filterBox.setAttribute("aria-invalid", "true");
        this.filterNote.className = "error";
        this.filterNote.textContent = err.message;
        for (const tr of this.rowsBox.querySelectorAll("tr[data-line]")) tr.hidden = false;
        return;
      }
      let shown = 0;
      const all = this.rowsBox.querySelectorAll("tr[data-line]");
      for (const tr of all) {
        const r = this.rowData.get(Number(tr.dataset.line));
        const keep = !this.filterText.trim() || (r && !r.unreadable && test(r));
        tr.hidden = !keep;
        if (keep) shown++;
      }
      this.filterNote.className = "muted";
      this.filterNote.textContent = this.filterText.trim() ? `${shown} of ${all.length} rows on this page match` : "";
      const cur = this.rowsBox.querySelector("tr.cursor");
      if (cur && cur.hidden) cur.classList.remove("cursor");
    }

    // Keys, as in mitmweb: j/k or the arrows move, Enter opens, / filters, ? lists the keys, Esc closes.
    onKey(ev) {
      if (this.stopped || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      const t = ev.target;
      const typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable);
      if (typing) return;
      if (ev.key === "?") { ev.preventDefault(); toggleKeyHelp(); return; }
      if (ev.key === "Escape") {
        if (closeKeyHelp()) return;
        if (!this.split.classList.contains("closed")) { this.split.classList.add("closed"); this.seq = null; history.pushState(null, "", pageUrl(this.query())); }
        return;
      }
      if (ev.key === "/") { ev.preventDefault(); this.filterBox.focus(); this.filterBox.select(); return; }
      const down = ev.key === "j" || ev.key === "ArrowDown", up = ev.key === "k" || ev.key === "ArrowUp";
      if (down || up) {
        ev.preventDefault();
        const rows = [...this.rowsBox.querySelectorAll("tr[data-line]")].filter((tr) => !tr.hidden);
        if (!rows.length) return;
        let i = rows.findIndex((tr) => tr.classList.contains("cursor"));
        if (i < 0) i = rows.findIndex((tr) => tr.classList.contains("selected"));
        i = i < 0 ? (down ? 0 : rows.length - 1) : Math.max(0, Math.min(rows.length - 1, i + (down ? 1 : -1)));
        for (const tr of this.rowsBox.querySelectorAll("tr.cursor")) { tr.classList.remove("cursor"); tr.removeAttribute("aria-current"); }
        rows[i].classList.add("cursor");
        rows[i].setAttribute("aria-current", "true");
        rows[i].scrollIntoView({ block: "nearest" });
        return;
      }
      if (ev.key === "Enter" && !(t && (t.tagName === "BUTTON" || t.tagName === "A" || t.tagName === "SUMMARY"))) {
        const cur = this.rowsBox.querySelector("tr.cursor");
        if (cur) { ev.preventDefault(); this.openEntry(Number(cur.dataset.line)); }
      }
    }

    drawPager() {
      const last = Math.max(1, Math.floor((this.total - 1) / PAGE) * PAGE + 1);
      const to = Math.min(this.total, this.from + PAGE - 1);
      const move = (from) => { this.from = from; this.loadRows(); };
      const jump = el("input", { type: "number", min: 1, max: this.total, placeholder: "seq", id: "jump", size: 6 });
      clear(this.pager,
        el("button", { onclick: () => move(1), disabled: this.from <= 1 }, "« first"),
        el("button", { onclick: () => move(Math.max(1, this.from - PAGE)), disabled: this.from <= 1 }, "‹ prev"),
        el("span", { id: "range" }, this.total ? `${fmt(this.from)}–${fmt(to)} of ${fmt(this.total)}` : "no entries yet"),
        el("button", { onclick: () => move(this.from + PAGE), disabled: to >= this.total }, "next ›"),
        el("button", { onclick: () => move(last), disabled: to >= this.total }, "last »"),
        el("form", { onsubmit: (ev) => { ev.preventDefault(); const n = parseInt(jump.value, 10); if (n >= 1) this.openEntry(n); } }, jump, el("button", {}, "open")));
    }

    async poll() {
      if (this.stopped) return;
      let head;
      try { head = await api("session/head", { session: this.session }); } catch (_) { return; }
      if (head.lines === this.total && (!this.check || this.check.bytes === head.bytes)) return;
      const onLastPage = this.from + PAGE > this.total;
      this.total = head.lines;
      this.fileBytes = head.bytes;
      if (onLastPage) await this.loadRows(); else this.drawPager();
      if (this.check && !this.checking && head.bytes > this.check.bytes) await this.feedRaw(this.check.bytes);
      const now = Date.now();
      if (!this.lastVerdict || now - this.lastVerdict > 5000) {
        this.lastVerdict = now;
        this.server = await api("session/verdict", { session: this.session }).catch(() => this.server);
        this.drawVerdicts();
      }
    }

    // -- one entry --------------------------------------------------------------------------------------
    async openEntry(n, push = true) {
      this.seq = n;
      if (push) history.pushState(null, "", pageUrl(this.query({ seq: n })));
      if (n < this.from || n >= this.from + PAGE) { this.from = Math.floor((n - 1) / PAGE) * PAGE + 1; await this.loadRows(); }
      for (const tr of this.rowsBox.querySelectorAll("tr.selected")) tr.classList.remove("selected");
      const tr = this.rowsBox.querySelector(`tr[data-line="${n}"]`);
      if (tr) { tr.classList.add("selected"); tr.scrollIntoView({ block: "nearest" }); }
      this.split.classList.remove("closed");
      clear(this.entryBox, el("p", { class: "loading" }, `Loading seq ${n}…`));
      let got;
      try { got = await api("session/entry", { session: this.session, seq: n }); } catch (err) { clear(this.entryBox, failure(err)); return; }
      if (this.seq !== n) return;
      renderEntry(this, got, n);
    }

    evidence() {
      if (!this.evidenceP) this.evidenceP = api("session/evidence", { session: this.session });
      return this.evidenceP;
    }

    // Rows for the entries at `seqs`, drawn from their raw lines and hashed here like the timeline's,
    // so markUntrusted() marks them by the chain this browser checked.
    async rowsFor(seqs) {
      const want = [...new Set(seqs)].sort((a, b) => a - b);
      const out = new Map();
      let i = 0;
      while (i < want.length) {
        const from = want[i];
        const got = await api("session/entries", { session: this.session, from, limit: 1000 });
        for (const r of await Promise.all(got.rows.filter((r) => want.includes(r.line)).map(rowFromRaw))) out.set(r.line, r);
        while (i < want.length && want[i] < from + 1000) i++;
      }
      return out;
    }

    entryRow(r, flags) {
      if (!r) return el("tr", {}, el("td", { colspan: 6 }, "(no such line)"));
      if (r.unreadable) return el("tr", { class: "row untrusted", dataset: { line: r.line, hash: "" } }, el("td", { class: "num" }, r.line), el("td", { colspan: 5 }, "(this line is not a JSON object)"));
      const data = r.hash === undefined ? { line: r.line } : { line: r.line, hash: r.hash };
      return el("tr", { class: "row", dataset: data, onclick: () => go({ session: this.session, seq: r.line }) },
        el("td", { class: "num" }, nav({ session: this.session, seq: r.line }, r.line)), el("td", {}, show(r.connector)), el("td", {}, show(r.effect)),
        el("td", {}, r.target ? `${show(r.method)} ${show(r.target)}` : show(r.method)),
        el("td", { class: "num" }, r.status === null ? "—" : show(r.status)), el("td", { class: "url" }, show(r.url), findingBadges(flags)));
    }

    async conversationTab() {
      clear(this.body, el("p", { class: "loading" }, "Reading the conversation…"));
      let t;
      try { t = await api("session/trajectory", { session: this.session }); } catch (err) { clear(this.body, failure(err)); return; }
      const at = new Map();
      for (const f of t.findings) { if (!at.has(f.seq)) at.set(f.seq, []); at.get(f.seq).push(f); }
      const inTurn = new Set(t.turns.flatMap((x) => [x.seq, ...x.calls]));
      const loose = [...at.keys()].filter((s) => !inTurn.has(s));
      const rows = await this.rowsFor([...inTurn, ...loose]).catch((err) => { clear(this.body, failure(err)); return null; });
      if (!rows || this.stopped) return;
      const table = (seqs) => el("table", { class: "turn-entries" }, el("thead", {}, el("tr", {},
        ["Seq", "Connector", "Effect", "Method / tool", "Status", "URL / findings"].map((h, i) => el("th", { scope: "col", class: i === 0 || i === 4 ? "num" : "" }, h)))),
      el("tbody", {}, seqs.map((s) => this.entryRow(rows.get(s), at.get(s)))));
      const summary = el("p", { class: "muted" }, `${t.turns.length} model call(s); ${t.findings.length} finding(s). `,
        "Read by the server (broker trajectory); each entry below is drawn from its own line and marked by the chain this browser checked.");
      clear(this.body, summary,
        t.notes.length ? el("ul", { class: "notes" }, t.notes.map((n) => el("li", { class: "muted" }, n))) : null,
        t.turns.map((turn, i) => {
          const model = rows.get(turn.seq);
          return el("section", { class: "turn", dataset: { seq: turn.seq } },
            el("h2", { class: "turn-title" }, `Turn ${i + 1}: model call at seq `, nav({ session: this.session, seq: turn.seq }, turn.seq),
              el("span", { class: "muted" }, ` — ${turn.model_api}${turn.connector !== turn.model_api ? ` via ${turn.connector}` : ""}, ${turn.ts}${turn.stream ? ", streamed" : ""}`)),
            at.has(turn.seq) ? el("div", { class: "turn-findings" }, findingBadges(at.get(turn.seq))) : null,
            model ? el("table", { class: "turn-model turn-entries" }, el("tbody", {}, this.entryRow(model))) : null,
            turn.asked.length ? el("ol", { class: "asked" }, turn.asked.map((c) => el("li", { dataset: { tool: c.name } },
              el("strong", {}, c.name), ` (${c.id || "no id"}) `, el("code", {}, JSON.stringify(c.arguments)),
              c.carried_out_by.length ? [" — carried out by seq ", c.carried_out_by.map((s, k) => [k ? ", " : "", nav({ session: this.session, seq: s }, s)])]
                : el("span", { class: "badge bad" }, "not carried out"),
              c.result ? [`; its result shown to the model at seq `, nav({ session: this.session, seq: c.result.shown_in }, c.result.shown_in)] : null)))
              : el("p", { class: "muted" }, "asked for no tool call"),
            turn.calls.length ? [el("h3", {}, "Entries this model call led to (prompt_ref)"), table(turn.calls)] : null);
        }),
        loose.length ? el("section", { class: "turn", id: "outside-turns" }, el("h2", { class: "turn-title" }, "Outside any turn: entries with findings"), table(loose.sort((a, b) => a - b))) : null);
      this.rowsDrawn = true;
      this.markUntrusted();
    }

    async evidenceTab() {
      clear(this.body, el("p", { class: "loading" }, "Reading the checkpoint…"));
      let ev;
      try { ev = await this.evidence(); } catch (err) { clear(this.body, failure(err)); return; }
      const cp = ev.checkpoint;
      const when = (t) => (t === null || t === undefined ? "-" : new Date(t * 1000).toISOString().replace(".000Z", "Z"));
      const claims = el("p", { class: "muted" }, "What the notes in seals/ claim. Their signatures are not checked here (the vault holds no keys): ",
        el("code", {}, "broker verify --seal-key LOG.vkey --witness-key W.vkey"), " checks them.");
      const cpBox = !cp ? el("p", { id: "checkpoint", dataset: { state: "none" } }, "No checkpoint: nothing seals this session yet (broker seal, or broker run --seal-key).")
        : cp.error ? el("p", { id: "checkpoint", class: "error", dataset: { state: "unreadable" } }, `Checkpoint unreadable: ${cp.error}`)
          : el("div", { id: "checkpoint", dataset: { state: "claimed", size: cp.size } },
            el("dl", { class: "meta" }, [["size (entries)", fmt(cp.size)], ["origin", cp.origin], ["root", cp.root],
              ["signer", `${cp.signer.name} (key ${cp.signer.key_id})`]].map(([k, v]) => [el("dt", {}, k), el("dd", { dataset: { field: k } }, v)])),
            el("h3", {}, "Witnesses"),
            cp.witnesses.length ? el("table", { id: "witnesses" }, el("thead", {}, el("tr", {}, ["Witness", "Key", "Cosigned at (UTC)"].map((h) => el("th", { scope: "col" }, h)))),
              el("tbody", {}, cp.witnesses.map((w) => el("tr", {}, el("td", {}, w.name), el("td", { class: "hash" }, w.key_id), el("td", {}, when(w.cosigned_at))))))
              : el("p", { class: "muted", id: "witnesses" }, "No witness cosignature: only the log's key vouches for this checkpoint."));
      const tail = ev.unsealed
        ? el("p", { id: "unsealed", class: "warn-text", dataset: { entries: ev.unsealed.entries } }, `Unsealed tail: seq ${fmt(ev.unsealed.from_seq)}–${fmt(ev.lines)} (${fmt(ev.unsealed.entries)} entries) are not covered by a checkpoint.`)
        : el("p", { id: "unsealed", dataset: { entries: 0 } }, ev.lines ? `Every entry (${fmt(ev.lines)}) is covered by the checkpoint.` : "No entries.");
      const idx = ev.index;
      const kinds = [["passed", "passed through (no connector, not recorded)"], ["token", "left out (token exchanges)"], ["refused", "refused by the capture point"]];
      const coverage = !idx ? el("p", { id: "coverage", class: "muted" }, "No vault index (seals/vault-index.note): no declared coverage.")
        : idx.error ? el("p", { id: "coverage", class: "error" }, `Vault index unreadable: ${idx.error}`)
          : el("div", { id: "coverage" }, el("p", { class: "muted" }, `The vault index (signed by ${idx.signer.name}, written ${when(idx.time)}) lists this session sealed at ${idx.sealed_size === null ? "-" : fmt(idx.sealed_size)} entries.`),
            el("table", {}, el("thead", {}, el("tr", {}, ["Not recorded", "Host", "Calls"].map((h) => el("th", { scope: "col" }, h)))),
              el("tbody", {}, kinds.flatMap(([k, label]) => idx.coverage[k].length
                ? idx.coverage[k].map((c) => el("tr", { dataset: { kind: k } }, el("td", {}, label), el("td", {}, c.host), el("td", { class: "num" }, fmt(c.count))))
                : [el("tr", { dataset: { kind: k } }, el("td", {}, label), el("td", { class: "muted" }, "none declared"), el("td", { class: "num" }, "0"))]))));
      const seqIn = el("input", { type: "number", min: 1, id: "prove-seq", "aria-label": "seq to prove", size: 6, value: cp && !cp.error && cp.size ? cp.size : "" });
      const prove = el("form", { class: "toolbar", onsubmit: (ev2) => {
        ev2.preventDefault();
        const a = el("a", { href: apiUrl("session/prove", { session: this.session, seq: seqIn.value }), download: "" });
        document.body.append(a); a.click(); a.remove();
      } }, el("label", { for: "prove-seq" }, "Proof bundle (broker prove) for seq "), seqIn, el("button", { type: "submit", id: "prove-button", disabled: !cp || !!cp.error }, "Download"));
      clear(this.body, claims, el("h2", {}, "Checkpoint"), cpBox, tail, cp && !cp.error ? prove : null, el("h2", {}, "Declared coverage"), coverage);
    }

    // -- views and revert plan ------------------------------------------------------------------------------
    async viewsTab() {
      clear(this.body, el("p", { class: "loading" }, "Replaying the session…"));
      let v;
      try {
        v = await folded("session/views", { session: this.session },
          (pct) => clear(this.body, el("p", { class: "loading", role: "status" }, `Replaying the session…${pct}`)), () => this.stopped);
      } catch (err) { clear(this.body, failure(err)); return; }
      if (this.stopped) return;
      if (!v.resources.length) { clear(this.body, asOf(v), el("p", {}, "Replay found no resources in this session.")); return; }
      clear(this.body, asOf(v), el("p", { class: "muted" }, `${v.resources.length} resources touched (built from what the platform answered; untrusted after a broken seq).`),
        v.resources.map((r) => el("section", { class: "resource", dataset: { resource: r.id } },
          el("h2", { class: "resource-title" }, r.title, r.description ? el("span", { class: "muted" }, ` — ${r.description}`) : null),
          el("p", {}, el("span", { class: "badge info" }, r.status), el("span", { class: `badge ${r.trusted ? "ok" : "bad"}` }, r.trusted ? "trusted" : `untrusted from seq ${r.untrusted_from_seq}`),
            `evidence: ${r.evidence.weakest || "-"}; entries: `, r.entries.map((e, i) => [i ? ", " : "", nav({ session: this.session, seq: e.seq }, `${e.seq} ${e.role}`)])),
          el("pre", {}, JSON.stringify(r.state, null, 2)),
          r.writes.length ? el("p", {}, `${r.writes.length} write(s): `, r.writes.map((w, i) => [i ? ", " : "", nav({ session: this.session, seq: w.seq }, `seq ${w.seq} ${w.op}`)])) : null)));
    }

    async planTab() {
      clear(this.body, el("p", { class: "loading" }, "Building the revert plan…"));
      let plan;
      try {
        plan = await folded("session/revert-plan", { session: this.session },
          (pct) => clear(this.body, el("p", { class: "loading", role: "status" }, `Building the revert plan…${pct}`)), () => this.stopped);
      } catch (err) { clear(this.body, failure(err)); return; }
      if (this.stopped) return;
      if (!plan.steps.length) { clear(this.body, asOf(plan), el("p", {}, "No writes: nothing to revert.")); return; }
      clear(this.body, asOf(plan), el("p", { class: "muted" }, `${plan.steps.length} steps, newest first. Never executed: for a person to review and act on.`),
        el("table", { id: "plan" }, el("thead", {}, el("tr", {}, ["#", "For seq", "Connector", "Operation", "Revertible", "Inverse call", "Why", "Evidence"].map((h) => el("th", {}, h)))),
          el("tbody", {}, plan.steps.map((s, i) => el("tr", { class: s.trusted ? "" : "untrusted" },
            el("td", { class: "num" }, i + 1), el("td", {}, nav({ session: this.session, seq: s.for_seq }, s.for_seq)), el("td", {}, s.connector),
            el("td", {}, s.op), el("td", {}, [s.revertible ? "yes" : "no", s.blind ? ", blind" : "", s.approximate ? ", approximate" : ""].join("")),
            el("td", { class: "url" }, s.call ? [`${s.call.method} ${s.call.url}${s.call.body === null ? "" : " " + JSON.stringify(s.call.body)}`,
              copyBlock({ method: s.call.method, url: s.call.url, headers: [], body: s.call.body }, `copy-step-${i + 1}`)] : "—"),
            el("td", {}, s.reason), el("td", {}, s.evidence || "-"))))));
    }
  }

  const FINDING_LABEL = { not_carried_out: "not carried out", not_asked_for: "not asked for", not_logged: "result not logged",
    tools_changed: "tool definition changed" };
  function findingBadges(list) {
    if (!list || !list.length) return null;
    return list.map((f) => el("span", { class: "finding", dataset: { kind: f.kind, seq: f.seq } },
      el("span", { class: "badge bad" }, FINDING_LABEL[f.kind] || f.kind), f.detail));
  }

  // -- rendering an entry ---------------------------------------------------------------------------------
  // A timeline row drawn from its raw line alone, with the hash recomputed here from that line's content
  // (undefined without Web Crypto: then the rows follow the verdicts only).
  // What an MCP entry's call names (the tool, prompt, resource or task), as journal/listing.py's call_target.
  function callTarget(e) {
    const params = e.mcp && typeof e.mcp === "object" && e.mcp.params && typeof e.mcp.params === "object" ? e.mcp.params : null;
    if (params === null || Array.isArray(params)) return null;
    for (const key of ["name", "uri", "taskId"]) {
      if (typeof params[key] === "string" && params[key]) return params[key];
    }
    return null;
  }

  async function rowFromRaw(r) {
    let e;
    try { e = JSON.parse(r.raw); } catch (_) { e = null; }
    if (e === null || typeof e !== "object" || Array.isArray(e)) return { line: r.line, unreadable: true };
    const req = e.request && typeof e.request === "object" ? e.request : {};
    const resp = e.response && typeof e.response === "object" ? e.response : {};
    const row = { line: r.line, seq: e.seq, ts: e.ts, connector: e.connector, effect: e.effect, capture: e.capture,
      method: req.method, target: callTarget(e), url: req.url, status: resp.status === undefined ? null : resp.status,
      answered_by: resp.answered_by, error: resp.error };
    if (Canonical.hasCrypto()) {
      try {
        const rest = Object.assign({}, e);
        delete rest.hash;
        row.hash = await Canonical.sha256Hex(Canonical.canonicalize(rest, true));
      } catch (_) { row.hash = ""; }
    }
    return row;
  }

  async function renderEntry(page, got, n) {
    const box = page.entryBox;
    const raw = got.raw;
    let entry;
    try { entry = JSON.parse(raw); } catch (_) { entry = null; }
    const head = el("div", {}, el("h2", {}, `Seq ${n}`, el("button", { class: "close", onclick: () => {
      page.split.classList.add("closed"); page.seq = null; history.pushState(null, "", pageUrl(page.query()));
    } }, "×")));
    if (entry === null || typeof entry !== "object" || Array.isArray(entry)) {
      clear(box, head, el("p", { class: "error" }, "This line is not a JSON object; as recorded:"), el("pre", { id: "raw-line" }, raw));
      return;
    }
    const hashLine = el("p", { id: "entry-hash-check", class: "muted" }, Canonical.hasCrypto() ? "recomputing this entry's hash…" : "no Web Crypto: hash not recomputed here");
    const req = entry.request || {}, resp = entry.response || {};
    const meta = [["seq", entry.seq], ["time (UTC)", entry.ts], ["gap", gap(got.prev_ts, entry.ts)], ["session", entry.session], ["agent", entry.agent],
      ["principal", entry.principal], ["connector", entry.connector], ["effect", entry.effect], ["effect basis", req.effect_basis],
      ["capture", entry.capture], ["answered by", resp.answered_by], ["error", resp.error], ["prompt_ref", entry.prompt_ref]];
    clear(box, head,
      el("dl", { class: "meta", id: "entry-meta" }, meta.filter(([, v]) => v !== undefined).map(([k, v]) => [el("dt", {}, k), el("dd", { dataset: { field: k } }, v === null ? "null" : show(v))])),
      el("h3", {}, "Chain"),
      el("dl", { class: "meta" }, el("dt", {}, "prev"), el("dd", { class: "hash", id: "entry-prev" }, show(entry.prev)),
        el("dt", {}, "hash"), el("dd", { class: "hash", id: "entry-hash" }, show(entry.hash))), hashLine,
      entry.mcp ? [el("h3", {}, "MCP request (as the agent sent it)"), el("pre", {}, JSON.stringify(entry.mcp, null, 2))] : null,
      el("h3", {}, "Request"), el("p", { class: "url", id: "entry-request-line" }, `${show(req.method)} ${show(req.url)}`),
      copyBlock({ method: req.method, url: req.url, headers: req.headers, body: req.body, bodyFile: `seq-${n}-request.bin` }, "copy-entry"),
      headersTable(req.headers), bodyBlock(page, n, "request", req),
      el("h3", {}, "Response"), el("p", { id: "entry-status" }, resp.status === null ? `no status${resp.error ? ": " + show(resp.error) : ""}` : `status ${show(resp.status)}`),
      headersTable(resp.headers), bodyBlock(page, n, "response", resp),
      proofLink(page, n),
      entry.effect === "write" ? writesBlock(page, n) : null,
      el("details", {}, el("summary", {}, "The line as recorded"), el("pre", { id: "raw-line" }, raw)));
    if (Canonical.hasCrypto()) {
      try {
        const rest = Object.assign({}, entry);
        delete rest.hash;
        const mine = await Canonical.sha256Hex(Canonical.canonicalize(rest, true));
        const okHash = mine === entry.hash;
        const say = () => {
          const chained = page.check && !page.checking ? page.check.hashes[n - 1] : undefined;
          hashLine.className = okHash ? "" : "error";
          hashLine.dataset.ok = String(okHash);
          hashLine.dataset.chained = String(chained === mine);
          const notChain = okHash && chained !== undefined && chained !== mine;
          if (notChain) hashLine.className = "error";
          hashLine.dataset.untrusted = String(notChain);
          hashLine.textContent = okHash
            ? `recomputed here: ${mine} matches the recorded hash` + (chained === mine ? ", and the chain checked in this browser holds it at this seq"
              : notChain ? `, but the chain checked in this browser holds ${chained} at this seq: this is not the recorded entry, untrusted`
                : page.checking ? " (the chain check has not reached it yet)" : "")
            : `recomputed here: ${mine}, the recorded hash differs: this entry was edited`;
        };
        say();
        page.afterCheck = () => { if (page.seq === n) say(); };
      } catch (err) { hashLine.className = "error"; hashLine.textContent = `no canonical form: ${err.message}`; }
    }
  }

  // The `broker prove` bundle for this entry, offered when the session's checkpoint claims to cover it.
  function proofLink(page, n) {
    const box = el("p", { id: "proof" });
    page.evidence().then((ev) => {
      const cp = ev.checkpoint;
      if (!cp) box.append(el("span", { class: "muted" }, "No checkpoint: no proof bundle (broker seal makes one)."));
      else if (cp.error) box.append(el("span", { class: "muted" }, `The checkpoint is unreadable (${cp.error}): no proof bundle.`));
      else if (n > cp.size) box.append(el("span", { class: "muted" }, `Not covered by the checkpoint (it claims ${fmt(cp.size)} entries): no proof bundle yet.`));
      else box.append(el("a", { id: "proof-download", href: apiUrl("session/prove", { session: page.session, seq: n }), download: "" },
        "Download the proof bundle (broker prove)"), el("span", { class: "muted" }, " — check it with broker verify-proof and the keys"));
    }).catch((err) => box.append(failure(err)));
    return box;
  }

  function headersTable(headers) {
    if (!Array.isArray(headers) || !headers.length) return el("p", { class: "muted" }, "(no headers)");
    return el("table", { class: "headers" }, el("tbody", {}, headers.map((h) => el("tr", {}, el("td", {}, show(h[0])), el("td", { class: "url" }, show(h[1]))))));
  }

  const isRef = (v) => v && typeof v === "object" && !Array.isArray(v) && typeof v.sha256 === "string" && typeof v.ref === "string" && "size" in v && Object.keys(v).length === 3;
  function refsIn(v, path, out) {
    if (isRef(v)) out.push([path || "(whole body)", v]);
    else if (Array.isArray(v)) v.forEach((x, i) => refsIn(x, `${path}[${i}]`, out));
    else if (v && typeof v === "object") for (const k of Object.keys(v)) refsIn(v[k], path ? `${path}.${k}` : k, out);
    return out;
  }
  function blobLink(ref) {
    return el("a", { href: apiUrl("blob", { sha256: ref.sha256 }), download: "", class: "blob" }, `download (${fmt(ref.size)} bytes, SHA-256 ${ref.sha256})`);
  }

  function bodyBlock(page, n, part, msg) {
    const body = msg.body;
    const id = `body-${part}`;
    const download = el("a", { href: apiUrl("session/body", { session: page.session, seq: n, part }), download: "" }, "download");
    if (body === null || body === undefined) return el("p", { class: "muted", id }, "(no body)");
    if (isRef(body)) return el("p", { id }, "spilled to the blob store: ", blobLink(body));
    if (typeof body === "object" && !Array.isArray(body) && Object.keys(body).length === 1 && typeof body.base64 === "string") {
      const info = el("span", {}, "bytes (base64 in the entry): ");
      const box = el("p", { id }, info, download);
      try {
        const bytes = Uint8Array.from(atob(body.base64), (c) => c.charCodeAt(0));
        info.textContent = `bytes (base64 in the entry), ${fmt(bytes.length)} bytes`;
        if (Canonical.hasCrypto()) Canonical.sha256Hex(bytes).then((h) => { info.textContent += `, SHA-256 ${h}: `; });
      } catch (_) { info.textContent = "base64 that does not decode: "; }
      return box;
    }
    const pre = el("pre", { id });
    const modes = typeof body === "string" ? { text: () => body } : {
      pretty: () => JSON.stringify(body, null, 2),
      text: () => { try { return Canonical.canonicalize(body); } catch (_) { return JSON.stringify(body); } },
    };
    const buttons = el("span", { class: "toolbar" });
    const choose = (m) => { pre.textContent = modes[m](); for (const b of buttons.children) b.classList.toggle("active", b.dataset.mode === m); };
    for (const m of Object.keys(modes)) buttons.append(el("button", { dataset: { mode: m }, onclick: () => choose(m) }, m));
    buttons.append(download);
    choose(Object.keys(modes)[0]);
    const refs = typeof body === "string" ? [] : refsIn(body, "", []);
    return el("div", {}, buttons, pre, refs.length ? el("ul", {}, refs.map(([p, r]) => el("li", {}, `${p}: spilled, `, blobLink(r)))) : null);
  }

  function writesBlock(page, n) {
    const box = el("section", { id: "writes" }, el("h3", {}, "What the write changed (replay)"), el("p", { class: "loading" }, "Replaying…"));
    const say = (pct) => clear(box, el("h3", {}, "What the write changed (replay)"), el("p", { class: "loading", role: "status" }, `Replaying the session…${pct}`));
    const gone = () => page.stopped || page.seq !== n || !box.isConnected;
    folded("session/writes", { session: page.session, seq: n }, say, gone).then((w) => {
      if (gone()) return;
      if (!w.writes.length) { clear(box, el("h3", {}, "What the write changed (replay)"), asOf(w), el("p", { class: "muted" }, "Replay found no resource this write changed.")); return; }
      clear(box, el("h3", {}, "What the write changed (replay)"), asOf(w), w.writes.map((x) => el("div", { class: "write" },
        el("h3", {}, `${x.title}: ${x.op}`, x.trusted ? null : el("span", { class: "badge bad" }, "untrusted")),
        x.failure ? el("p", { class: "error" }, `failed: ${x.failure}`) : null,
        el("p", { class: "muted" }, x.before === null ? "before: no earlier read in this session (blind write)" : `before: from seq ${x.before_seqs.join(", ")}`),
        el("div", { class: "split" }, el("div", {}, el("strong", {}, "before"), el("pre", { class: "before" }, JSON.stringify(x.before, null, 2))),
          el("div", {}, el("strong", {}, "intended"), el("pre", { class: "intended" }, JSON.stringify(x.intended, null, 2)))),
        el("strong", {}, "actual (what the platform answered)"), el("pre", { class: "actual" }, JSON.stringify(x.actual, null, 2)),
        x.differences.length ? el("div", {}, el("strong", {}, "intended vs actual"), el("ul", { class: "differences" }, x.differences.map((d) =>
          el("li", {}, `${d.field}: ${d.kind}; intended `, el("code", { class: "diff-del" }, JSON.stringify(d.intended)), ", actual ",
            el("code", { class: "diff-add" }, JSON.stringify(d.actual)), d.note ? ` (${d.note})` : "")))) : el("p", { class: "muted" }, "the answer matches what was asked"))));
    }).catch((err) => clear(box, failure(err)));
    return box;
  }

  // -- the diff of two sessions (what `broker diff` compares: journal/diff.py), side by side -------------------
  function callCells(session, call, fields, side) {
    if (!call) return [el("td", { class: "num" }, ""), el("td", { class: "empty-side" }, "")];
    const mark = (f, text) => el("span", { class: fields.includes(f) ? `changed ${side}` : "" }, text);
    return [el("td", { class: "num" }, nav({ session, seq: call.seq }, call.seq)),
      el("td", { class: "url" }, mark("connector", call.connector), " ", mark("effect", call.effect), " ", mark("method", call.method), " ",
        mark("url", call.url), " body ", mark("request_body_sha256", call.request_body_sha256.slice(0, 12)), " → ", mark("status", call.status === null ? "no status" : call.status))];
  }

  async function diffPage(q) {
    clear(main, el("h1", {}, "Compare two sessions"), el("p", { class: "loading" }, "Reading the vault…"));
    let names;
    try { names = (await api("sessions", { names: 1 })).map((r) => r.session); } catch (err) { clear(main, el("h1", {}, "Compare two sessions"), failure(err)); return; }
    const pick = (id, value, label) => {
      const sel = el("select", { id, name: id }, el("option", { value: "" }, "(choose a session)"), names.map((n) => el("option", { value: n }, n)));
      sel.value = value || "";
      return el("label", { for: id }, label, " ", sel);
    };
    const a = pick("diff-a", q.a, "A"), b = pick("diff-b", q.b, "B");
    const form = el("form", { class: "toolbar", id: "diff-form", onsubmit: (ev) => {
      ev.preventDefault();
      const next = { view: "diff" };
      const av = a.querySelector("select").value, bv = b.querySelector("select").value;
      if (av) next.a = av;
      if (bv) next.b = bv;
      go(next);
    } }, a, b, el("button", { type: "submit" }, "Compare"));
    const out = el("div", { id: "diff-result" });
    clear(main, el("h1", {}, "Compare two sessions"),
      el("p", { class: "muted" }, "The comparison broker diff makes: the ordered calls (connector, effect, method, URL, request body hash) and their statuses; seq, times, headers and response bodies are not compared. Read by the server from the files as they are: open each session to see whether its chain holds."),
      form, out);
    if (!q.a || !q.b) { out.append(el("p", { class: "muted" }, "Choose two sessions.")); return; }
    out.append(el("p", { class: "loading" }, "Comparing…"));
    let d;
    try { d = await api("diff", { a: q.a, b: q.b }); } catch (err) { clear(out, failure(err)); return; }
    const head = el("p", { id: "diff-summary", dataset: { same: String(d.same), differences: d.differences.length } },
      nav({ session: d.a }, d.a), ` (${d.a_calls.length} calls) vs `, nav({ session: d.b }, d.b), ` (${d.b_calls.length} calls): `,
      d.same ? "same calls, same statuses" : `${d.differences.length} difference(s)`);
    if (d.same) { clear(out, head); return; }
    const OP = { changed: "~", removed: "−", added: "+" };
    clear(out, head, el("table", { id: "diff-table", class: "diff" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col", title: "− only in A, + only in B, ~ changed" }, "±"), el("th", { scope: "col", class: "num" }, "A seq"), el("th", { scope: "col" }, `A: ${d.a}`),
        el("th", { scope: "col", class: "num" }, "B seq"), el("th", { scope: "col" }, `B: ${d.b}`), el("th", { scope: "col" }, "What differs"))),
      el("tbody", {}, d.differences.map((x) => el("tr", { class: `diff-${x.op}`, dataset: { op: x.op } },
        el("td", { "aria-label": x.op }, OP[x.op]), callCells(d.a, x.a, x.fields || [], "del"), callCells(d.b, x.b, x.fields || [], "add"),
        el("td", {}, x.op === "changed" ? x.fields.join(", ") : x.op === "removed" ? `only in A` : `only in B`))))));
  }

  // -- search --------------------------------------------------------------------------------------------
  const FILTERS = [["connector", "connector"], ["effect", "effect (read/write)"], ["capture", "capture"], ["status", "status (200, 4xx, none)"],
    ["answered_by", "answered by"], ["agent", "agent"], ["principal", "principal"], ["session", "session"], ["since", "since (UTC)"],
    ["until", "until (UTC)"], ["url", "URL contains"], ["text", "body contains"]];

  async function searchPage(q) {
    const inputs = {};
    const form = el("form", { class: "search", id: "search-form", onsubmit: (ev) => {
      ev.preventDefault();
      const next = { view: "search" };
      for (const [k, input] of Object.entries(inputs)) if (input.value.trim()) next[k] = input.value.trim();
      go(next);
    } }, FILTERS.map(([k, label]) => el("label", {}, label, inputs[k] = el("input", { name: k, value: q[k] || "" }))), el("button", { type: "submit" }, "Search"));
    const results = el("div", { id: "search-results" });
    clear(main, el("h1", {}, "Search every session"), form, results);
    const query = Object.fromEntries(FILTERS.map(([k]) => [k, q[k]]).filter(([, v]) => v));
    if (!Object.keys(query).length) { results.append(el("p", { class: "muted" }, "Give any filters; they must all hold.")); return; }
    results.append(el("p", { class: "loading" }, "Searching…"));
    const t0 = performance.now();
    let got;
    try { got = await api("search", query); } catch (err) { clear(results, failure(err)); return; }
    const ms = Math.round(performance.now() - t0);
    clear(results, el("p", { class: "muted" }, `${got.rows.length}${got.more ? "+" : ""} entries in ${ms} ms${got.more ? ` (first ${got.limit} shown)` : ""}; search reads the files as they are, the session page says whether to trust them`),
      el("table", { id: "search-table" }, el("thead", {}, el("tr", {}, ["Session", "Seq", "Time (UTC)", "Connector", "Effect", "Capture", "Method", "Status", "URL"].map((h) => el("th", {}, h)))),
        el("tbody", {}, got.rows.map((r) => el("tr", {}, el("td", {}, nav({ session: r.session }, r.session)), el("td", { class: "num" }, nav({ session: r.session, seq: r.line }, r.line)),
          el("td", {}, show(r.ts)), el("td", {}, show(r.connector)), el("td", {}, show(r.effect)), el("td", {}, show(r.capture)),
          el("td", {}, r.target ? `${show(r.method)} ${show(r.target)}` : show(r.method)),
          el("td", { class: "num" }, r.status === null ? `— ${show(r.error)}` : r.error ? `${show(r.status)} (${show(r.error)})` : show(r.status)),
          el("td", { class: "url" }, show(r.url)))))));
  }

  route();
})();
