"""A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (no websocket library needed),
for tests that drive the system's headless Chromium (Debian's `chromium` package)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")


def chromium_binary() -> str | None:
    """The Chromium executable (the Debian launcher script is skipped when the binary is there)."""
    for c in (os.environ.get("BROKER_TEST_CHROMIUM", ""), *CANDIDATES):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return shutil.which("chromium")


class Chromium:
    """Headless Chromium speaking CDP over fds 3 and 4; messages are JSON terminated by NUL."""

    def __init__(self, binary: str, log_path: Path) -> None:
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="cdp-profile-")
        args = [binary, "--headless=new", "--no-sandbox", "--remote-debugging-pipe", "--no-first-run",
                f"--user-data-dir={self._profile}", "about:blank"]
        # bash (dash takes single-digit fds only) puts the pipe ends on fds 3 and 4, where Chromium expects them
        cmd = "exec " + " ".join(shlex.quote(a) for a in args) + f" 3<&{to_chrome_r} 4>&{from_chrome_w}"
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(["bash", "-c", cmd], pass_fds=(to_chrome_r, from_chrome_w),
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and return its result (events in between are skipped); raise on a CDP error."""
        self._id += 1
        msg: dict = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the debugging pipe")
                self._buf += chunk
            line, _, self._buf = self._buf.partition(b"\0")
            reply = json.loads(line)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"CDP {method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, session: str, expression: str) -> object:
        """Evaluate an expression (awaiting a promise) in a page; its value, or RuntimeError with the exception."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("exception", {}).get("description")
                               or result["exceptionDetails"].get("text"))
        return result["result"].get("value")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)
