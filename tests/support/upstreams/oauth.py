"""Fake Google OAuth 2.0 token endpoints (``oauth2.googleapis.com/token`` and friends).

Why: token refresh traffic must look real (form in, ``ya29.`` token out) so the broker's
never-capture rules are tested against genuine shapes.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid

from .common import GOOGLE_HOSTS, Request, Response, Route, json_response, route

OAUTH_HOST = frozenset({"oauth2.googleapis.com"}) & GOOGLE_HOSTS
WWW = frozenset({"www.googleapis.com"})
SCOPES = (
    "https://www.googleapis.com/auth/gmail.modify https://www.googleapis.com/auth/calendar "
    "https://www.googleapis.com/auth/drive"
)


def _err(error: str, description: str, status: int = 400) -> Response:
    return json_response({"error": error, "error_description": description}, status=status, flavor="google")


def _id_token() -> str:
    def enc(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    now = int(time.time())
    claims = {
        "iss": "https://accounts.google.com",
        "aud": "fake-client.apps.googleusercontent.com",
        "sub": "110248495921238986420",
        "email": "alice@example.com",
        "iat": now,
        "exp": now + 3599,
    }
    return f"{enc({'alg': 'RS256', 'kid': 'fake', 'typ': 'JWT'})}.{enc(claims)}.{uuid.uuid4().hex}"


def token(req: Request, m: re.Match[str]) -> Response:
    """POST /token: refresh_token, authorization_code, jwt-bearer and client_credentials grants."""
    params = req.params()
    grant = str(params.get("grant_type") or "")
    access = "ya29.a0" + uuid.uuid4().hex + uuid.uuid4().hex
    if grant == "refresh_token":
        rt = str(params.get("refresh_token") or "")
        if not rt:
            return _err("invalid_request", "Missing required parameter: refresh_token")
        if "invalid" in rt or "revoked" in rt:
            return _err("invalid_grant", "Token has been expired or revoked.")
        return json_response(
            {
                "access_token": access,
                "expires_in": 3599,
                "scope": params.get("scope") or SCOPES,
                "token_type": "Bearer",
            },
            flavor="google",
        )
    if grant == "authorization_code":
        if not params.get("code"):
            return _err("invalid_request", "Missing required parameter: code")
        return json_response(
            {
                "access_token": access,
                "expires_in": 3599,
                "refresh_token": "1//0g" + uuid.uuid4().hex + uuid.uuid4().hex[:20],
                "scope": SCOPES,
                "token_type": "Bearer",
                "id_token": _id_token(),
            },
            flavor="google",
        )
    if grant in ("urn:ietf:params:oauth:grant-type:jwt-bearer", "client_credentials"):
        return json_response(
            {"access_token": access, "expires_in": 3599, "token_type": "Bearer"}, flavor="google"
        )
    if not grant:
        return _err("unsupported_grant_type", "Invalid grant_type: ")
    return _err("unsupported_grant_type", f"Invalid grant_type: {grant}")


def revoke(req: Request, m: re.Match[str]) -> Response:
    """POST /revoke?token=...: 200 with an empty JSON object."""
    params = req.params()
    if not params.get("token"):
        return _err("invalid_request", "Bad Request")
    return json_response({}, flavor="google")


def tokeninfo(req: Request, m: re.Match[str]) -> Response:
    """GET /tokeninfo?access_token=...: what the token can do."""
    tok = req.query.get("access_token") or req.query.get("id_token") or ""
    if not tok.startswith("ya29.") and not req.query.get("id_token"):
        return _err("invalid_token", "Invalid Value")
    return json_response(
        {
            "azp": "fake-client.apps.googleusercontent.com",
            "aud": "fake-client.apps.googleusercontent.com",
            "scope": SCOPES,
            "exp": str(int(time.time()) + 3599),
            "expires_in": "3599",
            "email": "alice@example.com",
            "email_verified": "true",
            "access_type": "offline",
        },
        flavor="google",
    )


def routes() -> list[Route]:
    """Token routes on oauth2.googleapis.com and the legacy www.googleapis.com/oauth2/v4/token."""
    return [
        route("POST", OAUTH_HOST, r"/token", token, "google", public=True),
        route("POST", OAUTH_HOST, r"/revoke", revoke, "google", public=True),
        route("GET POST", OAUTH_HOST, r"/tokeninfo", tokeninfo, "google", public=True),
        route("POST", WWW, r"/oauth2/v[34]/token", token, "google", public=True),
        route("GET", WWW, r"/oauth2/v3/tokeninfo", tokeninfo, "google", public=True),
    ]
