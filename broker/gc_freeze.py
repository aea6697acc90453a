"""The objects of a long-running process's start-up, left out of the garbage collector's full passes.

Shared by the long-running capture points (`broker run` and its recording service, `broker mcp`); the short
commands freeze at exit instead (broker/cli/main.py).

Why: the broker's proxy holds about 86,000 objects the collector tracks once it runs (mitmproxy, its
addons, the connector rules, compiled patterns), and every full collection walked all of them: about
18 ms once per roughly 1,000 calls, 18-28 us per call of proxy CPU. Nearly all of them live as long as
the process. Collected once, then frozen (`gc.freeze`), they are never walked again; whatever the
calls allocate is collected as before.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect what start-up left unreachable, then freeze what remains (call once, when ready)."""
    gc.collect()
    gc.freeze()
