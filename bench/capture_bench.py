"""CPU each captured HTTPS call costs on the recording path, stage by stage, for realistic calls.

    python -m bench.capture_bench [--quick] [--rounds R] [--calls N] [--json FILE] [--profile]

The calls (built in this process, fixed seed; the raw material exactly as the connector-journal addon
hands it to the recording service: raw header fields as bytes pairs, bodies as on the wire):

- Gmail messages.list: GET with a Bearer ya29 token, gzip JSON answer of 20 message ids;
- Gmail messages.get: GET, gzip JSON answer of about 40 KB (headers, base64url parts), a snippet that
  holds a password-reset link with `token=` (a credential in the body);
- Drive upload: POST multipart/related, JSON metadata plus 1 MB of binary (held, not streamed: under
  the spill threshold), small JSON answer;
- Slack chat.postMessage: POST JSON with a Bearer xoxb token, the message text holding a pasted
  xoxp token, the answer echoing it.

Stages, each timed on its own (thread CPU time, per call; median of R rounds of N repetitions):

- material: `frame` of the request and response halves in the proxy, and `split_to_service` in the
  service (the MessagePack-encoded `Call` of broker/proxy/wire.py between them);
- redaction: `redact_url`, `redact_headers` of both header lists, and the body scan of the decoded
  request and response bodies (what `record_body` redacts);
- fields: `call_fields`, the service's whole mapping from a `Call` to entry fields (redaction,
  decoding, parsing, classification included);
- entry: what the writer does per entry before its write: `validate_fields`, `fit_entry`,
  `orjson_matches_jcs` and `chain_entry` (canonical form and SHA-256);
- service, whole: the recording service's handling of the call's two frames (`Service.handle`,
  `prepare_pending`, the writer's append to a vault opened without fsync, the acknowledgement frame):
  all of the above but the proxy's `frame`, plus the write itself.

Baselines, same run, same calls: mitmproxy's own HTTP/1 work for the same request and response
(`assemble_request`/`assemble_response` and parsing both heads back), and an orjson round trip of the
entry fields. Ratios are stage / mitmproxy's baseline (lower is better).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable

import msgspec
import orjson

from bench import machine, scratch_dir, write_json

_WORDS = ("the", "meeting", "agenda", "invoice", "quarterly", "report", "attached", "please", "review",
          "before", "friday", "thanks", "budget", "draft", "project", "status", "update", "team")  # fmt: skip
YA29 = "ya29.a0AfB_byC8exampleEXAMPLEexample0123456789abcdefABCDEF_-xyz"
XOXB = "xoxb-1234567890123-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
XOXP = "xoxp-2234567890123-2234567890123-2234567890123-0123456789abcdef0123456789abcdef"
UA = b"google-api-python-client/2.150.0 (gzip)"


def _req_headers(host: str, auth: str, extra: list[tuple[str, str]] = ()) -> tuple[tuple[bytes, bytes], ...]:
    base = [("Host", host), ("User-Agent", UA.decode()), ("Accept", "application/json"),
            ("Accept-Encoding", "gzip, deflate"), ("Authorization", f"Bearer {auth}"),
            ("x-goog-api-client", "gdcl/2.150.0 gl-python/3.12.7")]  # fmt: skip
    return tuple((k.encode(), v.encode()) for k, v in [*base, *extra])


def _google_resp_headers(body: bytes, ctype: str = "application/json; charset=UTF-8") -> tuple:
    h = [("Content-Type", ctype), ("Vary", "Origin"), ("Vary", "X-Origin"), ("Vary", "Referer"),
         ("Content-Encoding", "gzip"), ("Date", "Tue, 01 Dec 2026 13:50:25 GMT"), ("Server", "ESF"),
         ("Cache-Control", "private"), ("X-XSS-Protection", "0"), ("X-Frame-Options", "SAMEORIGIN"),
         ("X-Content-Type-Options", "nosniff"), ("Alt-Svc", 'h3=":443"; ma=2592000,h3-29=":443"; ma=2592000'),
         ("Content-Length", str(len(body)))]  # fmt: skip
    return tuple((k.encode(), v.encode()) for k, v in h)


def calls() -> list[tuple[str, dict]]:
    """(name, whole material) for each realistic call."""
    rng = random.Random(20261201)
    hexid = lambda: f"{rng.getrandbits(64):016x}"  # noqa: E731
    out = []

    ids = [{"id": hexid(), "threadId": hexid()} for _ in range(20)]
    body = gzip.compress(orjson.dumps({"messages": ids, "nextPageToken": "09876543210123456789",
                                       "resultSizeEstimate": 201}), 6)  # fmt: skip
    out.append(("Gmail messages.list", {
        "method": "GET", "url": "https://gmail.googleapis.com/gmail/v1/users/me/messages?maxResults=20&q=in%3Ainbox",
        "request_headers": _req_headers("gmail.googleapis.com", YA29), "request_body": None,
        "status": 200, "response_headers": _google_resp_headers(body), "response_body": body,
    }))  # fmt: skip

    html = "".join(f"<p>{' '.join(rng.choices(_WORDS, k=14))}</p>\n" for _ in range(300)).encode()
    text = " ".join(rng.choices(_WORDS, k=2000)).encode()
    headers = [{"name": n, "value": v} for n, v in (
        ("Delivered-To", "me@example.com"), ("Received", "by 2002:a05:6a10:1234 with SMTP id abc;"),
        ("From", "Alice Example <alice@example.com>"), ("To", "me@example.com"),
        ("Subject", "Reset your password"), ("Date", "Tue, 01 Dec 2026 09:14:00 +0000"),
        ("Message-ID", f"<{hexid()}@mail.example.com>"), ("Content-Type", "multipart/alternative"))]  # fmt: skip
    msg = {
        "id": hexid(), "threadId": hexid(), "labelIds": ["INBOX", "UNREAD", "CATEGORY_UPDATES"],
        "snippet": "Click https://accounts.example.com/reset?user=me&token=Zx81kd92LmQpRt7vWb3n to reset it",
        "payload": {"partId": "", "mimeType": "multipart/alternative", "filename": "", "headers": headers,
                    "body": {"size": 0}, "parts": [
                        {"partId": "0", "mimeType": "text/plain", "filename": "", "headers": [],
                         "body": {"size": len(text), "data": base64.urlsafe_b64encode(text).decode()}},
                        {"partId": "1", "mimeType": "text/html", "filename": "", "headers": [],
                         "body": {"size": len(html), "data": base64.urlsafe_b64encode(html).decode()}}]},
        "sizeEstimate": 40321, "historyId": "1234567", "internalDate": "1796000000000",
    }  # fmt: skip
    body = gzip.compress(orjson.dumps(msg), 6)
    out.append(("Gmail messages.get", {
        "method": "GET", "url": f"https://gmail.googleapis.com/gmail/v1/users/me/messages/{msg['id']}?format=full",
        "request_headers": _req_headers("gmail.googleapis.com", YA29), "request_body": None,
        "status": 200, "response_headers": _google_resp_headers(body), "response_body": body,
    }))  # fmt: skip

    boundary = "===============7330845974216740156=="
    upload = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
        + orjson.dumps({"name": "q3-report.pdf", "parents": ["1AbCdEfGhIjKlMnOp"], "mimeType": "application/pdf"})
        + f"\r\n--{boundary}\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: binary\r\n\r\n".encode()
        + rng.randbytes(1_000_000) + f"\r\n--{boundary}--".encode()
    )
    meta = gzip.compress(orjson.dumps({"kind": "drive#file", "id": "1" + hexid() + hexid(), "name": "q3-report.pdf",
                                       "mimeType": "application/pdf"}))  # fmt: skip
    out.append(("Drive upload, 1 MB multipart", {
        "method": "POST", "url": "https://www.googleapis.com/upload/drive/v3/files?uploadType=multipart&alt=json",
        "request_headers": _req_headers("www.googleapis.com", YA29, [
            ("content-type", f'multipart/related; boundary="{boundary}"'), ("content-length", str(len(upload)))]),
        "request_body": upload, "status": 200, "response_headers": _google_resp_headers(meta), "response_body": meta,
    }))  # fmt: skip

    post = orjson.dumps({"channel": "C0123456789", "text": f"deploy key for the bot is {XOXP}, rotate it after",
                         "unfurl_links": False})  # fmt: skip
    answer = orjson.dumps({"ok": True, "channel": "C0123456789", "ts": "1796000000.123456", "message": {
        "user": "U0123456789", "type": "message", "ts": "1796000000.123456", "bot_id": "B0123456789",
        "app_id": "A0123456789", "text": f"deploy key for the bot is {XOXP}, rotate it after", "team": "T0123456789",
        "blocks": [{"type": "rich_text", "block_id": "abc12", "elements": [{"type": "rich_text_section", "elements": [
            {"type": "text", "text": f"deploy key for the bot is {XOXP}, rotate it after"}]}]}]},
        "response_metadata": {"warnings": ["missing_charset"]}, "warning": "missing_charset"})  # fmt: skip
    slack_headers = tuple((k.encode(), v.encode()) for k, v in (
        ("Host", "slack.com"), ("User-Agent", "Python/3.12 slacksdk/3.33.1"), ("Accept-Encoding", "identity"),
        ("Content-Type", "application/json;charset=utf-8"), ("Authorization", f"Bearer {XOXB}"),
        ("Content-Length", str(len(post)))))  # fmt: skip
    slack_resp = tuple((k.encode(), v.encode()) for k, v in (
        ("date", "Tue, 01 Dec 2026 13:50:25 GMT"), ("server", "Apache"), ("vary", "Accept-Encoding"),
        ("x-slack-req-id", hexid()), ("x-oauth-scopes", "chat:write,channels:read"),
        ("x-accepted-oauth-scopes", "chat:write"),
        ("access-control-expose-headers", "x-slack-req-id, retry-after"), ("x-slack-backend", "r"),
        ("referrer-policy", "no-referrer"), ("x-slack-unique-id", hexid()), ("access-control-allow-headers",
        "slack-route, x-slack-version-ts, x-b3-traceid, x-b3-spanid"), ("strict-transport-security",
        "max-age=31536000; includeSubDomains; preload"), ("access-control-allow-origin", "*"),
        ("content-type", "application/json; charset=utf-8"), ("content-length", str(len(answer)))))  # fmt: skip
    out.append(("Slack chat.postMessage", {
        "method": "POST", "url": "https://slack.com/api/chat.postMessage", "request_headers": slack_headers,
        "request_body": post, "status": 200, "response_headers": slack_resp, "response_body": answer,
    }))  # fmt: skip

    for i, (_name, m) in enumerate(out):
        m.update({"session": "bench-capture", "agent": "bench", "principal": None,
                  "connector": "unknown", "error": None, "ts": 1796000000.25 + i, "mcp": None})  # fmt: skip
    return out


def to_call(m: dict):
    """The whole `journal.call.Call` of a call's material, as the addon builds it."""
    from journal.call import Call, Identity, Request, Response

    return Call(Identity(m["session"], m["agent"], m["principal"]), m["connector"],
                Request(m["method"], m["url"], m["request_headers"], m["request_body"]),
                Response(m["status"], m["response_headers"], m["response_body"], m["error"]),
                ts=m["ts"], mcp=m["mcp"])


