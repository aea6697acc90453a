"""An agent run through the broker, end to end, offline.

    .venv/bin/python scripts/demo_agent.py [--vault DIR]
    .venv/bin/python scripts/demo_agent.py --prompts refs [--api anthropic] [--stream] [--made-up]

Starts the local fake Gmail/Slack servers (tests/support/upstreams), starts `broker run` pointed at them
with --resolve, then runs a small "agent" that uses plain httpx with the proxy settings printed by
`broker env` (HTTPS_PROXY and the CA bundle). Finally shows the session timeline and verifies it.
The agent code is ordinary: nothing in it knows about the broker except the environment.

With --prompts refs|full the agent is a tool-using loop instead (tests/support/model_agent.py): it asks a local
fake model API (Anthropic, OpenAI chat or responses, Gemini), carries out the tool calls the model asks
for against Gmail and Slack, shows it the results and stops when it answers; the broker records the
model calls too, and the demo ends with `broker trajectory`. --made-up makes the agent invent the Slack
result instead of calling Slack, which the trajectory reports (docs/prompts.md).
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

from tests.support.broker_harness import BIN, BrokerProcess  # noqa: E402
from tests.support.upstreams import Upstream  # noqa: E402

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

MODEL_AGENT = '''
import httpx, os, sys
from tests.support.model_agent import run_agent
api, stream, made_up = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
with httpx.Client(verify=os.environ["SSL_CERT_FILE"], timeout=30) as c:
    done = run_agent(c, api, stream=stream, fabricate=frozenset({"slack_post_message"} if made_up else ()))
print("agent: done, tools used:", ", ".join(done))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vault", default=None, help="vault directory (default: a new temporary one)")
    ap.add_argument("--prompts", choices=["refs", "full"], help="run the tool-using model agent, prompt capture on")
    ap.add_argument("--api", default="anthropic", choices=["anthropic", "openai.chat", "openai.responses", "gemini"])
    ap.add_argument("--stream", action="store_true", help="ask the model for streamed (SSE) responses")
    ap.add_argument("--made-up", action="store_true", help="the agent invents the Slack result (--prompts only)")
    args = ap.parse_args()
    # The work folder holds the broker's CA, private key included: it goes whatever happens.
    work = Path(tempfile.mkdtemp(prefix="broker-demo-"))
    try:
        return _demo(work, Path(args.vault).absolute() if args.vault else work / "vault", keep=bool(args.vault),
                     args=args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _demo(work: Path, vault: Path, keep: bool, args: argparse.Namespace) -> int:
    extra = ["--prompts", args.prompts] if args.prompts else []
    with Upstream() as upstream, BrokerProcess(work, upstream, *extra, vault=vault) as broker:
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
        if args.prompts:
            env["PYTHONPATH"] = str(ROOT)
            flags = [args.api, "1" if args.stream else "0", "1" if args.made_up else "0"]
            subprocess.run([sys.executable, "-c", MODEL_AGENT, *flags], env=env, check=True)
            broker.entries("demo", 4 if args.made_up else 5)
        else:
            subprocess.run([sys.executable, "-c", AGENT], env=env, check=True)
            broker.entries("demo", 4)
    for cmd in (["show", "demo"], ["verify", "demo"]):
        subprocess.run([str(BIN / "broker"), *cmd, "--vault", str(vault)], check=True)
    if args.prompts:
        code = subprocess.run([str(BIN / "broker"), "trajectory", "demo", "--vault", str(vault), "--strict"]).returncode
        print(f"broker trajectory --strict exited {code}")
    if not keep:
        print("(the temporary vault and CA are removed now; pass --vault DIR to keep the vault)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
