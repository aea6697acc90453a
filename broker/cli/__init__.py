"""The `broker` command line (console script `broker`, or `python -m broker.cli`).

One module per command family (audit, seal, checkpoint, proxy, exec, mcp, replay, trajectory, search,
inspect, export, diff, store); the options they share live in options.py, the exit codes in
exit_codes.py, the group in main.py. Command modules import options, never each other (exec wraps
proxy's `run`).
"""

from broker.cli.exit_codes import run_cli
from broker.cli.main import cli, main

__all__ = ["cli", "main", "run_cli"]