def halves(m: dict, call_id: int = 1) -> tuple:
    """The two messages the addon sends for a call (`send_request`, then `finish`)."""
    from broker.proxy.wire import Completion, RequestAhead

    whole = to_call(m)
    req = RequestAhead(call_id, msgspec.structs.replace(whole, response=None))
    return req, Completion(call_id, whole.response, whole.ts, whole.mcp)


def _mitm_messages(m: dict):
    from mitmproxy import http

    req = http.Request.make(m["method"], m["url"], m["request_body"] or b"", m["request_headers"])
    req.headers.fields = m["request_headers"]  # as received, including Content-Length
    resp = http.Response.make(m["status"], m["response_body"] or b"", m["response_headers"])
    resp.headers.fields = m["response_headers"]
    return req, resp


def stages(rec, m: dict) -> dict[str, Callable[[], object]]:
    """The timed stages of one call (closures over its prepared inputs)."""
    from mitmproxy.net.http.http1 import assemble, read

    from broker.proxy.service import Service, call_fields
    from broker.proxy.wire import frame, split_to_service
    from journal.bodies import ContentDecoder, fit_entry
    from journal.canonical import orjson_matches_jcs
    from journal.chain import GENESIS, chain_entry
    from journal.entry import validate_fields
    from journal.record import text_pairs
    from journal.redact import header_value, redact_body, redact_headers, redact_url

    req_half, resp_half = halves(m)
    wire = bytearray(frame(req_half) + frame(resp_half))
    whole = to_call(m)
    rh, sh = text_pairs(m["request_headers"]), text_pairs(m["response_headers"])

    def plain(body: bytes | None, headers) -> bytes | None:
        if not body:
            return None
        dec = ContentDecoder(header_value(headers, "content-encoding"))
        return dec.feed(body) + dec.flush() if dec.active else body

    req_plain, resp_plain = plain(m["request_body"], rh), plain(m["response_body"], sh)
    req_type, resp_type = header_value(rh, "content-type"), header_value(sh, "content-type")
    fields = call_fields(rec, whole)
    req, resp = _mitm_messages(m)

    def redaction() -> None:
        redact_url(m["url"])
        redact_headers(text_pairs(m["request_headers"]))
        redact_headers(text_pairs(m["response_headers"]))
        if req_plain:
            redact_body(req_plain, req_type)
        if resp_plain:
            redact_body(resp_plain, resp_type)

    def entry() -> None:
        validate_fields(fields)
        f = fit_entry(fields, rec.blobs)
        chain_entry(f, 2, GENESIS, orjson_ok=orjson_matches_jcs(f))

    service = Service(rec)
    ids = iter(range(1, 1 << 62))

    def whole_service() -> None:
        """What the recording service does per call, as `serve` does it: the request frame (its half
        prepared while the call is upstream), then the response frame, recorded and acknowledged."""
        call_id = next(ids)
        req_half.id = resp_half.id = call_id
        frames, _ = split_to_service(bytearray(frame(req_half)))
        service.handle(frames)
        service.prepare_pending()
        frames, _ = split_to_service(bytearray(frame(resp_half)))
        acks = service.handle(frames)
        frame(acks)

    def mitmproxy_http1() -> None:
        head_q = assemble.assemble_request_head(req)
        head_s = assemble.assemble_response_head(resp)
        assemble.assemble_request(req)
        assemble.assemble_response(resp)
        read.read_request_head(head_q.split(b"\r\n")[:-2])
        read.read_response_head(head_s.split(b"\r\n")[:-2])

    return {
        "material: frame (proxy)": lambda: (frame(req_half), frame(resp_half)),
        "material: split_to_service (service)": lambda: split_to_service(wire),
        "redaction (url, headers, bodies)": redaction,
        "fields (call_fields, whole)": lambda: call_fields(rec, whole),
        "entry (validate, fit, canonical, hash)": entry,
        "service, whole (frames, fields, append, no fsync)": whole_service,
        "baseline: mitmproxy HTTP/1 assemble + parse": mitmproxy_http1,
        "baseline: orjson round trip of the fields": lambda: orjson.loads(orjson.dumps(fields)),
    }


