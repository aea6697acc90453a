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

  // -- building the page (text only) --------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(node.dataset, v);
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
    if (q.session) { current = new SessionPage(q); return current.start(); }
    return sessionsPage(q);
  }
  window.addEventListener("popstate", route);
  document.getElementById("home").addEventListener("click", (ev) => { ev.preventDefault(); go({}); });
  document.getElementById("nav-search").addEventListener("click", (ev) => { ev.preventDefault(); go({ view: "search" }); });

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
      return;
    }
    let sortKey = q.sort || "last_ts";
    let desc = q.dir ? q.dir === "desc" : true;
    const filter = el("input", { id: "filter", type: "search", placeholder: "filter: session, connector…", value: q.filter || "" });
    const chain = el("select", { id: "chain-filter" }, el("option", { value: "" }, "any chain"),
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
    const shownNow = () => main.contains(table);
    let next = 0;
    const worker = async () => {
      while (next < rows.length && shownNow()) {
        const i = next++;
        try { rows[i] = { ...(await api("session/summary", { session: rows[i].session })), pending: false }; }
        catch (err) { rows[i] = { ...rows[i], pending: false, verifies: false, broken_at_seq: "?", detail: err.message }; }
        if (shownNow()) draw();
      }
    };
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
      const tabs = el("nav", { class: "tabs" }, [["timeline", "Timeline"], ["views", "Views"], ["plan", "Revert plan"]].map(
        ([t, label]) => nav(t === "timeline" ? { session: this.session } : { session: this.session, tab: t }, label,
          { class: t === this.tab ? "active" : "", id: `tab-${t}` })));
      const tools = el("div", { class: "toolbar" });
      if (vaultInfo.fixture_export) {
        tools.append(el("a", { id: "fixture", href: apiUrl("session/fixture", { session: this.session }), download: "" },
          "Download as test fixture"));
      }
      tools.append(el("a", { href: apiUrl("session/raw", { session: this.session }), download: "" }, "Download the raw session file"));
      clear(main, el("h1", {}, "Session ", el("span", { id: "session-name" }, this.session)),
        this.badges, this.banner, tabs, tools, this.body);
      this.drawVerdicts();
      if (this.tab !== "timeline") {
        this.runChecks();
        return this.tab === "views" ? this.viewsTab() : this.planTab();
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
      this.split = el("div", { class: "split closed" },
        el("div", {}, this.pager, el("table", { id: "timeline" }, el("thead", {}, el("tr", {},
          ["Seq", "Time (UTC)", "Gap", "Connector", "Effect", "Capture", "Method", "Status", "URL", "Answered by / error"].map(
            (h, i) => el("th", { class: i === 0 || i === 7 ? "num" : "" }, h)))), this.rowsBox)), this.entryBox);
      clear(this.body, this.split);
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
          el("td", {}, r.target ? `${show(r.method)} ${show(r.target)}` : show(r.method)),
          el("td", { class: "num" }, r.status === null ? "—" : show(r.status)), el("td", { class: "url" }, show(r.url)),
          el("td", {}, r.error ? `${answered}${answered ? ": " : ""}${show(r.error)}` : answered));
      }));
      this.rowsDrawn = true;
      this.markUntrusted();
      this.drawPager();
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

    // -- views and revert plan ------------------------------------------------------------------------------
    async viewsTab() {
      clear(this.body, el("p", { class: "loading" }, "Replaying the session…"));
      let v;
      try { v = await api("session/views", { session: this.session }); } catch (err) { clear(this.body, failure(err)); return; }
      if (!v.resources.length) { clear(this.body, el("p", {}, "Replay found no resources in this session.")); return; }
      clear(this.body, el("p", { class: "muted" }, `${v.resources.length} resources touched (built from what the platform answered; untrusted after a broken seq).`),
        v.resources.map((r) => el("section", { class: "resource", dataset: { resource: r.id } },
          el("h3", {}, r.title, r.description ? el("span", { class: "muted" }, ` — ${r.description}`) : null),
          el("p", {}, el("span", { class: "badge info" }, r.status), el("span", { class: `badge ${r.trusted ? "ok" : "bad"}` }, r.trusted ? "trusted" : `untrusted from seq ${r.untrusted_from_seq}`),
            `evidence: ${r.evidence.weakest || "-"}; entries: `, r.entries.map((e, i) => [i ? ", " : "", nav({ session: this.session, seq: e.seq }, `${e.seq} ${e.role}`)])),
          el("pre", {}, JSON.stringify(r.state, null, 2)),
          r.writes.length ? el("p", {}, `${r.writes.length} write(s): `, r.writes.map((w, i) => [i ? ", " : "", nav({ session: this.session, seq: w.seq }, `seq ${w.seq} ${w.op}`)])) : null)));
    }

    async planTab() {
      clear(this.body, el("p", { class: "loading" }, "Building the revert plan…"));
      let plan;
      try { plan = await api("session/revert-plan", { session: this.session }); } catch (err) { clear(this.body, failure(err)); return; }
      if (!plan.steps.length) { clear(this.body, el("p", {}, "No writes: nothing to revert.")); return; }
      clear(this.body, el("p", { class: "muted" }, `${plan.steps.length} steps, newest first. Never executed: for a person to review and act on.`),
        el("table", { id: "plan" }, el("thead", {}, el("tr", {}, ["#", "For seq", "Connector", "Operation", "Revertible", "Inverse call", "Why", "Evidence"].map((h) => el("th", {}, h)))),
          el("tbody", {}, plan.steps.map((s, i) => el("tr", { class: s.trusted ? "" : "untrusted" },
            el("td", { class: "num" }, i + 1), el("td", {}, nav({ session: this.session, seq: s.for_seq }, s.for_seq)), el("td", {}, s.connector),
            el("td", {}, s.op), el("td", {}, [s.revertible ? "yes" : "no", s.blind ? ", blind" : "", s.approximate ? ", approximate" : ""].join("")),
            el("td", { class: "url" }, s.call ? `${s.call.method} ${s.call.url}${s.call.body === null ? "" : " " + JSON.stringify(s.call.body)}` : "—"),
            el("td", {}, s.reason), el("td", {}, s.evidence || "-"))))));
    }
  }

  // -- rendering an entry ---------------------------------------------------------------------------------
  // A timeline row drawn from its raw line alone, with the hash recomputed here from that line's content
  // (undefined without Web Crypto: then the rows follow the verdicts only).
  // What an MCP entry's call names (the tool, prompt, resource or task), as journal/summary.py's call_target.
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
      headersTable(req.headers), bodyBlock(page, n, "request", req),
      el("h3", {}, "Response"), el("p", { id: "entry-status" }, resp.status === null ? `no status${resp.error ? ": " + show(resp.error) : ""}` : `status ${show(resp.status)}`),
      headersTable(resp.headers), bodyBlock(page, n, "response", resp),
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
    api("session/writes", { session: page.session, seq: n }).then((w) => {
      if (!w.writes.length) { clear(box, el("h3", {}, "What the write changed (replay)"), el("p", { class: "muted" }, "Replay found no resource this write changed.")); return; }
      clear(box, el("h3", {}, "What the write changed (replay)"), w.writes.map((x) => el("div", { class: "write" },
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
