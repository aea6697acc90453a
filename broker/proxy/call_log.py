"""The line `broker run -v` logs for each recorded call (what an operator watching the proxy reads).

One line per call, after its entry is durable: seq, session, connector, effect, method, status and the
URL as the journal holds it (credentials removed by `journal.redact.redact_url`). The effect is the
entry's own, as the recorder decided it (told back with the acknowledgement): never guessed again here.
The session (the agent's proxy credentials or X-Broker-Session), method and URL are the agent's: the line is
escaped as every text output is (broker/cli/terminal_text.py), so they cannot break it or reach the terminal.
"""

from __future__ import annotations

from broker.cli.terminal_text import one_line
from broker.proxy.link import Recorded
from journal.redact import redact_url


def recorded_call_line(recorded: Recorded | bool, session: str, connector: str, method: str, status: int | None,
                       url: str) -> str:
    """`recorded seq=12 session=demo connector=gmail effect=read GET 200 https://...`; a seq or effect
    the recorder did not name shows as `?`."""
    seq = recorded.seq if isinstance(recorded, Recorded) else None
    effect = recorded.effect if isinstance(recorded, Recorded) else None
    return one_line(f"recorded seq={seq if seq is not None else '?'} session={session} connector={connector} "
                    f"effect={effect or '?'} {method} {status if status is not None else '-'} {redact_url(url)}")
