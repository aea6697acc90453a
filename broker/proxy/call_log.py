"""The line `broker run -v` logs for each recorded call (what an operator watching the proxy reads).

One line per call, after its entry is durable: seq, session, connector, effect, method, status and the
URL as the journal holds it (credentials removed by `journal.redact.redact_url`). The effect is the
connector rules' answer (`Registry.classify`), as the recording service decides it.
"""

from __future__ import annotations

from journal.connectors import Registry
from journal.record import text_pairs
from journal.redact import redact_url


def recorded_call_line(
    seq: object, session: str, connector: str, method: str, status: int | None, url: str,
    request_fields: tuple, request_body: bytes | None, registry: Registry,
) -> str:
    """`recorded seq=12 session=demo connector=gmail effect=read GET 200 https://...`; `seq` is the
    recorder's answer (the entry's seq, or True when it did not name one: then `?`)."""
    number = seq if isinstance(seq, int) and not isinstance(seq, bool) else "?"
    try:
        cls = registry.classify(method, url, text_pairs(request_fields), request_body)
        effect = cls.effect if cls is not None else ("read" if method in ("GET", "HEAD", "OPTIONS") else "write")
    except Exception:  # noqa: BLE001 - a log line never fails a call
        effect = "?"
    return (f"recorded seq={number} session={session} connector={connector} effect={effect} {method} "
            f"{status if status is not None else '-'} {redact_url(url)}")
