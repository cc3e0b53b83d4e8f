"""Put time of the response store at its byte bound, with OWNERS API keys storing in turn.

.venv/bin/python -m bench.store_owners [--puts 3000] [--owners 2,50] [--rounds 3]
    [--baseline DIR]

Each run stores PUTS unrelated responses (a small body and three 1 KB input items, as in the
README's figures) into a new database bounded at a fifth of what they take, so most puts evict;
owner i of the run stores every OWNERS-th response (a heavy key: owner 0 also stores every
other one). Prints the median and p90 put time (ms) of the last half (the store full), and
the process CPU time a put of that half, and the store thread's own CPU time a put (`_put`,
the mean of the 3 cheapest 100-put batches of that half: the steadiest on a loaded machine). With
--baseline (a tree such as `git archive <rev> | tar -x -C DIR`), each round runs the baseline
and this tree in turn (the first alternating), each in a subprocess of its own, and prints the ratio of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics as stats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


async def run(path: Path, puts: int, owners: int) -> dict[str, float]:
    """Store PUTS responses of OWNERS keys in a new store at PATH; the put times (ms)."""
    from gateway.storage.responses import ResponseStore
    one = 3 * 1100 + 120
    store = ResponseStore(path, max_count=0, max_bytes=puts * one // 5)
    await store.open()
    times, cpu, own = [], 0.0, []
    inner = store._put

    def timed(*args: Any) -> bool:  # the store thread's own CPU time, the steadiest measure
        t0 = time.thread_time()
        try:
            return inner(*args)
        finally:
            own.append((time.thread_time() - t0) * 1e3)
    setattr(store, "_put", timed)  # noqa: B010 - a method replaced on one instance
    for i in range(puts):
        if i == puts // 2:
            cpu = time.process_time()
        owner = "k0" if i % 2 else f"k{(i // 2) % owners}"
        rid = f"resp_{i:08d}"
        items = [{"id": f"msg_{i}_{j}", "type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": f"{i} {j} " + "x" * 1024}]}
                 for j in range(3)]
        t0 = time.perf_counter()
        assert await store.put(rid, owner, {"id": rid, "object": "response",
                                            "created_at": int(time.time())}, items)
        times.append((time.perf_counter() - t0) * 1e3)
    cpu = (time.process_time() - cpu) * 1e3 / (puts - puts // 2)
    count = await store.count()
    await store.close()
    tail = sorted(times[puts // 2:])
    mine = own[puts // 2:]
    batches = sorted(stats.mean(mine[k:k + 100]) for k in range(0, len(mine), 100))
    return {"median": stats.median(tail), "p90": tail[int(len(tail) * 0.9)], "cpu": cpu,
            "thread": stats.mean(batches[:3]), "kept": count}


def _one(tree: Path, puts: int, owners: int) -> dict[str, float]:
    """One run in a subprocess with TREE first on the path."""
    out = subprocess.run([sys.executable, "-m", "bench.store_owners", "--single", str(owners),
                          "--puts", str(puts)], cwd=tree, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(tree)})
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Run the rounds and print a line per run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--puts", type=int, default=3000)
    ap.add_argument("--owners", default="2,50")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--single", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.single:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(asyncio.run(run(Path(tmp) / "r.sqlite3", args.puts, args.single))))
        return
    trees: list[tuple[str, Path]] = [("this", ROOT)]
    if args.baseline:
        trees.insert(0, ("base", args.baseline.resolve()))
    for rnd in range(args.rounds):
        for owners in (int(o) for o in args.owners.split(",")):
            turn = trees if rnd % 2 == 0 else trees[::-1]  # which goes first alternates
            res: dict[str, Any] = {name: _one(tree, args.puts, owners) for name, tree in turn}
            line = " ".join(f"{n} {res[n]['median']:.3f}/{res[n]['p90']:.3f} ms cpu "
                            f"{res[n]['cpu']:.3f} thread {res[n]['thread']:.3f} ms (kept "
                            f"{res[n]['kept']})" for n, _ in trees)
            ratio = "".join(f" {k} {res['this'][k] / res['base'][k]:.2f}"
                            for k in ("median", "cpu", "thread")) if "base" in res else ""
            print(f"round {rnd} owners {owners}: {line}{ratio}", flush=True)


if __name__ == "__main__":
    main()
