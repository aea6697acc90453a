"""Host-independent test endpoints: echo, SSE, big download, slow, status.

Why: the proxy needs the same primitives (streamed uploads/downloads, event streams, timeouts, odd
statuses) under every intercepted host name, answered in that host's error flavour.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

from .bigbody import DEFAULT_CHUNK, big_body_chunks
from .common import (
    HttpError,
    Request,
    Response,
    Route,
    empty_response,
    error_response,
    float_param,
    int_param,
    json_response,
    route,
)

ANY = "any"  # flavour placeholder: the dispatcher substitutes the Host's flavour
MAX_BIG = 1 << 40


def echo(req: Request, _m: re.Match[str]) -> Response:
    """Consume the body streaming and describe it (sha256, size, headers, query)."""
    for _ in req.body.iter():
        pass
    te = (req.header("transfer-encoding") or "").lower()
    return json_response(
        {
            "method": req.method,
            "host": req.host,
            "sni": req.sni,
            "path": req.path,
            "query": req.query,
            "query_string": req.query_string,
            "headers": [[k, v] for k, v in req.headers],
            "sha256": req.body.sha256.hexdigest(),
            "size": req.body.size,
            "chunked": "chunked" in te,
        },
        flavor=req.flavor,
    )


def big_response(
    req: Request, default_size: int = 10 << 20, content_type: str = "application/octet-stream"
) -> Response:
    """Stream ``size`` deterministic bytes (see bigbody); ``chunked=1`` omits Content-Length."""
    size = int_param(req, "size", default_size, 0, MAX_BIG)
    seed = req.query.get("seed") or "big"
    chunk = int_param(req, "chunk", DEFAULT_CHUNK, 1, 4 << 20)
    delay = float_param(req, "delay", 0.0, 0.0, 10.0)
    chunked = req.query.get("chunked", "0") not in ("0", "", "false")

    def gen() -> Iterator[bytes]:
        for piece in big_body_chunks(size, seed, chunk):
            yield piece
            if delay:
                time.sleep(delay)

    return Response(
        status=200,
        body=gen(),
        content_type=content_type,
        length=None if chunked else size,
        headers=[("Content-Disposition", f'attachment; filename="big-{seed}.bin"')],
    )


def big(req: Request, _m: re.Match[str]) -> Response:
    """GET /big?size=N[&seed=S][&chunked=1][&chunk=B][&delay=s]."""
    return big_response(req)


def sse(req: Request, _m: re.Match[str]) -> Response:
    """GET /sse?events=N&interval=S: N events, the first at once, then one every S seconds; then close."""
    events = int_param(req, "events", 3, 0, 100000)
    interval = float_param(req, "interval", 0.2, 0.0, 60.0)
    name = req.query.get("event") or "message"
    padding = int_param(req, "padding", 0, 0, 1 << 20)

    def gen() -> Iterator[bytes]:
        yield b": stream opened\n\n"
        for i in range(events):
            if i:
                time.sleep(interval)
            data = {"n": i + 1, "of": events, "t": round(time.time(), 6)}
            if padding:
                data["pad"] = "x" * padding
            yield f"id: {i + 1}\nevent: {name}\ndata: {json.dumps(data)}\n\n".encode()

    return Response(
        status=200,
        body=gen(),
        content_type="text/event-stream; charset=utf-8",
        headers=[("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
        length=None,
    )


def slow(req: Request, _m: re.Match[str]) -> Response:
    """GET /slow?seconds=S: sleep, then answer (for timeout tests)."""
    seconds = float_param(req, "seconds", 1.0, 0.0, 600.0)
    time.sleep(seconds)
    return json_response({"slept": seconds}, flavor=req.flavor)


def status(req: Request, m: re.Match[str]) -> Response:
    """ANY /status/{code}: that status, in the host's flavour."""
    for _ in req.body.iter():
        pass
    code = int(m.group(1))
    if not 200 <= code <= 599:
        raise HttpError(400, f"unsupported status {code}")
    if code in (204, 304):
        return empty_response(code)
    if 300 <= code < 400:
        resp = json_response({"status": code}, status=code, flavor=req.flavor)
        resp.headers.append(("Location", req.query.get("location") or "/echo"))
        return resp
    if code >= 400:
        resp = error_response(req.flavor, code, req.query.get("message") or f"status {code}")
        if code in (429, 503):
            resp.headers.append(("Retry-After", "1"))
        return resp
    return json_response({"status": code}, status=code, flavor=req.flavor)


def routes() -> list[Route]:
    """Routes valid on every host."""
    every = "GET HEAD POST PUT PATCH DELETE OPTIONS"
    return [
        route("POST PUT PATCH GET DELETE", None, r"/echo", echo, ANY, public=True),
        route("GET HEAD", None, r"/big", big, ANY, public=True),
        route("GET", None, r"/sse", sse, ANY, public=True),
        route("GET HEAD POST", None, r"/slow", slow, ANY, public=True),
        route(every, None, r"/status/(\d{3})", status, ANY, public=True),
    ]
