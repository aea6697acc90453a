"""Checkpoint benchmarks: what sealing costs per entry against the append itself; proof sizes and times.

    python -m bench.checkpoint_bench [--quick] [--sizes 1000,100000,1000000] [--every N] [--json FILE]

1. Baseline, same run: `JournalWriter.append_many` of ~700-byte entries in batches of 100, each batch
   fdatasync'ed (the recording service's path). Then the same appends with an `Autosealer` attached
   (writer `on_durable` hook, a checkpoint every N entries, the clean stop's checkpoint included):
   ratio = time with sealing / time without.
2. Per tree size n (10^3, 10^5, 10^6): the Merkle tree append per entry; one checkpoint round
   (root, consistency check against the previous checkpoint and the index, Ed25519 signature, atomic
   write of the checkpoint and the signed index with their fsyncs); sealing's cost per entry with a
   checkpoint every N entries = tree append + round / N, and its ratio to the durable append per entry.
3. Sizes: checkpoint note, inclusion proof (leaf n/2), consistency proof (n/2 -> n), a `broker prove`
   bundle; and the time to verify an inclusion and a consistency proof.

Nothing here asserts a timing; the figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import statistics
import sys
import time

import orjson

from bench import machine, scratch_dir, write_json
from journal.checkpoint.autoseal import AutosealConfig, Autosealer
from journal.checkpoint.checkpoint import Checkpoint
from journal.checkpoint.merkle import MerkleTree, leaf_hash, verify_consistency, verify_inclusion
from journal.checkpoint.note import Signer, sign_note
from journal.checkpoint.sealer import Sealer
from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields

BATCH = 100


def _append(root, n: int, sealer: Autosealer | None) -> float:
    batch = [fields(session="bench", n=i) for i in range(BATCH)]
    with JournalWriter(root, on_durable=sealer.appended if sealer else None) as w:
        t0 = time.perf_counter()
        for _ in range(n // BATCH):
            w.append_many(batch)
    if sealer is not None:
        sealer.close()
    return time.perf_counter() - t0


def appends(tmp, n: int, every: int, key_path: str, rounds: int = 3) -> dict:
    """Plain, sealed, plain, `rounds` times (fresh files each); the median of the ratios around each
    sealed run, since a shared disk's pace drifts."""
    ratios, plain_us, sealed_us = [], [], []
    for r in range(rounds):
        before = _append(tmp / f"plain{r}a", n, None)
        vault = Vault.create(tmp / f"sealed{r}")
        sealed = _append(vault.root, n, Autosealer(vault, AutosealConfig(key_path, entries=every, seconds=3600)))
        after = _append(tmp / f"plain{r}b", n, None)
        ratios.append(sealed / ((before * after) ** 0.5))
        plain_us.append((before + after) / 2 / n * 1e6)
        sealed_us.append(sealed / n * 1e6)
    return {"entries": n, "rounds": rounds, "append_us": statistics.median(plain_us),
            "append_with_sealing_us": statistics.median(sealed_us), "ratio": statistics.median(ratios)}