def measure(rec, named: list[tuple[str, dict]], rounds: int, n: int) -> list[dict]:
    """Per call and stage: median (and min, max) over `rounds` of the mean µs over `n` repetitions."""
    clock = time.thread_time_ns
    rows = []
    for name, m in named:
        st = stages(rec, m)
        reps = max(1, n // 10) if len(m.get("request_body") or b"") > 100_000 else n
        samples: dict[str, list[float]] = {label: [] for label in st}
        for r in range(rounds + 1):
            for label, fn in st.items():
                a = clock()
                for _ in range(reps):
                    fn()
                if r:  # round 0 warms up
                    samples[label].append((clock() - a) / reps / 1e3)
        base = statistics.median(samples["baseline: mitmproxy HTTP/1 assemble + parse"])
        for label, vals in samples.items():
            med = statistics.median(vals)
            rows.append({"call": name, "stage": label, "us": med, "min_us": min(vals), "max_us": max(vals),
                         "ratio": med / base, "repetitions": reps})  # fmt: skip
    return rows


def format_rows(rows: list[dict]) -> str:
    out, call = [], None
    for r in rows:
        if r["call"] != call:
            call = r["call"]
            out.append(f"\n{call}  (µs per call, median of rounds [min-max]; ratio over mitmproxy's HTTP/1 work)")
        out.append(f"  {r['stage']:<46} {r['us']:9.1f}  [{r['min_us']:.1f}-{r['max_us']:.1f}]  {r['ratio']:6.2f}")
    return "\n".join(out)


def profile(rec, named: list[tuple[str, dict]], n: int) -> str:
    """cProfile of `call_fields` over the calls, top functions by own time."""
    import cProfile
    import io
    import pstats

    from broker.proxy.service import call_fields

    whole = [to_call(m) for _name, m in named]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        for c in whole:
            call_fields(rec, c)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(30)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.capture_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and repetitions")
    p.add_argument("--rounds", type=int, default=None, help="rounds per stage (median reported); default 7, quick 3")
    p.add_argument("--calls", type=int, default=None, help="repetitions per round; default 200, quick 50")
    p.add_argument("--json", metavar="FILE", help="write the figures under the key capture_bench")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of call_fields")
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    n = args.calls or (50 if args.quick else 200)

    from journal.record import Recorder

    root = scratch_dir("capture-")
    rec = Recorder(root / "vault", durable=False)
    try:
        named = calls()
        rows = measure(rec, named, rounds, n)
        print(f"capture_bench: {rounds} rounds x {n} repetitions (Drive upload: {max(1, n // 10)}), thread CPU time")
        print(format_rows(rows))
        if args.profile:
            print("\n== cProfile of call_fields over the four calls\n" + profile(rec, named, max(1, n // 4)))
        if args.json:
            write_json(args.json, "capture_bench", {"machine": machine(), "rounds": rounds, "repetitions": n,
                                                     "rows": rows})  # fmt: skip
    finally:
        rec.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
