"""The revert plan: for each write, newest first, the inverse call or why there is none.

Step fields (`broker revert-plan --json`, `revert-plan.json`):

- `for_seq`: the write's seq; `connector`; `resource`: the resource id the step acts on (null
  when replay found none) and `op`: the API method of the write;
- `revertible`: true when `call` restores the captured before-state (within what the API allows);
- `blind`: no earlier entry of the session captured the state the inverse needs;
- `approximate`: `call` is a best-effort compensation, not an exact inverse;
- `call`: `{"method", "url", "body"}` (bodies are JSON) or null; `reason`: why, in words;
- evidence: `capture` of the write, `before_seqs` / `before_capture` of the entries the
  before-state came from, `evidence` the weakest of them, and `trusted` (false for steps from or
  after a broken seq, whose reason then starts with "UNTRUSTED").

Replay never executes a step; the plan is for a human (or a reviewed tool) to act on.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from .fold import PlanStep, Replay, weakest
from .labels import resource_id


def untrusted_prefix(rp: Replay) -> str:
    r = rp.report
    return f"UNTRUSTED (the chain is broken at seq {r.broken_at_seq}: {r.kind}; this and every later entry is " \
           "unverified): "


def step_dict(rp: Replay, step: PlanStep) -> dict:
    reason = step.reason if step.trusted else untrusted_prefix(rp) + step.reason
    return {
        "for_seq": step.pos,
        "connector": step.connector,
        "resource": resource_id(step.key),
        "op": step.op,
        "revertible": step.revertible,
        "blind": step.blind,
        "approximate": step.approximate,
        "call": step.call.as_dict() if step.call is not None else None,
        "reason": reason,
        "capture": step.capture,
        "before_seqs": step.before_seqs,
        "before_capture": step.before_capture,
        "evidence": weakest({step.capture, *step.before_capture}),
        "trusted": step.trusted,
    }


def ordered_steps(rp: Replay) -> Iterator[PlanStep]:
    """Newest write first; several steps of one write in reverse order of their touches (streamed from the
    replay's store; `len(rp.steps)` says how many)."""
    return rp.steps.newest_first()


def plan_json(rp: Replay) -> Iterator[bytes]:
    """`orjson.dumps(plan_dict(rp))`, streamed a step at a time (the plan of a long session is never one
    object in memory): the same bytes."""
    head = orjson.dumps({"session": rp.session, "chain": rp.chain_summary(), "executed": False, "steps": []})
    yield head[:-2]
    sep = b""
    for s in ordered_steps(rp):
        yield sep + orjson.dumps(step_dict(rp, s))
        sep = b","
    yield b"]}"


def plan_dict(rp: Replay) -> dict:
    return {
        "session": rp.session,
        "chain": rp.chain_summary(),
        "executed": False,
        "steps": [step_dict(rp, s) for s in ordered_steps(rp)],
    }


__all__ = ["ordered_steps", "plan_dict", "plan_json", "resource_id", "step_dict", "untrusted_prefix"]
