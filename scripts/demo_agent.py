"""An agent run through the broker, end to end, offline.

    .venv/bin/python scripts/demo_agent.py [--vault DIR]

Starts the local fake Gmail/Slack servers (tests/upstreams), starts `broker run` pointed at them
with --resolve, then runs a small "agent" that uses plain httpx with the proxy settings printed by
`broker env` (HTTPS_PROXY and the CA bundle). Finally shows the session timeline and verifies it.
The agent code is ordinary: nothing in it knows about the broker except the environment.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.broker_harness import BIN, BrokerProcess  # noqa: E402
from tests.upstreams import Upstream  # noqa: E402

AGENT = '''
import httpx, os
# An ordinary agent: it trusts the CA bundle and uses the proxy from its environment.
with httpx.Client(verify=os.environ["SSL_CERT_FILE"], timeout=30) as c:
    auth = {"Authorization": "Bearer ya29.demo-token-never-recorded-0123456789"}
    gmail = "https://gmail.googleapis.com/gmail/v1/users/me"
    unread = c.get(f"{gmail}/messages", params={"q": "is:unread"}, headers=auth).json()
    first = unread["messages"][0]["id"]
    msg = c.get(f"{gmail}/messages/{first}", params={"format": "metadata"}, headers=auth).json()
    c.post(f"{gmail}/messages/{first}/modify", json={"removeLabelIds": ["UNREAD"]}, headers=auth)
    c.post("https://slack.com/api/chat.postMessage",
           headers={"Authorization": "Bearer xoxb-demo-token-never-recorded-1"},
           json={"channel": "#general", "text": f"Triaged: {msg['snippet'][:40]}"})
    print("agent: done")
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vault", default=None, help="vault directory (default: a new temporary one)")
    args = ap.parse_args()
    # The work folder holds the broker's CA, private key included: it goes whatever happens.
    work = Path(tempfile.mkdtemp(prefix="broker-demo-"))
    try:
        return _demo(work, Path(args.vault).absolute() if args.vault else work / "vault", keep=bool(args.vault))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _demo(work: Path, vault: Path, keep: bool) -> int:
    with Upstream() as upstream, BrokerProcess(work, upstream, vault=vault) as broker:
        print(f"fake upstreams on 127.0.0.1:{upstream.port}; broker on 127.0.0.1:{broker.port}; vault {vault}")
        env_out = subprocess.run(
            [str(BIN / "broker"), "env", "--listen", f"127.0.0.1:{broker.port}", "--confdir", str(broker.confdir),
             "--session", "demo", "--agent", "triage-bot"],
            capture_output=True, text=True, check=True,
        ).stdout
        print(env_out, end="")
        env = dict(os.environ)
        for line in env_out.splitlines():
            if not line.startswith("export "):
                continue
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = value.strip("'")
        subprocess.run([sys.executable, "-c", AGENT], env=env, check=True)
        broker.entries("demo", 4)
    for cmd in (["show", "demo"], ["verify", "demo"]):
        subprocess.run([str(BIN / "broker"), *cmd, "--vault", str(vault)], check=True)
    if not keep:
        print("(the temporary vault and CA are removed now; pass --vault DIR to keep the vault)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
