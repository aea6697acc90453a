"""Entry fields for tests: realistic, small, deterministic."""

from __future__ import annotations


def fields(session: str = "s1", n: int = 0, **over) -> dict:
    """The eleven capture-point fields of one plausible Gmail read."""
    f = {
        "ts": f"2026-09-22T10:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z",
        "session": session,
        "agent": "agent-a",
        "principal": "alice@example.com",
        "connector": "gmail",
        "capture": "broker",
        "prompt_ref": None,
        "effect": "read",
        "mcp": None,
        "request": {
            "method": "GET",
            "url": f"https://gmail.googleapis.com/gmail/v1/users/me/messages/m{n}",
            "headers": [["Authorization", "[never captured]"], ["Accept", "application/json"]],
            "body": None,
        },
        "response": {
            "status": 200,
            "headers": [["Content-Type", "application/json; charset=UTF-8"]],
            "body": {"id": f"m{n}", "labelIds": ["INBOX", "UNREAD"], "snippet": f"message {n} \u00e9\U0001f600"},
        },
    }
    f.update(over)
    return f


def has_float(v: object) -> bool:
    """True when a parsed JSON value holds a float anywhere (the canonical-form tests' fast paths never take one)."""
    if type(v) is float:
        return True
    if type(v) is list:
        return any(has_float(x) for x in v)
    if type(v) is dict:
        return any(has_float(x) for x in v.values())
    return False
