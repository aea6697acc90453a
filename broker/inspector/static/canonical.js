// The journal's canonical form (RFC 8785, JCS) and chain check, recomputed in the browser.
//
// Independent of the server: the page fetches a session's raw bytes and judges them here with the
// same rules as journal/verify.py (torn_tail, not_canonical, edited, contract_violation, removed,
// inserted, reordered). Blobs and seals are not checked here (the server's verdict covers them).
//
// Why each line is compared as text with canonical(JSON.parse(line)): JCS writes every value one way
// only, so a line that is canonical is fixed by its value. JSON.parse loses the int/float distinction
// and precision beyond 2^53, but a canonical line never depends on either, with one exception the
// contract closes: a number written with integer digits beyond +-(2^53-1) (e.g. 9007199254740992) is
// an integer to a Python reader and outside the contract, so the line check refuses it (canonicalize()
// alone writes it, as RFC 8785 does). "-0" parses to -0, whose canonical form "0" differs: refused.
// A lone surrogate (an escape like \ud800 in the line) cannot be written as UTF-8: refused.
"use strict";

const Canonical = (() => {
  const MAX_SAFE = 9007199254740991;
  const ZERO = "0".repeat(64);
  const KEYS = ["seq", "ts", "session", "agent", "principal", "connector", "capture", "prompt_ref",
    "effect", "mcp", "request", "response", "prev", "hash"];
  const TS_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
  const HEX64_RE = /^[0-9a-f]{64}$/;
  const CONNECTOR_RE = /^[a-z0-9][a-z0-9_.-]*$/;
  const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

  class CanonicalError extends Error {}

  function wellFormed(s) {
    return typeof s.isWellFormed === "function" ? s.isWellFormed() : !LONE_SURROGATE.test(s);
  }

  function escapeString(s) {
    if (!wellFormed(s)) throw new CanonicalError("string holds a lone surrogate");
    let out = '"';
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c === 0x22) out += '\\"';
      else if (c === 0x5c) out += "\\\\";
      else if (c < 0x20) {
        if (c === 0x08) out += "\\b";
        else if (c === 0x09) out += "\\t";
        else if (c === 0x0a) out += "\\n";
        else if (c === 0x0c) out += "\\f";
        else if (c === 0x0d) out += "\\r";
        else out += "\\u" + c.toString(16).padStart(4, "0");
      } else out += s[i];
    }
    return out + '"';
  }

  function number(v, contract) {
    if (!Number.isFinite(v)) throw new CanonicalError(`${v} has no JSON form`);
    if (contract && Number.isInteger(v) && Math.abs(v) > MAX_SAFE && Math.abs(v) < 1e21) {
      throw new CanonicalError(`integer ${v} is outside +-(2^53-1)`);
    }
    return Object.is(v, -0) ? "0" : String(v); // ECMAScript Number::toString, as RFC 8785 requires
  }

  // canonicalize(value) -> string. With contract=true, also refuse what the journal contract refuses.
  function canonicalize(value, contract = false) {
    const parts = [];
    const write = (v) => {
      if (v === null) parts.push("null");
      else if (v === true) parts.push("true");
      else if (v === false) parts.push("false");
      else if (typeof v === "string") parts.push(escapeString(v));
      else if (typeof v === "number") parts.push(number(v, contract));
      else if (Array.isArray(v)) {
        parts.push("[");
        for (let i = 0; i < v.length; i++) {
          if (i) parts.push(",");
          write(v[i]);
        }
        parts.push("]");
      } else if (typeof v === "object") {
        // Default sort compares UTF-16 code units, which is what RFC 8785 asks for.
        const keys = Object.keys(v).sort();
        parts.push("{");
        for (let i = 0; i < keys.length; i++) {
          if (i) parts.push(",");
          parts.push(escapeString(keys[i]), ":");
          write(v[keys[i]]);
        }
        parts.push("}");
      } else throw new CanonicalError(`value of type ${typeof v} has no JSON form`);
    };
    write(value);
    return parts.join("");
  }

  const encoder = new TextEncoder();
  const hasCrypto = () => typeof crypto !== "undefined" && !!crypto.subtle && typeof crypto.subtle.digest === "function";

  async function sha256Hex(text) {
    const bytes = typeof text === "string" ? encoder.encode(text) : text;
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
    let hex = "";
    for (const b of digest) hex += b.toString(16).padStart(2, "0");
    return hex;
  }

  // -- one line ----------------------------------------------------------------------------------

  class Break extends Error {
    constructor(kind, detail) { super(detail); this.kind = kind; this.detail = detail; }
  }

  const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const nonEmpty = (v) => typeof v === "string" && v.length > 0;

  function contract(e) {
    const got = Object.keys(e);
    const missing = KEYS.filter((k) => !(k in e));
    const extra = got.filter((k) => !KEYS.includes(k));
    if (missing.length || extra.length) return `entry keys wrong: missing [${missing}], unexpected [${extra}]`;
    if (!Number.isInteger(e.seq) || e.seq < 1) return "seq must be a positive integer";
    for (const k of ["prev", "hash"]) if (typeof e[k] !== "string" || !HEX64_RE.test(e[k])) return `${k} must be 64 lowercase hex`;
    if (typeof e.ts !== "string" || !TS_RE.test(e.ts)) return "ts must be YYYY-MM-DDTHH:MM:SS.mmmZ";
    for (const k of ["session", "agent", "principal", "connector"]) if (!nonEmpty(e[k])) return `${k} must be a non-empty string`;
    if (!CONNECTOR_RE.test(e.connector)) return "connector must be a lowercase name";
    if (!["broker", "gateway", "agent"].includes(e.capture)) return "capture must be broker, gateway or agent";
    if (!["read", "write"].includes(e.effect)) return "effect must be read or write";
    if (e.prompt_ref !== null && typeof e.prompt_ref !== "string") return "prompt_ref must be a string or null";
    if (e.mcp !== null && !isObj(e.mcp)) return "mcp must be an object or null";
    for (const [name, keys] of [["request", ["method", "url", "headers", "body"]], ["response", ["status", "headers", "body"]]]) {
      const m = e[name];
      if (!isObj(m)) return `${name} must be an object`;
      if (keys.some((k) => !(k in m))) return `${name} lacks a required key`;
      if (!Array.isArray(m.headers) || m.headers.some((h) => !Array.isArray(h) || h.length !== 2 ||
          typeof h[0] !== "string" || typeof h[1] !== "string")) return `${name}.headers must be [name, value] string pairs`;
    }
    if (!nonEmpty(e.request.method)) return "request.method must be a non-empty string";
    if (typeof e.request.url !== "string") return "request.url must be a string";
    const st = e.response.status;
    if (st !== null && (!Number.isInteger(st) || st < 100 || st > 999)) return "response.status must be an HTTP status or null";
    if (st === null && !("error" in e.response)) return "a response with status null must carry an 'error' key";
    return null;
  }

  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

  // prepareLine(bytes without "\n", session) -> {entry, hashInput, problem}: everything but the digest.
  // Throws Break("not_canonical"). `hashInput` is canonical(entry without "hash"): in the sorted line
  // "hash" follows agent, capture, connector and effect, all strings, so when the entry has exactly
  // the contract's keys its member is the first `,"hash":"`, and removing it leaves that canonical form
  // (journal/verify.py does the same); otherwise it is canonicalised again without "hash".
  function prepareLine(bytes, session) {
    let text, entry;
    try { text = decoder.decode(bytes); } catch (_) { throw new Break("not_canonical", "not UTF-8"); }
    try { entry = JSON.parse(text); } catch (err) { throw new Break("not_canonical", `not JSON (${err.message})`); }
    let canon;
    try { canon = canonicalize(entry, true); } catch (err) {
      throw new Break("not_canonical", `value has no canonical form (${err.message})`);
    }
    if (canon !== text) throw new Break("not_canonical", "line bytes differ from the canonical form of the entry");
    let hashInput = null;
    if (isObj(entry) && typeof entry.hash === "string") {
      const at = text.indexOf(',"hash":"');
      const plain = Object.keys(entry).length === KEYS.length && KEYS.every((k) => k in entry) &&
        ["agent", "capture", "connector", "effect"].every((k) => typeof entry[k] === "string");
      if (plain && at >= 0 && HEX64_RE.test(entry.hash) && text.substr(at + 9, 64) === entry.hash && text[at + 73] === '"') {
        hashInput = text.slice(0, at) + text.slice(at + 74);
      } else {
        const rest = Object.assign({}, entry);
        delete rest.hash;
        hashInput = canonicalize(rest, true);
      }
    }
    let problem = isObj(entry) ? contract(entry) : "entry is not an object";
    if (!problem && entry.session !== session) problem = `entry names session ${JSON.stringify(entry.session)}, not this file's`;
    return { entry, hashInput, problem };
  }

  // judge(prepared, digest) -> entry; throws Break("edited" | "contract_violation"), in the verifier's order.
  function judge(p, digest) {
    if (p.hashInput !== null && digest !== p.entry.hash) throw new Break("edited", `hash does not match the content of seq ${p.entry.seq}`);
    if (p.problem) throw new Break("contract_violation", p.problem);
    return p.entry;
  }

  // checkLine(bytes without "\n", session) -> entry; throws Break.
  async function checkLine(bytes, session) {
    const p = prepareLine(bytes, session);
    return judge(p, p.hashInput === null ? null : await sha256Hex(p.hashInput));
  }

  function classify(entry, k, expectedPrev, later) {
    const seq = entry.seq;
    if (seq < k) return ["inserted", `found seq ${seq} where seq ${k} belongs (a duplicate or an inserted entry)`];
    if (seq === k) return ["inserted", `seq ${k} does not follow seq ${k - 1} (its prev points elsewhere)`];
    const seen = new Map();
    for (const bytes of later()) {
      try {
        const e = JSON.parse(decoder.decode(bytes));
        seen.set(e.seq, [e.prev, e.hash]);
      } catch (_) { /* unreadable later lines do not help classify */ }
    }
    if (seen.has(k) && seen.get(k)[0] === expectedPrev) {
      const genuine = (seen.get(seq - 1) || [null, null])[1] === entry.prev;
      if (genuine) return ["reordered", `found seq ${seq} where seq ${k} belongs; seq ${k} comes later`];
      return ["inserted", `found an entry claiming seq ${seq} before seq ${k}; it does not belong to the chain`];
    }
    const n = seq - k;
    return ["removed", `found seq ${seq} where seq ${k} belongs: ${n} entr${n === 1 ? "y" : "ies"} missing`];
  }

  // A chain checker fed the session file's bytes in pieces (so a file that grows is checked as it grows).
  class ChainCheck {
    constructor(session) {
      this.session = session;
      this.entries = 0;
      this.prev = ZERO;
      this.hashes = [];       // hash of each verified line, by seq - 1 (to check an opened entry)
      this.broken = null;     // {seq, kind, detail}
      this.pending = new Uint8Array(0);
      this.bytes = 0;         // bytes fed so far
      this.complete = 0;      // bytes of complete lines checked
    }

    // feed(Uint8Array): check every complete line in it; keeps a trailing partial line for later.
    async feed(chunk, onProgress) {
      const buf = this.pending.length ? concat(this.pending, chunk) : chunk;
      this.bytes += chunk.length;
      let start = 0;
      const lines = [];
      for (let i = buf.indexOf(0x0a); i >= 0; i = buf.indexOf(0x0a, start)) { lines.push([start, i]); start = i + 1; }
      this.pending = buf.slice(start);
      const later = (j) => () => lines.slice(j + 1).map(([x, y]) => buf.subarray(x, y));
      // Lines are prepared in slices and their digests computed together (Web Crypto works off the
      // main thread), then judged strictly in order, so the first break is the one reported.
      for (let j0 = 0; j0 < lines.length && !this.broken; j0 += 500) {
        const slice = lines.slice(j0, j0 + 500);
        const prepared = [];
        for (const [a, b] of slice) {
          try { prepared.push(prepareLine(buf.subarray(a, b), this.session)); } catch (err) {
            if (!(err instanceof Break)) throw err;
            prepared.push(err);
            break;
          }
        }
        const digests = await Promise.all(prepared.map((p) => (p instanceof Break || p.hashInput === null ? null : sha256Hex(p.hashInput))));
        for (let i = 0; i < prepared.length && !this.broken; i++) {
          this._one(prepared[i], digests[i], later(j0 + i));
          if (!this.broken) this.complete += slice[i][1] - slice[i][0] + 1;
        }
        if (onProgress) { onProgress(this); await new Promise((r) => setTimeout(r, 0)); }
      }
    }

    // verdict(): what the bytes fed so far show, as if the file ended here (a partial last line is a
    // torn tail; feeding the rest of it later goes on from there).
    verdict() {
      if (this.broken) {
        return { intact: false, entries: this.entries, broken_at_seq: this.broken.seq, kind: this.broken.kind, detail: this.broken.detail };
      }
      if (this.pending.length) {
        return { intact: false, entries: this.entries, broken_at_seq: this.entries + 1, kind: "torn_tail",
          detail: `line ${this.entries + 1}: last line has no final newline (${this.pending.length} bytes)` };
      }
      return { intact: true, entries: this.entries, broken_at_seq: null, kind: null, detail: null };
    }

    _one(prepared, digest, later) {
      const k = this.entries + 1;
      try {
        if (prepared instanceof Break) throw prepared;
        const entry = judge(prepared, digest);
        if (entry.seq !== k || entry.prev !== this.prev) {
          const [kind, detail] = classify(entry, k, this.prev, later);
          throw new Break(kind, detail);
        }
        this.entries = k;
        this.prev = entry.hash;
        this.hashes.push(entry.hash);
      } catch (err) {
        if (!(err instanceof Break)) throw err;
        this.broken = { seq: k, kind: err.kind, detail: `line ${k}: ${err.detail}` };
      }
    }
  }

  function concat(a, b) {
    const out = new Uint8Array(a.length + b.length);
    out.set(a, 0);
    out.set(b, a.length);
    return out;
  }

  // Kinds only the server can judge (it holds the blobs and the seal key).
  const SERVER_ONLY = ["blob_missing", "blob_corrupt", "seal_mismatch"];

  // compare(browser, server) -> {agree, why}: do the two verdicts say the same of the bytes both saw?
  function compare(b, s) {
    if (s.intact && b.intact) return { agree: true, why: "both intact" };
    if (!s.intact && SERVER_ONLY.includes(s.kind) && (b.intact || b.broken_at_seq > s.broken_at_seq)) {
      return { agree: true, why: `the server found ${s.kind}, which the browser does not check` };
    }
    if (!s.intact && !b.intact && s.broken_at_seq === b.broken_at_seq) {
      return s.kind === b.kind ? { agree: true, why: "both broken at the same seq" }
        : { agree: true, why: `both broken at seq ${s.broken_at_seq} (server: ${s.kind}, browser: ${b.kind})` };
    }
    return { agree: false, why: `the browser says ${b.intact ? "intact" : "broken at seq " + b.broken_at_seq}, the server ${s.intact ? "intact" : "broken at seq " + s.broken_at_seq}` };
  }

  return { canonicalize, sha256Hex, hasCrypto, checkLine, ChainCheck, compare, CanonicalError, Break, SERVER_ONLY };
})();

if (typeof window !== "undefined") window.Canonical = Canonical;
