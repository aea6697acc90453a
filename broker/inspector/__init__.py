"""The inspector: a read-only web console over a vault (`broker inspect`).

`app.py` routes, `api.py` the JSON handlers, `auth.py` the guard (methods, token, loopback Host,
security headers), `sessions.py` what is derived per session file. The page is plain files in
`static/` (no build step); `static/canonical.js` recomputes every hash in the browser.
"""

from .app import create_app

__all__ = ["create_app"]
