"""Who COMMAND runs as and what it can see: the broker's side of `confine.py` (see its docstring).

By default COMMAND runs as `nobody` (DEFAULT_USER): uid 0 owns every root-owned file, and an agent
running as root could delete its own record, read the CA key or rewrite the broker's code even with
no capabilities. `--user NAME` chooses another user; running as root takes `--as-root` and is warned
about (it is still in its own PID and mount namespaces, with the evidence covered). The evidence
(vault, confdir, seal key, store directory) is hidden from COMMAND whatever the user, the broker's
code is read-only, and store credentials in the environment are not passed on.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from broker.exec.netns import user_ids
from journal.errors import BrokerError

DEFAULT_USER = "nobody"
CONFINE_SCRIPT = Path(__file__).with_name("confine.py")
# Variables that carry the broker's own settings or a store's credentials: COMMAND gets none of them.
WITHHELD_PREFIXES = ("BROKER_", "PG")
WITHHELD = ("DATABASE_URL",)


class RootRefused(BrokerError, OSError):
    """COMMAND would run as root without --as-root."""


def command_user(user: str | None, as_root: bool) -> tuple[int, int]:
    """(uid, gid) COMMAND runs as; root only with `as_root`."""
    if as_root:
        if user:
            raise RootRefused("--as-root and --user exclude each other")
        return 0, 0
    uid, gid = user_ids(user or DEFAULT_USER)
    if uid == 0:
        raise RootRefused(f"--user {user}: COMMAND would run as root and could change the record; "
                          "give --as-root to mean it")
    return uid, gid


def code_directories() -> list[str]:
    """Where the broker's code is loaded from (its package roots and its Python environment)."""
    import broker
    import journal

    found = {str(Path(m.__file__ or "").resolve().parent.parent) for m in (broker, journal)}
    found.add(str(Path(sys.prefix).resolve()))
    return sorted(found)


@dataclass
class Confinement:
    uid: int
    gid: int
    hidden: list[str] = field(default_factory=list)
    binds: list[str] = field(default_factory=list)
    put_back: list[str] = field(default_factory=list)

    def hide(self, *paths: str | None) -> None:
        for path in paths:
            if path:
                self.hidden.append(str(Path(path).expanduser().resolve()))

    def argv(self, command: list[str]) -> list[str]:
        """The confine step, then COMMAND through setpriv: no capabilities, no way to regain them."""
        code = code_directories()
        # Code under /tmp or /run (a checkout in /tmp, as CI makes) would vanish under the private tmpfs:
        # it is bound back, read-only like every bind.
        under_private = [c for c in code if c == "/tmp" or c.startswith(("/tmp/", "/run/"))]
        plan = {"hidden": self.hidden, "read_only": code, "put_back": self.put_back,
                "binds": [str(Path(b).resolve()) for b in self.binds] + under_private, "cwd": os.getcwd()}
        who = ["--reuid", str(self.uid), "--regid", str(self.gid)]
        who += ["--init-groups"] if self.uid else ["--clear-groups"]
        return [sys.executable, "-I", "-S", str(CONFINE_SCRIPT), json.dumps(plan), "--",
                "setpriv", "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
                *who, "--", *command]

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """`env` without the broker's settings and store credentials; HOME the private /tmp for a user
        whose home it cannot use."""
        out = {k: v for k, v in env.items() if not k.startswith(WITHHELD_PREFIXES) and k not in WITHHELD}
        if self.uid:
            import pwd

            try:
                entry = pwd.getpwuid(self.uid)
                home, name = entry.pw_dir, entry.pw_name
            except KeyError:
                home, name = "/tmp", str(self.uid)
            out.update(USER=name, LOGNAME=name, HOME=home if os.access(home, os.W_OK) and home != "/" else "/tmp")
            if not Path(home).is_dir() or Path(home).stat().st_uid != self.uid:
                out["HOME"] = "/tmp"
        return out
