// "Copy as curl / HTTPie / Python (requests)": one implementation, for a recorded entry's request and
// for each inverse call of a revert plan.
//
// A call is {method, url, headers: [[name, value], ...], body}; body as the journal holds it: null, a
// string (text), a JSON value, {"base64": ...} (bytes) or a blob reference {"sha256", "size", "ref"}.
// Nothing is made up: values are written as recorded, so a redacted value stays the redaction marker
// ("[never captured]", or any "<redacted:...>") and is listed in `redacted` for the page to say so;
// bytes and spilled blobs are not inlined (the command reads a file the page offers as a download).
// Content-Length and Host are left to the tool. A call that is not HTTP(S) (an MCP call over stdio)
// has no command: `build` returns {error}.
"use strict";

const CopyAs = (() => {
  const MARKERS = [/\[never captured\]/, /\[never%20captured\]/, /<redacted:[^>]*>/];
  const SKIP = new Set(["content-length", "host", "transfer-encoding", "connection"]);

  const isRef = (v) => v && typeof v === "object" && !Array.isArray(v) && typeof v.sha256 === "string" && typeof v.ref === "string";
  const isB64 = (v) => v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 1 && typeof v.base64 === "string";
  const redactedIn = (s) => typeof s === "string" && MARKERS.some((m) => m.test(s));

  function findRedacted(value, where, out) {
    if (typeof value === "string") { if (redactedIn(value)) out.push(where); }
    else if (Array.isArray(value)) value.forEach((x, i) => findRedacted(x, `${where}[${i}]`, out));
    else if (value && typeof value === "object") for (const k of Object.keys(value)) findRedacted(value[k], `${where}.${k}`, out);
    return out;
  }

  // POSIX shell single quotes: nothing inside is expanded; a ' is closed, escaped, reopened.
  const sh = (s) => "'" + String(s).replace(/'/g, "'\\''") + "'";

  // A Python string literal (double quotes, escapes for anything not printable ASCII).
  function py(s) {
    let out = '"';
    for (const ch of String(s)) {
      const c = ch.codePointAt(0);
      if (ch === "\\") out += "\\\\";
      else if (ch === '"') out += '\\"';
      else if (ch === "\n") out += "\\n";
      else if (ch === "\r") out += "\\r";
      else if (ch === "\t") out += "\\t";
      else if (c < 0x20 || (c >= 0x7f && c < 0xa0) || (c >= 0xd800 && c < 0xe000)) out += "\\u" + c.toString(16).padStart(4, "0");
      else out += ch;
    }
    return out + '"';
  }
  function pyValue(v, indent = "") {
    if (v === null) return "None";
    if (v === true) return "True";
    if (v === false) return "False";
    if (typeof v === "number") return Number.isFinite(v) ? String(v) : "None";
    if (typeof v === "string") return py(v);
    const inner = indent + "    ";
    if (Array.isArray(v)) return v.length ? "[\n" + v.map((x) => inner + pyValue(x, inner)).join(",\n") + ",\n" + indent + "]" : "[]";
    const keys = Object.keys(v);
    return keys.length ? "{\n" + keys.map((k) => `${inner}${py(k)}: ${pyValue(v[k], inner)}`).join(",\n") + ",\n" + indent + "}" : "{}";
  }

  function headerList(call) {
    return (Array.isArray(call.headers) ? call.headers : [])
      .filter((h) => Array.isArray(h) && h.length === 2 && !SKIP.has(String(h[0]).toLowerCase()))
      .map((h) => [String(h[0]), String(h[1])]);
  }
  const hasHeader = (hs, name) => hs.some(([k]) => k.toLowerCase() === name);

  // The body as the tools take it: {kind: "none"|"text"|"json"|"file", text?, file?, value?}.
  function bodyOf(call) {
    const b = call.body;
    if (b === null || b === undefined || b === "") return { kind: "none" };
    if (typeof b === "string") return { kind: "text", text: b };
    if (isB64(b) || isRef(b)) return { kind: "file", file: call.bodyFile || "request-body.bin" };
    return { kind: "json", value: b, text: JSON.stringify(b) };
  }

  function build(call, tool) {
    const method = String(call.method || "GET");
    const url = String(call.url || "");
    if (!/^https?:\/\//i.test(url)) return { error: `not an HTTP call (${url.split(":")[0] || "no URL"}): nothing to copy as ${tool}` };
    const headers = headerList(call);
    const body = bodyOf(call);
    if (body.kind === "json" && !hasHeader(headers, "content-type")) headers.push(["Content-Type", "application/json"]);
    const redacted = [];
    if (redactedIn(url)) redacted.push("url");
    for (const [k, v] of headers) if (redactedIn(v)) redacted.push(`header ${k}`);
    if (body.kind === "text" && redactedIn(body.text)) redacted.push("body");
    if (body.kind === "json") redacted.push(...findRedacted(body.value, "body", []));
    const notes = [];
    if (body.kind === "file") notes.push(`the body is bytes, not inlined: download it as ${body.file}`);
    let text;
    if (tool === "curl") {
      const lines = [`curl -X ${sh(method)} ${sh(url)}`];
      for (const [k, v] of headers) lines.push(`-H ${sh(`${k}: ${v}`)}`);
      if (body.kind === "text" || body.kind === "json") lines.push(`--data-raw ${sh(body.text)}`);
      if (body.kind === "file") lines.push(`--data-binary ${sh("@" + body.file)}`);
      text = lines.join(" \\\n  ");
    } else if (tool === "httpie") {
      const lines = [`http ${body.kind === "file" ? "" : "--ignore-stdin "}${sh(method)} ${sh(url)}`];
      for (const [k, v] of headers) lines.push(sh(`${k}:${v}`));
      if (body.kind === "text" || body.kind === "json") lines.push(`--raw ${sh(body.text)}`);
      if (body.kind === "file") lines.push(`< ${sh(body.file)}`);
      text = lines.join(" \\\n  ");
    } else if (tool === "python") {
      const lines = ["import requests", ""];
      lines.push(`headers = ${pyValue(Object.fromEntries(headers))}`);
      const args = [py(method), py(url), "headers=headers"];
      if (body.kind === "json") { lines.push(`payload = ${pyValue(body.value)}`); args.push("json=payload"); }
      if (body.kind === "text") { lines.push(`payload = ${py(body.text)}`); args.push('data=payload.encode("utf-8")'); }
      if (body.kind === "file") { lines.push(`with open(${py(body.file)}, "rb") as f:`, "    payload = f.read()"); args.push("data=payload"); }
      lines.push(`response = requests.request(${args.join(", ")}, timeout=30)`, "print(response.status_code, response.text)");
      text = lines.join("\n");
    } else throw new Error(`unknown tool ${tool}`);
    return { text, redacted, notes };
  }

  return { build, TOOLS: [["curl", "curl"], ["httpie", "HTTPie"], ["python", "Python (requests)"]], redactedIn };
})();
