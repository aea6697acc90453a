"""The inspector's JSON API: thin handlers over the journal's own readers.

Every session id arrives as the `session` query parameter and goes through the vault's mapping
rule (journal/vault.py), so no parameter can name a file outside the vault. Entries are served
as recorded: `/api/session/entry` hands back the raw line too, so the page can hash what it
shows itself.
"""

from __future__ import annotations

import hashlib
import os

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from journal.blob_read import BlobMismatch, open_recorded_blob, verified_chunks
from journal.confine import NotConfined, is_blob_name
from journal.errors import BrokerError
from journal.export.recorded_body import BlobUnavailable, BodyUndecodable, body_kind, decode_body, header
from journal.listing import entry_row
from journal.reader import RowSource, parse_entry, session_lines, session_size
from journal.replay import Replay
from journal.replay.labels import resource_id, title
from journal.replay.plan import plan_dict
from journal.search import Query, search
from journal.summary import summarize_session
from journal.vault import SessionIdError, Vault, VaultError

from .sessions import Folded, Pending, SessionIndex

MAX_PAGE = 1000
MAX_SEARCH = 5000


class ApiError(BrokerError):
    """An answer other than 200, with a message for the page to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(value: object, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json",
                    headers={"cache-control": "no-store"})


def _int(request: Request, name: str, default: int | None = None, low: int = 0, high: int = 1 << 62) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ApiError(400, f"parameter {name} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"parameter {name} must be an integer, not {raw!r}") from None
    return max(low, min(high, value))


def _pending(got: Pending) -> Response:
    """202: a replay still being folded in the background, with the bytes it has read so far."""
    return json_response({"pending": True, "done": got.done, "total": got.total}, 202)


def _lines_read(replay: Replay) -> int:
    """How many lines `replay` folded: every one it read, past a break too (untrusted there, or unreadable),
    not the verifier's count of those that verified before it."""
    return replay.counts.entries + replay.counts.unreadable


def _as_of(got: Folded) -> dict:
    """`current`, and for a replay of the file before it grew how much of it the replay read (the page says
    so; the replay of the file as it is now is under way): the lines it folded, the bytes that verified."""
    if got.current:
        return {"current": True}
    return {"current": False, "replay_of": {"entries": _lines_read(got.replay), "bytes": got.replay.report.bytes}}


def _bytes(vault: Vault, session: str) -> int:
    """A session's size for the list of names: a file's, or 0 for a database store (asked at once, not summed)."""
    return 0 if isinstance(vault, RowSource) else vault.session_path(session).lstat().st_size


