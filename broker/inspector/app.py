"""The inspector's web app: routes only; the handlers are in api.py, the guard in auth.py.

    /                      the page (static/index.html); `/?session=S&seq=N` opens an entry,
                           an unknown S answers 404 with a page saying so
    /static/...            the page's script, canonical form and style (shipped in the package)
    /api/...               JSON (see api.py); blobs and bodies as attachments
"""

from __future__ import annotations

import html
from importlib.resources import files
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from journal.vault import SessionIdError, Vault, VaultError

from .api import Api, ApiError, json_response
from .auth import Guard
from .conversation import ConversationApi
from .evidence import EvidenceApi
from .session_diff import DiffApi

STATIC = Path(str(files("broker.inspector") / "static"))

_NOT_FOUND = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Not found: broker inspector</title>
<link rel="stylesheet" href="/static/style.css"></head>
<body><main class="notfound"><h1>Not found</h1><p>{message}</p><p><a href="/">All sessions</a></p></main></body></html>
"""


def not_found_page(message: str) -> HTMLResponse:
    return HTMLResponse(_NOT_FOUND.format(message=html.escape(message)), status_code=404,
                        headers={"cache-control": "no-store"})


def create_app(vault: Vault, token: str | None = None) -> Guard:
    """The ASGI app for one vault; with `token`, every request must carry it (see auth.py)."""
    api = Api(vault)

    def page(request: Request) -> Response:
        sid = request.query_params.get("session")
        if sid:
            try:
                vault.require_session(sid)
            except SessionIdError:
                return not_found_page("That is not a session id this vault can hold.")
            except VaultError:
                return not_found_page(f"There is no session {sid!r} in this vault.")
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8",
                            headers={"cache-control": "no-store"})

    def endpoint(handler):
        def run(request: Request) -> Response:
            try:
                return handler(request)
            except ApiError as exc:
                return json_response({"error": exc.message}, exc.status)
            except VaultError as exc:
                return json_response({"error": str(exc)}, 404)

        return run

    api_routes = {
        "vault": api.vault_info, "sessions": api.sessions, "session/summary": api.summary,
        "session/verdict": api.verdict, "session/head": api.head, "session/entries": api.entries,
        "session/entry": api.entry, "session/raw": api.raw, "session/writes": api.writes,
        "session/views": api.views, "session/revert-plan": api.revert_plan, "session/body": api.body,
        "session/fixture": api.fixture, "blob": api.blob, "search": api.search,
    }
    for extra in (EvidenceApi(api), ConversationApi(api), DiffApi(api)):  # issue 28's views, one module each
        api_routes.update(extra.routes())
    routes: list[BaseRoute] = [Route("/", page, methods=["GET"])]
    routes += [Route(f"/api/{name}", endpoint(h), methods=["GET"]) for name, h in api_routes.items()]
    routes.append(Mount("/static", app=StaticFiles(directory=STATIC), name="static"))

    async def missing(request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return json_response({"error": exc.detail}, exc.status_code)
        if exc.status_code == 404:
            return not_found_page("There is no such page in this inspector.")
        return Response(exc.detail, status_code=exc.status_code, media_type="text/plain")

    # starlette types every handler as taking any Exception; this one is registered for HTTPException only.
    app = Starlette(routes=routes, exception_handlers={HTTPException: missing})  # type: ignore[dict-item]
    return Guard(app, token)
