"""What `broker exec` made, written down before it is made, so it is removed at exit and, after a
crash, at the next start.

The state directory (default /run/broker-exec, a tmpfs cleared at boot like /run/netns) holds a
lock file and one `<name>.json` per namespace in use: the owner's pid and start time. A namespace
whose owner is gone (or whose pid was reused: the start time differs) is stale: the next `broker
exec` kills what still runs in it, deletes it (its firewall rules and addresses go with it) and its
/etc/netns/<name> directory, then the state file. Names are allocated under the lock, so two runs
starting at once never take the same one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("broker.exec")
NAME_PREFIX = "broker-exec-"
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
MAX_NAMESPACES = 4096


def state_dir() -> Path:
    return Path(os.environ.get("BROKER_EXEC_STATE_DIR", "/run/broker-exec"))


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): tells a reused pid from the owner."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


@dataclass
class Claim:
    """A namespace name this process owns, and its state file."""

    name: str
    state_file: Path

    @property
    def etc_dir(self) -> Path:
        return ETC_NETNS / self.name

    @property
    def ca_bundle(self) -> Path:
        """Where COMMAND reads the CA bundle: readable by any user (--user), unlike a confdir."""
        return state_dir() / "ca" / f"{self.name}.pem"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o711)  # traversable, not listable: the bundles under ca/ are read by COMMAND
    with open(directory / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _owner_alive(state: dict) -> bool:
    pid = state.get("pid")
    return isinstance(pid, int) and process_start_time(pid) == state.get("start_time")


def recover_stale() -> list[str]:
    """Remove every namespace whose owner is gone; the names removed. Call with the lock held."""
    removed = []
    for path in sorted(state_dir().glob(f"{NAME_PREFIX}*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = {}
        if state and _owner_alive(state):
            continue
        name = path.stem
        log.warning("removing namespace %s left by a broker exec that did not finish (pid %s)",
                    name, state.get("pid"))
        remove(Claim(name, path))
        removed.append(name)
    return removed


def allocate() -> Claim:
    """Recover stale namespaces, then claim the lowest free name, recorded before it is made."""
    with _locked():
        recover_stale()
        me = os.getpid()
        for n in range(1, MAX_NAMESPACES):
            name = f"{NAME_PREFIX}{n}"
            path = state_dir() / f"{name}.json"
            if path.exists() or (NETNS_DIR / name).exists() or (ETC_NETNS / name).exists():
                continue
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": me, "start_time": process_start_time(me), "name": name}))
            tmp.replace(path)
            return Claim(name, path)
    raise OSError(f"no free namespace name under {state_dir()} (more than {MAX_NAMESPACES} in use?)")


def namespace_pids(name: str) -> list[int]:
    """The processes in namespace `name` (as `ip netns pids`, without its early stop when a
    process ends during the scan)."""
    try:
        target = os.stat(NETNS_DIR / name)
    except OSError:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            found.append(int(entry.name))
    return found


def remove(claim: Claim) -> None:
    """Kill what still runs in the namespace, delete it and its files, then forget it. Idempotent."""
    for pid in namespace_pids(claim.name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if (NETNS_DIR / claim.name).exists():
        r = subprocess.run(["ip", "netns", "delete", claim.name], capture_output=True, text=True, check=False)
        if r.returncode and (NETNS_DIR / claim.name).exists():
            log.error("could not delete namespace %s: %s", claim.name, r.stderr.strip())
            return  # keep the state file: the next start tries again
    shutil.rmtree(claim.etc_dir, ignore_errors=True)
    claim.ca_bundle.unlink(missing_ok=True)
    claim.state_file.unlink(missing_ok=True)


def release(claim: Claim) -> None:
    with _locked():
        remove(claim)
