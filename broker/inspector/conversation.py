"""The conversation view's data: `broker trajectory`'s report (journal/trajectory.py) for one session.

The report is the same object `broker trajectory --json` prints: turns (each model call with the tool
calls it asked for, the entries that carried them out and the entries tied to it by `prompt_ref`)
and findings with the seq where they occur. The page draws the entries it names from their own
lines and marks each by the chain the browser checked; the report itself is the server's reading.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from journal.trajectory import trajectory

from .api import Api, json_response


class ConversationApi:
    def __init__(self, api: Api) -> None:
        self.api = api

    def routes(self) -> dict:
        return {"session/trajectory": self.trajectory}

    def trajectory(self, request: Request) -> Response:
        sid = self.api.session(request)
        return json_response(trajectory(self.api.vault, sid))
