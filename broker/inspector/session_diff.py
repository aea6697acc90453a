"""Two sessions compared in the page: the comparison `broker diff` makes (journal/diff.py), with both
sides' calls so the page can set them side by side."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from journal.diff import diff_calls, session_calls
from journal.vault import SessionIdError, VaultError

from .api import Api, ApiError, json_response


class DiffApi:
    def __init__(self, api: Api) -> None:
        self.api = api

    def routes(self) -> dict:
        return {"diff": self.diff}

    def _session(self, request: Request, name: str) -> str:
        sid = request.query_params.get(name)
        if not sid:
            raise ApiError(400, f"parameter {name} is required (a session id)")
        try:
            self.api.vault.require_session(sid)
        except SessionIdError as exc:
            raise ApiError(404, f"no such session: {exc}") from None
        except VaultError:
            raise ApiError(404, f"no session {sid!r} in this vault") from None
        return sid

    def diff(self, request: Request) -> Response:
        a, b = self._session(request, "a"), self._session(request, "b")
        a_calls, b_calls = session_calls(self.api.vault, a), session_calls(self.api.vault, b)
        differences = diff_calls(a_calls, b_calls)
        return json_response({"a": a, "b": b, "same": not differences, "a_calls": a_calls, "b_calls": b_calls,
                              "differences": differences})
