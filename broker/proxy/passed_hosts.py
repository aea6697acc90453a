"""`--pass-unknown HOST_PATTERN`: the hosts no connector knows that the operator lets pass unrecorded.

Every call to a host no connector knows is recorded by default (connector `other`, effect by the
method rule, `effect_basis: default`). The operator can pass chosen hosts instead: a pattern is a
host name or a shell-style glob (`*.internal.example`, matched case-insensitively without a port or
trailing dot), repeatable; `all` passes every unknown host (the behaviour before 2026-12). A passed
call is counted in declared coverage (`broker.proxy.coverage`), said once on stderr the first time
its host is seen, and summed up when the broker stops.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Iterable

from journal.connectors._http import normalise_host

log = logging.getLogger("broker")

ALL = "all"


def check_patterns(patterns: Iterable[str]) -> list[str]:
    """The patterns, normalised; ValueError naming a pattern that cannot name a host."""
    out = []
    for p in patterns:
        p = p.strip()
        if not p or any(c.isspace() or c in "/@" for c in p):
            raise ValueError(f"--pass-unknown {p!r}: give a host name, a glob such as '*.example.com', or 'all'")
        out.append(ALL if p.lower() == ALL else normalise_host(p))
    return out


class PassedHosts:
    """Which unknown hosts pass unrecorded, and how many calls each passed."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        checked = check_patterns(patterns)
        self.everything = ALL in checked
        globs = [p for p in checked if p != ALL]
        self._pattern = re.compile("|".join(fnmatch.translate(p) for p in globs)) if globs else None
        self.counts: dict[str, int] = {}

    @property
    def any(self) -> bool:
        return self.everything or self._pattern is not None

    def passes(self, host: str) -> bool:
        """True when a call to `host` (no connector knows it) passes unrecorded; the first such call to a
        host is said on stderr."""
        if not self.any:
            return False
        name = normalise_host(host)
        if not self.everything and (self._pattern is None or self._pattern.fullmatch(name) is None):
            return False
        seen = self.counts.get(name)
        self.counts[name] = (seen or 0) + 1
        if seen is None:
            log.warning("passing %s unrecorded (--pass-unknown): no connector knows it; its calls leave no entry",
                        name)
        return True

    def summary(self) -> str | None:
        """The stop-time line: every passed host and its count, or None when nothing passed."""
        if not self.counts:
            return None
        total = sum(self.counts.values())
        hosts = ", ".join(f"{h} ({n})" for h, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"passed unrecorded (--pass-unknown): {total} call(s) to {len(self.counts)} host(s): {hosts}"
