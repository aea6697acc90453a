"""Replay benchmark: `broker replay` of a synthetic session against `broker verify` of the same file.

    python -m bench.replay_bench [--quick] [--entries N] [--resources R] [--repeat K] [--json FILE] [--profile]

The session (default 100,000 entries, ~1 KB each) mixes the five connectors the way an agent
does: reads of lists and single objects, and writes (label changes, event patches, permission
and trash changes, Slack posts, reactions and edits, GitHub issue edits and comments), over a pool
of R resources (default 5,000), so replay builds R notes and ~N/3 plan steps. Entries are chained
with the real chain code (not the Recorder: building 100k entries through it would dominate the run).

Each measurement runs in a fresh child process (same interpreter, same imports), so peak memory
(ru_maxrss) belongs to that operation alone:

- verify:  `verify_session` over the file (the baseline; what `broker verify` does per session);
- replay:  `replay_session` + `write_outputs` (what `broker replay` does): the verifying fold, then
  every view file written;
- fold:    `replay_session` alone (no files written), to show where the time goes.

The three run interleaved, K rounds (default 3, --quick 1), best time kept; ratio = replay time /
verify time of the same run. The replay child writes into a fresh views folder each round (its
timing includes creating every file). A child that only imports the modules gives the memory floor.
Replay's peak RSS should not grow with the session: compare `--entries 10000`, `100000`, `300000`.
Replay forks three children of its own (the verifier and the fold's partner, journal/replay/split.py,
beside the fold; a views writer, beside the notes):
their peak RSS is reported as well, and the measuring process's CPU seconds beside its wall time.
Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import machine, scratch_dir, write_chained, write_json
from journal.vault import Vault

SESSION = "replay-bench"
ROOT = Path(__file__).resolve().parent.parent
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
CAL = "https://www.googleapis.com/calendar/v3/calendars/primary"
DRIVE = "https://www.googleapis.com/drive/v3"
SLACK = "https://slack.com/api"
GH = "https://api.github.com/repos/acme/widgets"
H_REQ = [["Authorization", "[never captured]"], ["Content-Type", "application/json"]]
H_RESP = [["Content-Type", "application/json; charset=UTF-8"]]


def _fields(n: int, connector: str, effect: str, method: str, url: str, req: object, status: int, resp: object,
            capture: str = "broker") -> dict:
    return {
        "ts": f"2026-09-22T{10 + n // 3_600_000 % 10:02d}:{n // 60_000 % 60:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}Z",
        "session": SESSION, "agent": "bench-agent", "principal": "dana@acme.example", "connector": connector,
        "capture": capture, "prompt_ref": None, "effect": effect, "mcp": None,
        "request": {"method": method, "url": url, "headers": H_REQ, "body": req},
        "response": {"status": status, "headers": H_RESP, "body": resp},
    }


def _text(rng: random.Random, words: int) -> str:
    vocab = ("contract", "sync", "vendor", "invoice", "moved", "Thursday", "draft", "review", "folder", "shared",
             "agenda", "notes", "budget", "Q3", "Northwind", "please", "update", "attached", "thanks", "call")
    return " ".join(rng.choice(vocab) for _ in range(words))


def make_call(n: int, rng: random.Random, resources: int) -> dict:
    """One plausible entry; n picks the connector and the call, rng the resource and the text."""
    r = rng.randrange(resources)
    kind = n % 5
    write = rng.random() < 0.35
    if kind == 0:  # gmail
        mid = f"m{r:06x}"
        labels = ["INBOX", "UNREAD"] if rng.random() < 0.5 else ["INBOX"]
        if not write:
            return _fields(n, "gmail", "read", "GET", f"{GMAIL}/messages/{mid}?format=metadata", None, 200, {
                "id": mid, "threadId": mid, "labelIds": labels, "snippet": _text(rng, 20), "historyId": str(n),
                "payload": {"headers": [{"name": "Subject", "value": _text(rng, 6)},
                                        {"name": "From", "value": "vendor@northwind.example"}]}})
        return _fields(n, "gmail", "write", "POST", f"{GMAIL}/messages/{mid}/modify",
                       {"addLabelIds": [], "removeLabelIds": ["UNREAD"]}, 200,
                       {"id": mid, "threadId": mid, "labelIds": ["INBOX"]})
    if kind == 1:  # calendar
        eid = f"ev{r:06d}"
        event = {"id": eid, "status": "confirmed", "summary": _text(rng, 4), "etag": f"\"{n}\"",
                 "start": {"dateTime": "2026-09-24T10:00:00+02:00"}, "end": {"dateTime": "2026-09-24T10:30:00+02:00"},
                 "attendees": [{"email": "dana@acme.example", "responseStatus": "accepted"},
                               {"email": "priya@northwind.example", "responseStatus": "needsAction"}]}
        if not write:
            return _fields(n, "calendar", "read", "GET", f"{CAL}/events/{eid}", None, 200, event)
        patch = {"start": {"dateTime": "2026-09-25T14:00:00+02:00"}, "end": {"dateTime": "2026-09-25T14:30:00+02:00"}}
        return _fields(n, "calendar", "write", "PATCH", f"{CAL}/events/{eid}?sendUpdates=all", patch, 200,
                       event | patch)
    if kind == 2:  # drive
        fid = f"1F{r:08d}"
        if not write:
            return _fields(n, "drive", "read", "GET", f"{DRIVE}/files/{fid}?fields=*", None, 200, {
                "kind": "drive#file", "id": fid, "name": _text(rng, 3) + ".docx", "trashed": False,
                "permissions": [{"id": "0612", "type": "user", "role": "owner", "emailAddress": "dana@acme.example"}]})
        if rng.random() < 0.5:
            return _fields(n, "drive", "write", "PATCH", f"{DRIVE}/files/{fid}", {"trashed": True}, 200,
                           {"kind": "drive#file", "id": fid, "trashed": True})
        return _fields(n, "drive", "write", "POST", f"{DRIVE}/files/{fid}/permissions?sendNotificationEmail=false",
                       {"type": "user", "role": "reader", "emailAddress": "priya@northwind.example"}, 200,
                       {"kind": "drive#permission", "id": f"p{n}", "type": "user", "role": "reader"})
    if kind == 3:  # slack
        channel = f"C{r % 50:08d}"
        if not write:
            ts = f"17585{r:05d}.000100"
            return _fields(n, "slack", "read", "GET", f"{SLACK}/conversations.history?channel={channel}&limit=1",
                           None, 200, {"ok": True, "messages": [{"type": "message", "user": "U04DANA", "ts": ts,
                                                                  "text": _text(rng, 15)}]})
        ts = f"17590{n:06d}.000200"
        choice = rng.random()
        if choice < 0.5:
            text = _text(rng, 15)
            return _fields(n, "slack", "write", "POST", f"{SLACK}/chat.postMessage", {"channel": channel, "text": text},
                           200, {"ok": True, "channel": channel, "ts": ts,
                                 "message": {"type": "message", "user": "U07BOT", "text": text, "ts": ts}})
        ts = f"17585{r:05d}.000100"
        if choice < 0.8:
            return _fields(n, "slack", "write", "POST", f"{SLACK}/reactions.add",
                           {"channel": channel, "timestamp": ts, "name": "eyes"}, 200, {"ok": True})
        text = _text(rng, 15)
        return _fields(n, "slack", "write", "POST", f"{SLACK}/chat.update",
                       {"channel": channel, "ts": ts, "text": text}, 200,
                       {"ok": True, "channel": channel, "ts": ts, "text": text})
    number = r % 2000 + 1  # github
    if not write:
        return _fields(n, "github", "read", "GET", f"{GH}/issues/{number}", None, 200, {
            "number": number, "title": _text(rng, 6), "state": "open", "body": _text(rng, 30),
            "labels": [{"name": "bug"}], "node_id": f"I_{number}"})
    if rng.random() < 0.5:
        return _fields(n, "github", "write", "PATCH", f"{GH}/issues/{number}", {"state": "closed"}, 200,
                       {"number": number, "state": "closed", "title": _text(rng, 6)})
    return _fields(n, "github", "write", "POST", f"{GH}/issues/{number}/comments", {"body": _text(rng, 20)}, 201,
                   {"id": 10_000_000 + n, "body": _text(rng, 20), "issue_url": f"{GH}/issues/{number}"})


def build_session(root: Path, entries: int, resources: int) -> tuple[Path, int]:
    vault = Vault.create(root)
    path = vault.session_path(SESSION)
    rng = random.Random(2026)
    write_chained(path, (make_call(n, rng, resources) for n in range(1, entries + 1)))
    return path, path.stat().st_size


# -- child processes ----------------------------------------------------------------------------------


def child(op: str, root: str) -> dict:
    """Run one operation in this (fresh) process; report wall time and peak RSS."""
    from journal.replay import replay_session, write_outputs
    from journal.verify import verify_session

    vault = Vault.open_existing(root)
    shutil.rmtree(vault.views_dir, ignore_errors=True)  # every replay round creates its files afresh
    t0 = time.perf_counter()
    out: dict = {}
    if op == "verify":
        r = verify_session(vault, SESSION)
        out["intact"] = r.intact
    elif op in ("replay", "fold"):
        rp = replay_session(vault, SESSION)
        out.update(intact=rp.intact, resources=len(rp.resources), steps=len(rp.steps))
        if op == "replay":
            t_write = time.perf_counter()
            folder, files = write_outputs(vault, rp)
            out["write_seconds"] = time.perf_counter() - t_write
            out["files"] = len(files)
            out["bytes_written"] = sum((folder / f).stat().st_size for f in files)
    elif op != "idle":
        raise SystemExit(f"unknown op {op}")
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = time.process_time()  # this process only (the forked children are not in it)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # replay forks the verifier, the fold's partner and a views writer (forked.py, split.py): the largest
    out["children_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return out


def run_child(op: str, root: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "bench.replay_bench", "--child", op, str(root)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rounds(k: int, ops: tuple[str, ...], root: Path) -> dict[str, dict]:
    """Run the ops interleaved, k rounds (so load on the machine hits them alike); keep each op's best."""
    runs: dict[str, list[dict]] = {op: [] for op in ops}
    for _ in range(k):
        for op in ops:
            runs[op].append(run_child(op, root))
    out = {}
    for op, rs in runs.items():
        best = dict(min(rs, key=lambda r: r["seconds"]))
        best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
        best["children_peak_rss_mb"] = max(r["children_peak_rss_mb"] for r in rs)
        best["median_seconds"] = sorted(r["seconds"] for r in rs)[len(rs) // 2]
        best["runs"] = [round(r["seconds"], 3) for r in rs]
        out[op] = best
    return out


def profile_replay(root: Path) -> str:
    import cProfile
    import io
    import pstats

    from journal.replay import replay_session, write_outputs

    vault = Vault.open_existing(root)
    prof = cProfile.Profile()
    prof.enable()
    write_outputs(vault, replay_session(vault, SESSION))
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1], argv[2])))
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.replay_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (10,000 entries, 1,000 resources, 1 repeat)")
    ap.add_argument("--entries", type=int, help="entries in the session (default 100,000)")
    ap.add_argument("--resources", type=int, help="distinct resources per connector pool (default 5,000)")
    ap.add_argument("--repeat", type=int, help="runs per measurement, best kept (default 3, --quick 1)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'replay')")
    ap.add_argument("--profile", action="store_true", help="also print cProfile hot spots of one replay")
    args = ap.parse_args(argv)
    entries = args.entries or (10_000 if args.quick else 100_000)
    resources = args.resources or (1_000 if args.quick else 5_000)
    repeat = args.repeat or (1 if args.quick else 3)
    if entries < 1 or resources < 1 or repeat < 1:
        ap.error("--entries, --resources and --repeat must be positive")

    root = scratch_dir("replay-") / "vault"
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    try:
        path, size = build_session(root, entries, resources)
        build_s = time.perf_counter() - t0
        idle = run_child("idle", root)
        best = rounds(repeat, ("verify", "fold", "replay"), root)
        verify, fold, replay = best["verify"], best["fold"], best["replay"]
        prof = profile_replay(root) if args.profile else ""
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
    total = time.perf_counter() - t0
    ratio = replay["seconds"] / verify["seconds"]
    rows = [("verify (baseline)", verify), ("replay: fold only", fold), ("replay: fold + write views", replay)]
    print(f"session: {entries:,} entries, {size / 1e6:.1f} MB, {resources:,} resources per connector pool "
          f"(built in {build_s:.1f} s)")
    print(f"replay derived {replay['resources']:,} resources, {replay['steps']:,} plan steps, "
          f"{replay['files']:,} files, {replay['bytes_written'] / 1e6:.1f} MB written")
    print(f"\n{'operation':<28} {'best s':>8} {'median s':>9} {'entries/s':>10} {'MB/s':>7} {'peak RSS MB':>12} "
          f"{'child RSS':>10} {'x verify':>9}")
    for name, r in rows:
        print(f"{name:<28} {r['seconds']:>8.2f} {r['median_seconds']:>9.2f} {entries / r['seconds']:>10,.0f} "
              f"{size / 1e6 / r['seconds']:>7.1f} {r['peak_rss_mb']:>12.0f} {r['children_peak_rss_mb']:>10.0f} "
              f"{r['seconds'] / verify['seconds']:>9.2f}")
    print(f"{'(interpreter + imports)':<28} {'':>8} {'':>10} {'':>7} {idle['peak_rss_mb']:>12.0f}")
    print(f"\nof the best replay, writing the views took {replay['write_seconds']:.2f} s "
          f"({replay['files']:,} files: rendering the Markdown and JSON, then creating them)")
    print("(peak RSS: the measuring process; child RSS: the largest process it forked, i.e. replay's verifier, "
          "fold partner or views writer, journal/replay/forked.py and split.py)")
    print(f"\nratio replay / verify = {ratio:.2f} (same file, same run; best of {repeat}); median ratio "
          f"{replay['median_seconds'] / verify['median_seconds']:.2f}; load average before the run "
          f"{load_before}; "
          f"total {total:.1f} s on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    if prof:
        print(prof)
    if args.json:
        write_json(args.json, "replay", {
            "machine": machine(), "params": {"entries": entries, "resources": resources, "repeat": repeat,
                                             "file_bytes": size},
            "verify": verify, "fold": fold, "replay": replay, "idle": idle, "ratio_replay_to_verify": ratio,
            "median_ratio_replay_to_verify": replay["median_seconds"] / verify["median_seconds"],
            "load_average_before": load_before,
            "total_seconds": total,
        })
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
