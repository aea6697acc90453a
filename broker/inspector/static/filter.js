// The timeline's filter expressions: a documented subset of mitmproxy's (docs/inspector.md).
//
//   ~c TEXT  connector contains      ~e read|write  effect is       ~m TEXT  method contains
//   ~s CODE  status: 404, 4xx, none  ~h TEXT  URL host contains     ~t TEXT  MCP tool (or prompt,
//   TEXT     URL, method, tool, connector or error contains           resource, task) contains
//   !X  not X     X & Y  both (also X Y)     X | Y  either     ( ... )  grouping    "a b"  quoted text
//
// Letters are matched without case. A filter only reads the row the page drew from its raw line
// (after the browser hashed it), never anything else. An expression that does not parse throws a
// FilterError whose message says where.
"use strict";

const TimelineFilter = (() => {
  class FilterError extends Error {}

  const FIELD_OPS = ["c", "e", "m", "s", "h", "t"];

  function tokenize(text) {
    const out = [];
    let i = 0;
    while (i < text.length) {
      const ch = text[i];
      if (/\s/.test(ch)) { i++; continue; }
      if ("!&|()".includes(ch)) { out.push({ kind: ch, at: i }); i++; continue; }
      if (ch === '"' || ch === "'") {
        const end = text.indexOf(ch, i + 1);
        if (end < 0) throw new FilterError(`unclosed quote at character ${i + 1}`);
        out.push({ kind: "word", text: text.slice(i + 1, end), at: i });
        i = end + 1;
        continue;
      }
      let j = i;
      while (j < text.length && !/\s/.test(text[j]) && !"!&|()".includes(text[j])) j++;
      out.push({ kind: "word", text: text.slice(i, j), at: i });
      i = j;
    }
    return out;
  }

  function hostOf(url) {
    if (typeof url !== "string") return "";
    const m = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(url);
    if (!m) return "";
    return m[1].replace(/^[^@]*@/, "").replace(/:\d+$/, "");
  }

  const low = (v) => (v === null || v === undefined ? "" : String(v).toLowerCase());

  function statusTest(arg) {
    const a = arg.toLowerCase();
    if (a === "none") return (r) => r.status === null || r.status === undefined;
    if (/^[1-5]xx$/.test(a)) return (r) => typeof r.status === "number" && Math.floor(r.status / 100) === Number(a[0]);
    if (/^\d{3}$/.test(a)) return (r) => r.status === Number(a);
    throw new FilterError(`~s takes a status (404), a class (4xx) or none, not ${JSON.stringify(arg)}`);
  }

  function fieldTest(op, arg) {
    const needle = arg.toLowerCase();
    switch (op) {
      case "c": return (r) => low(r.connector).includes(needle);
      case "e":
        if (needle !== "read" && needle !== "write") throw new FilterError(`~e takes read or write, not ${JSON.stringify(arg)}`);
        return (r) => low(r.effect) === needle;
      case "m": return (r) => low(r.method).includes(needle);
      case "s": return statusTest(arg);
      case "h": return (r) => hostOf(r.url).toLowerCase().includes(needle);
      case "t": return (r) => low(r.target).includes(needle);
      default: throw new FilterError(`unknown filter ~${op}`);
    }
  }

  const textTest = (needle) => (r) =>
    [r.url, r.method, r.target, r.connector, r.error, r.answered_by].some((v) => low(v).includes(needle));

  // expr := or ; or := and ("|" and)* ; and := unary (("&")? unary)* ; unary := "!" unary | atom
  function parse(text) {
    const toks = tokenize(text);
    let p = 0;
    const peek = () => toks[p];
    const expectMore = (what) => {
      if (p >= toks.length) throw new FilterError(`${what} expected at the end`);
    };
    function atom() {
      expectMore("a filter");
      const t = toks[p++];
      if (t.kind === "(") {
        const inner = or();
        if (!peek() || peek().kind !== ")") throw new FilterError(`")" expected for the "(" at character ${t.at + 1}`);
        p++;
        return inner;
      }
      if (t.kind !== "word") throw new FilterError(`unexpected "${t.kind}" at character ${t.at + 1}`);
      const m = /^~([a-z])$/.exec(t.text);
      if (m) {
        if (!FIELD_OPS.includes(m[1])) throw new FilterError(`unknown filter ~${m[1]} (known: ${FIELD_OPS.map((o) => "~" + o).join(" ")})`);
        const arg = peek();
        if (!arg || arg.kind !== "word") throw new FilterError(`~${m[1]} needs a value (character ${t.at + 1})`);
        p++;
        return fieldTest(m[1], arg.text);
      }
      if (t.text.startsWith("~")) throw new FilterError(`unknown filter ${t.text} (known: ${FIELD_OPS.map((o) => "~" + o).join(" ")})`);
      return textTest(t.text.toLowerCase());
    }
    function unary() {
      expectMore("a filter");
      if (peek().kind === "!") { p++; const x = unary(); return (r) => !x(r); }
      return atom();
    }
    function and() {
      let x = unary();
      while (p < toks.length && peek().kind !== "|" && peek().kind !== ")") {
        if (peek().kind === "&") p++;
        const a = x, b = unary();
        x = (r) => a(r) && b(r);
      }
      return x;
    }
    function or() {
      let x = and();
      while (p < toks.length && peek().kind === "|") {
        p++;
        const a = x, b = and();
        x = (r) => a(r) || b(r);
      }
      return x;
    }
    if (!toks.length) return () => true;
    const test = or();
    if (p < toks.length) throw new FilterError(`unexpected "${toks[p].kind === "word" ? toks[p].text : toks[p].kind}" at character ${toks[p].at + 1}`);
    return test;
  }

  return { parse, hostOf, FilterError };
})();
