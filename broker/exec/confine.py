"""The step between `ip netns exec` and COMMAND: its own PID and mount namespaces, a private /tmp and
/run, the evidence out of sight, then COMMAND as an unprivileged user with no capabilities.

Run as a script (`python -I confine.py PLAN_JSON -- COMMAND...`, standard library only: it runs
before anything of the broker's is trusted inside) as root, already inside the network namespace:

1. unshare a mount and a PID namespace; mounts made from here on are private to COMMAND;
2. fork: the child is PID 1 of the new PID namespace (it sees only COMMAND's processes, never the
   broker's, so it can neither signal nor ptrace them); /proc is mounted afresh for it;
3. the broker's code directories are made read-only; /tmp and /run become empty tmpfs (no host Unix
   sockets, no broker state), with the CA bundle and resolv.conf put back where COMMAND reads them;
   the operator's `--bind` paths are bound in read-only; then every path of the evidence (vault,
   confdir with the CA key, seal key, store directory) is covered by an empty read-only tmpfs (a
   file by /dev/null), last, so that no bind can uncover it;
4. PID 1 forks COMMAND through `setpriv` (the user, no capabilities, no_new_privs), passes on
   SIGINT/SIGTERM/SIGHUP and exits with COMMAND's status; the outer parent does the same.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_libc = ctypes.CDLL(None, use_errno=True)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def read_only(path: str) -> None:
    mount(path, path, None, MS_BIND | MS_REC)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def hide(path: str) -> None:
    """An empty read-only tmpfs over a directory, /dev/null over a file."""
    if os.path.isdir(path):
        mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=000")
    elif os.path.exists(path):
        mount("/dev/null", path, None, MS_BIND)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def put_back(path: str, content: bytes) -> None:
    """A file under the fresh /tmp or /run, with its directories, readable by everyone."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)
    os.chmod(path, 0o644)


def wait_forwarding(pid: int) -> int:
    """Pass the forwarded signals to `pid` until it exits; its exit status as a shell reports it. As PID 1,
    also reap every orphan."""
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if done == pid:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main(argv: list[str]) -> int:
    plan = json.loads(argv[1])
    command = argv[argv.index("--") + 1:]
    plan.setdefault("cwd", os.getcwd())
    saved = {path: open(path, "rb").read() for path in plan["put_back"] if os.path.exists(path)}
    resolv = os.path.realpath("/etc/resolv.conf")
    if resolv.startswith(("/run/", "/tmp/")):
        saved[resolv] = open("/etc/resolv.conf", "rb").read()
    os.unshare(os.CLONE_NEWNS | os.CLONE_NEWPID)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    pid = os.fork()
    if pid:
        code = wait_forwarding(pid)
        return code
    # PID 1 of COMMAND's namespace from here on.
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for path in plan["read_only"]:
            if os.path.exists(path):
                read_only(path)
        # The operator's binds, opened before /tmp and /run are covered (the paths may be under them), in
        # this mount namespace (a bind from another one is refused).
        binds = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in plan["binds"] if os.path.exists(path)]
        for top in ("/tmp", "/run"):
            mode = "1777" if top == "/tmp" else "755"
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=64m")
        for path, content in saved.items():
            put_back(path, content)
        for path, fd in binds:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                if not os.path.exists(path):
                    open(path, "a").close()
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
            os.close(fd)
        for path in plan["hidden"]:
            hide(path)
        try:  # the same working directory, now seen through the binds
            os.chdir(plan["cwd"])
        except OSError:
            pass
    except OSError as exc:
        print(f"broker: exec: could not confine the command: {exc}", file=sys.stderr)
        os._exit(126)
    child = os.fork()
    if child == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"broker: exec: {command[0]}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
    os._exit(wait_forwarding(child))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