def per_size(tmp, n: int, every: int, signer: Signer, append_us: float) -> dict:
    leaves = [os.urandom(32) for _ in range(n)]
    t0 = time.perf_counter()
    tree = MerkleTree()
    for d in leaves:
        tree.append(d)
    tree_us = (time.perf_counter() - t0) / n * 1e6
    vault = Vault.create(tmp / f"v{n}")
    sealer = Sealer(vault, signer)
    sealer.seal({"bench": MerkleTree(leaves[: max(1, n - every)])})  # the previous checkpoint
    rounds = []
    for _ in range(3):
        t1 = time.perf_counter()
        sealer.seal({"bench": tree})
        rounds.append(time.perf_counter() - t1)
        tree.append(os.urandom(32))
    round_s = min(rounds)
    note = sign_note(Checkpoint("example.org/vault-0123456789abcdef/bench", tree.size, tree.root()).body(), signer)
    i = tree.size // 2
    inc = tree.inclusion_proof(i)
    root = tree.root()
    lh = tree.leaf_hash_at(i)
    reps = 2000
    t2 = time.perf_counter()
    for _ in range(reps):
        verify_inclusion(i, tree.size, lh, inc, root)
    inc_us = (time.perf_counter() - t2) / reps * 1e6
    m = max(1, tree.size // 2)
    cons = tree.consistency_proof(m)
    old_root = tree.root(m)
    t3 = time.perf_counter()
    for _ in range(reps):
        verify_consistency(m, tree.size, old_root, root, cons)
    cons_us = (time.perf_counter() - t3) / reps * 1e6
    line = orjson.dumps(fields(n=1))  # a typical entry line, for the bundle size
    bundle = orjson.dumps({"format": "connector-journal-proof/1", "session": "bench", "seq": i + 1,
                           "line": line.decode(), "tree_size": tree.size,
                           "inclusion_proof": [base64.b64encode(h).decode() for h in inc],
                           "checkpoint": note.decode()}, option=orjson.OPT_INDENT_2)
    assert leaf_hash(leaves[0]) == tree.leaf_hash_at(0)
    seal_us = tree_us + round_s / every * 1e6
    return {
        "n": n, "tree_append_us": tree_us, "round_ms": round_s * 1e3, "sealing_us_per_entry": seal_us,
        "ratio_to_append": seal_us / append_us, "checkpoint_bytes": len(note),
        "inclusion_hashes": len(inc), "inclusion_bytes": 32 * len(inc), "consistency_hashes": len(cons),
        "consistency_bytes": 32 * len(cons), "bundle_bytes": len(bundle), "verify_inclusion_us": inc_us,
        "verify_consistency_us": cons_us, "tree_memory_bytes_per_entry": 64,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.checkpoint_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (sizes 1,000 and 10,000)")
    ap.add_argument("--sizes", help="comma-separated tree sizes (default 1000,100000,1000000)")
    ap.add_argument("--every", type=int, default=1000, help="a checkpoint every N entries (default 1000)")
    ap.add_argument("--appends", type=int, help="entries appended for the baseline (default 20,000; quick 2,000)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'checkpoint')")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [1000, 10_000] if args.quick else [1000, 100_000, 1_000_000])
    n_append = args.appends or (2000 if args.quick else 20_000)
    tmp = scratch_dir("checkpoint-")
    t0 = time.perf_counter()
    try:
        signer = Signer.generate("bench.example/vault")
        key_path = tmp / "bench.key"
        key_path.write_text(signer.key_text() + "\n")
        base = appends(tmp, n_append, args.every, str(key_path))
        rows = [per_size(tmp, n, args.every, signer, base["append_us"]) for n in sizes]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"durable append (batches of {BATCH}, fdatasync each): {base['append_us']:.1f} us/entry; "
          f"with checkpoints every {args.every} (autosealer thread): {base['append_with_sealing_us']:.1f} us/entry "
          f"(median ratio x{base['ratio']:.3f} over {base['rounds']} rounds), {base['entries']:,} entries each")
    print(f"\n{'entries':>10} {'tree us':>8} {'round ms':>9} {'seal us/e':>10} {'x append':>9} {'ckpt B':>7} "
          f"{'incl B':>7} {'cons B':>7} {'bundle B':>9} {'v-incl us':>10} {'v-cons us':>10}")
    for r in rows:
        print(f"{r['n']:>10,} {r['tree_append_us']:>8.2f} {r['round_ms']:>9.2f} {r['sealing_us_per_entry']:>10.2f} "
              f"{r['ratio_to_append']:>9.3f} {r['checkpoint_bytes']:>7} {r['inclusion_bytes']:>7} "
              f"{r['consistency_bytes']:>7} {r['bundle_bytes']:>9} {r['verify_inclusion_us']:>10.1f} "
              f"{r['verify_consistency_us']:>10.1f}")
    total = time.perf_counter() - t0
    print(f"\nseal us/e = tree append + one checkpoint round / {args.every}; x append = that / the durable append "
          f"per entry above. Tree memory: 64 bytes per entry. Total {total:.1f} s on {os.cpu_count()} CPUs.")
    if args.json:
        write_json(args.json, "checkpoint", {"machine": machine(), "every": args.every, "append": base,
                                             "sizes": rows, "total_seconds": total})
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