class Api:
    """Handlers bound to one vault."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.index = SessionIndex(vault)

    def session(self, request: Request) -> str:
        sid = request.query_params.get("session")
        if not sid:
            raise ApiError(400, "parameter session is required")
        try:
            self.vault.require_session(sid)
        except SessionIdError as exc:
            raise ApiError(404, f"no such session: {exc}") from None
        except VaultError:
            raise ApiError(404, f"no session {sid!r} in this vault") from None
        return sid

    # -- the vault ----------------------------------------------------------------------------------

    def vault_info(self, request: Request) -> Response:
        root = str(getattr(self.vault, "label", self.vault.root))
        return json_response({"root": root, "sessions": len(self.vault.sessions()), "fixture_export": True})

    def sessions(self, request: Request) -> Response:
        """Every session's summary; with `names=1` only the ids and file sizes (at once, for a large vault)."""
        if request.query_params.get("names"):
            return json_response([{"session": s, "bytes": _bytes(self.vault, s)} for s in self.vault.sessions()])
        return json_response([self._summary(s) for s in self.vault.sessions()])

    def _summary(self, session: str) -> dict:
        try:
            return self.index.summary(session)
        except NotConfined:  # a session file that is not read: its row says why (journal/confine.py)
            return summarize_session(self.vault, session)

    # -- one session ----------------------------------------------------------------------------------

    def summary(self, request: Request) -> Response:
        return json_response(self.index.summary(self.session(request)))

    def verdict(self, request: Request) -> Response:
        """The server's `broker verify` verdict on the file as it is now."""
        r = self.index.verdict(self.session(request))
        return json_response({k: getattr(r, k) for k in
                              ("session", "entries", "intact", "broken_at_seq", "kind", "detail", "notes", "bytes")})

    def head(self, request: Request) -> Response:
        return json_response(self.index.head(self.session(request)))

    def entries(self, request: Request) -> Response:
        """A page of timeline rows from line `from` on; `prev_ts` is the time of the line before it (for the gap)."""
        sid = self.session(request)
        first = _int(request, "from", 1, low=1)
        limit = _int(request, "limit", 200, low=1, high=MAX_PAGE)
        start = max(1, first - 1)
        total, lines = self.index.lines(sid, start, limit + (first - start))
        rows = []
        prev_ts = None
        for i, data in enumerate(lines, start):
            entry = parse_entry(data)
            row = entry_row(entry, i) if entry is not None else {"line": i, "unreadable": True}
            row["raw"] = data.decode("utf-8", errors="replace")  # the page draws and hashes this, not the fields
            if i < first:
                prev_ts = row.get("ts")
                continue
            rows.append(row)
        return json_response({"session": sid, "total": total, "from": first, "prev_ts": prev_ts, "rows": rows})

    def entry(self, request: Request) -> Response:
        """One line as recorded (`raw`, the exact text the page hashes) and parsed (`entry`)."""
        sid = self.session(request)
        n = _int(request, "seq", low=1)
        data, prev = self.index.entry_lines(sid, n)
        if data is None:
            raise ApiError(404, f"session {sid!r} has no line {n}")
        prev_entry = parse_entry(prev)
        return json_response({
            "session": sid, "line": n, "raw": data.decode("utf-8", errors="replace"),
            "entry": parse_entry(data), "prev_ts": prev_entry.get("ts") if prev_entry else None,
        })

    def raw(self, request: Request) -> Response:
        """The session file's bytes from `offset` (a line start the page got earlier) to its last complete
        line, for the page's own chain check. X-Complete-Bytes says where that is."""
        sid = self.session(request)
        offset = _int(request, "offset", 0)
        if isinstance(self.vault, RowSource):
            return self._raw_rows(sid, offset)
        head = self.index.head(sid)
        end = head["bytes"]  # the whole file: a torn last line is part of what the page must judge
        if offset > end:
            offset = end
        f = os.fdopen(self.vault.open_session(sid), "rb")  # a regular file inside the vault, no link followed

        def chunks():
            with f:
                f.seek(offset)
                left = end - offset
                while left > 0:
                    block = f.read(min(left, 1 << 20))
                    if not block:
                        break
                    left -= len(block)
                    yield block

        return StreamingResponse(chunks(), media_type="application/octet-stream", headers={
            "cache-control": "no-store", "x-file-bytes": str(end), "x-offset": str(offset),
        })

    def _raw_rows(self, sid: str, offset: int) -> Response:
        """`raw` for a database store: the lines a pulled file would hold, streamed a page of rows at a time."""
        end = session_size(self.vault, sid)
        offset = min(offset, end)

        def chunks():
            for line in session_lines(self.vault, sid, offset):
                yield line.data

        return StreamingResponse(chunks(), media_type="application/octet-stream", headers={
            "cache-control": "no-store", "x-file-bytes": str(end), "x-offset": str(offset),
        })

    def writes(self, request: Request) -> Response:
        """Replay's record of each write at line `seq`: before, intended, actual and their differences; or 202
        with how far the session's fold has read while it runs in the background (the page asks again)."""
        sid = self.session(request)
        n = _int(request, "seq", low=1)
        got = self.index.replay(sid)
        if isinstance(got, Pending):
            return _pending(got)
        if not got.current and n > _lines_read(got.replay):  # a line the replay of the shorter file never saw
            return _pending(got.pending or Pending(0, 0))
        out = []
        for res, _parent, _children in got.views.resources():  # streamed from replay's spill store
            for w in res.writes:
                if w.pos == n:
                    out.append(w.fields | {"plan_step": w.step, "resource": resource_id(res.key),
                                           "title": title(res.key)})
        return json_response({"session": sid, "seq": n, "chain": got.replay.chain_summary(), "writes": out,
                              **_as_of(got)})

    def views(self, request: Request) -> Response:
        """Every resource replay found, or 202 with the fold's progress (as `writes`)."""
        sid = self.session(request)
        got = self.index.replay(sid)
        if isinstance(got, Pending):
            return _pending(got)
        rp, views = got.replay, got.views
        return json_response({"session": sid, "chain": rp.chain_summary(),
                              "resources": [views.resource_dict(res, children)
                                            for res, _parent, children in views.resources()],
                              "unreadable_lines": [{"line": p, "why": why} for p, why in rp.unreadable],
                              **_as_of(got)})

    def revert_plan(self, request: Request) -> Response:
        """The plan, or 202 with how far its fold has read while it is built in the background (a long
        session takes a while: the page asks again and shows the progress)."""
        got = self.index.revert_plan(self.session(request))
        if isinstance(got, Pending):
            return _pending(got)
        return json_response(plan_dict(got.replay) | _as_of(got))

    # -- downloads ------------------------------------------------------------------------------------

    def blob(self, request: Request) -> Response:
        digest = request.query_params.get("sha256", "")
        if not is_blob_name(digest):
            raise ApiError(400, "parameter sha256 must be 64 lowercase hex digits")
        try:
            f = open_recorded_blob(self.vault, digest)  # a regular file inside the vault, no link followed,
        except BlobMismatch as exc:  # whose bytes hash to its name (the page labels the link with it)
            raise ApiError(409, str(exc)) from None
        except FileNotFoundError:
            raise ApiError(404, f"blob {digest} is not in the vault") from None
        except NotConfined as exc:
            raise ApiError(404, f"blob {digest} is not served: {exc}") from None
        # hashed again as it streams: an edit after the check ends the answer short of its length
        return StreamingResponse(verified_chunks(f, digest), media_type="application/octet-stream", headers={
            "content-disposition": f'attachment; filename="{digest}.bin"', "cache-control": "no-store",
            "content-length": str(os.fstat(f.fileno()).st_size),
        })

    def body(self, request: Request) -> Response:
        """A recorded body as a file: base64 bodies decoded, text and JSON as recorded."""
        sid = self.session(request)
        n = _int(request, "seq", low=1)
        part = request.query_params.get("part")
        if part not in ("request", "response"):
            raise ApiError(400, "parameter part must be request or response")
        data = self.index.line(sid, n)
        entry = parse_entry(data)
        if entry is None or not isinstance(entry.get(part), dict):
            raise ApiError(404, f"session {sid!r} has no readable line {n}")
        body = entry[part].get("body")
        ctype = header(entry[part].get("headers") or [], "content-type")
        if body_kind(body, ctype) in ("json", "empty"):  # as recorded, indented (spilled strings stay references)
            payload, ext = orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS), "json"
        else:
            try:
                payload, kind = decode_body(body, ctype, self.vault)
            except BodyUndecodable as exc:
                raise ApiError(422, str(exc)) from None
            except BlobUnavailable as exc:
                raise ApiError(404, str(exc)) from None
            ext = "txt" if kind == "text" else "bin"
        return Response(payload, media_type="application/octet-stream", headers={
            "content-disposition": f'attachment; filename="seq-{n}-{part}.{ext}"', "cache-control": "no-store",
            "x-body-sha256": hashlib.sha256(payload).hexdigest(),
        })

    # -- search and export ------------------------------------------------------------------------------

    def search(self, request: Request) -> Response:
        params = {k: v for k, v in request.query_params.items() if k not in ("limit", "token")}
        limit = _int(request, "limit", 500, low=1, high=MAX_SEARCH)
        try:
            query = Query.from_mapping(params)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        if query.session is not None:
            self.session(request)
        rows: list[dict] = []
        more = False
        for m in search(self.vault, query):
            if len(rows) == limit:
                more = True
                break
            row = entry_row(m.entry, m.line)
            row["session"] = m.session
            rows.append(row)
        return json_response({"rows": rows, "more": more, "limit": limit})

    def fixture(self, request: Request) -> Response:
        """The session as a test fixture (journal/export/fixture.py), as `broker export --format fixture` writes it."""
        from journal.export.fixture import build_fixture, fixture_bytes

        sid = self.session(request)
        data = fixture_bytes(build_fixture(self.vault, sid))
        name = self.vault.session_path(sid).name[: -len(".jsonl")]
        return Response(data, media_type="application/json", headers={
            "content-disposition": f'attachment; filename="{name}.fixture.json"', "cache-control": "no-store",
        })
